// Package console serves Quittance's web console under /console/: server
// rendered pages for on-call and finance over the same services, with the
// same role checks, as the HTTP API. A handler gathers what a page shows
// from the services and a template shows it; no rule of the ledger lives
// here (which role may do what is ledger.Principal.Permits, which the
// services enforce).
//
// Sessions are random ids in HttpOnly, SameSite=Strict cookies, stored
// hashed in PostgreSQL (ledger/session); every state-changing form carries
// a CSRF token derived from the session id, and every page is sent with a
// Content-Security-Policy that allows no inline script and no framing.
//
// It must never put a credential in a page, a URL or a log, never load
// anything from another host, and never change anything on a GET.
package console
