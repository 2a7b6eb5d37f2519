// Package compensation is the second half of a delegation's obligation: after a
// remote task ends canceled or failed, the delegator is not discharged until the
// remote org acknowledges compensation of the effects it committed, declares (signed)
// that it committed none, or an on-call human writes the obligation off.
//
// The package covers compensation requests and their retries, compensation acks,
// no-compensation-required declarations and the verification of their signatures,
// compensation deadlines, escalation when a remote org's identity is revoked, and
// write-offs.
//
// # Signed evidence
//
// Acks and declarations that arrive over HTTP are compact JWS tokens. The JOSE
// work — parsing, the algorithm allow-list, the header rules, resolving the key by
// kid, the signature and its decoy keys, JWK Sets inline and fetched, thumbprints
// and the ledger's own signing key — is internal/jose's; this package decides what
// a token means. [PeekToken] reads the untrusted issuer, subject and key id so the
// caller can find the org's registered keys — and, only once the token verified,
// the delegation ([Service.Submit] answers every refusal before that alike, as
// [CodeTokenRefused], after the same work — one signature verification —, and
// counts its reason instead of telling it); [Verify] checks the token against that
// org's JWK Set only (see ledger/DESIGN.md §3) with an explicit "typ" so an ack can
// never pass as a declaration, then the iss, aud, sub, jti, iat and exp claims and
// an ack's own claims. Every refusal is a [*RefusalError] with a stable code (the
// JOSE leaf's reasons map to theirs one to one); its detail is safe to log and,
// where Submit tells it, to return. Idempotency-key matching and jti replay
// detection belong to the caller, inside the database transaction that records the
// evidence; the codes for those refusals are defined here so that every refusal has
// the same shape. [SignCompensationRequest] signs what the ledger asks of a remote
// org, and [CheckpointSigner] and [VerifyCheckpoint] sign and verify checkpoints,
// with the ledger's key (jose.Identity).
//
// # The one evidence function
//
// Every release, compensation and settlement goes through
// [Service.ApplyEvidence] (ledger/DESIGN.md §3): posted tokens
// ([Service.Submit]), receipts on Quittance's own A2A calls
// ([Service.ApplyRemoteReceipt]) and the terminal status of a held
// obligation ([Service.ObserveTaskStatus]). Write-offs alone take their own
// two-person path.
//
// # What this package must never do
//
// It never imports pgx or the generated store code: it defines the small interfaces
// it needs and the sql packages implement them. It opens no outbound connection but
// through the *http.Client it is given. It never reads the wall clock itself:
// time is passed in. And nothing in it ever releases a hold because time passed: a
// deadline only moves an obligation from revocation_pending_compensation to
// compensation_unconfirmed; money moves only on evidence (an ack, a verified
// declaration, or an approved write-off).
package compensation
