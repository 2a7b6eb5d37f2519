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
// Acks and declarations posted over HTTP are compact JWS tokens. The JOSE
// work is internal/jose's; this package decides what a token means:
// [PeekToken] reads its untrusted issuer, [Verify] checks it against that
// org's keys and its claims (ledger/DESIGN.md §3), and every refusal is a
// [*RefusalError] with a stable code. [SignCompensationRequest],
// [CheckpointSigner] and [VerifyCheckpoint] use the ledger's own key.
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
