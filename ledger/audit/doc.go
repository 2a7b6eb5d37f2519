// Package audit checks what the ledger recorded: checkpoints of the event
// streams, event times, evidence packs and the tokens stored as evidence
// (ledger/DESIGN.md §6).
//
// # What this package must never do
//
// It never trusts what it verifies: every hash, chain and signature is
// recomputed from the bytes it is given. It never writes events, and it
// imports no other domain package (compensation, delegate), no HTTP and
// nothing under sql/.
package audit
