// Package session keeps the console's browser sessions: a random session
// id, held by the browser in an HttpOnly cookie, names a principal until
// the session expires or is ended. Only the SHA-256 of the id is stored,
// in PostgreSQL, so every replica serves every session and a copy of the
// table opens none.
//
// It never stores, returns or logs the credential a session was started
// with, and it never decides what a principal may do: the ledger's
// services do, with the principal a session resolves to.
package session
