// Package report is the ledger's read side: reconciliation and reporting,
// the overview, the event feed, token refusals, revoked releases, and case
// handling (owners, notes, snoozes, the needs-action queue) on obligations
// (ledger/DESIGN.md §5).
//
// # What this package must never do
//
// It never writes money or moves an obligation: case handling records its
// own events and nothing else. It reads through its own store interfaces
// (CaseStore, CaseTx and their siblings), never a ledger.Tx, and it imports
// no other domain package (compensation, delegate), no HTTP and nothing
// under sql/.
package report
