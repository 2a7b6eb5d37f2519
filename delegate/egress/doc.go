// Package egress is the SSRF-safe way out of Quittance: the policy that says
// where outbound HTTP requests may go (Policy), the static checks on a URL
// someone registers (Policy.ValidateURL, ParseAllowCIDRs for the
// configuration), and the guarded http.Client every outbound request goes
// through (NewClient) — A2A agent cards, JSON-RPC and HTTP+JSON calls and
// streams, JWKS and webhook deliveries alike; A2A's gRPC binding dials its
// connections with the same client's transport (DialURL).
//
// The production policy (the zero Policy) allows https only, and only to
// globally routable addresses; a name is checked again on the address it
// resolves to when the connection is made, so DNS cannot move a request
// somewhere the static check refused. A refusal is always ErrDenied
// (wrapped).
//
// It is a leaf: it imports no Quittance package and knows nothing of A2A,
// webhooks or the ledger. It must never honour proxy environment variables,
// follow a redirect of a POST, or open a connection without checking the
// address it dials.
package egress
