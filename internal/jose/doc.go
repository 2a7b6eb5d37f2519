// Package jose is Quittance's JOSE leaf: the strict reading of compact JWS
// tokens, the signature algorithm allow-list, remote orgs' JWK Sets (inline
// and fetched from a JWKS URL), RFC 7638 thumbprints, and the ledger's own
// signing key with the JWK Set it publishes. It wraps
// github.com/go-jose/go-jose/v4 with the rules of ledger/DESIGN.md §3:
// keys are resolved by "kid" among the keys given, never from the token;
// every header that could bring or point at a key is refused; a token that
// passes the header rules costs one signature verification whether or not
// a usable key was found (decoy keys).
//
// [Verify] checks a token's header, key and signature and returns its
// verified payload; every refusal is a [*Refusal] with a [Reason], which
// the caller turns into its own refusal codes. [ParseOrgJWKS] validates a
// JWK Set an org registers, [NewJWKSFetcher] fetches one, [KeyCache] keeps
// them parsed. [Identity] signs with the ledger's key; [VerifySigned]
// verifies what it signed against the JWK Set it publishes.
//
// # What this package must never do
//
// It imports no package of this module (but internal/text) and no other
// module than go-jose: it knows nothing of delegations, orgs as records,
// evidence or checkpoints (a test checks this). It never decides what a
// token means: the claims of an ack, a declaration, a compensation request
// or a checkpoint, and what is done with them, belong to its callers. It
// opens no connection but through the *http.Client it is given, and it
// never logs.
package jose
