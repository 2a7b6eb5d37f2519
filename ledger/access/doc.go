// Package access is who may do what in the ledger: principals and their
// credentials, authentication and its cache, OpenID Connect identities,
// and pending changes decided under the two-person rule
// (ledger/DESIGN.md §5 and §6, ledger/access/PRINCIPALS.md).
//
// The types it works on (ledger.Principal, ledger.Role, ledger.Token,
// ledger.PendingChange) and the permissions table stay in the core, which
// every package reads; this package holds the rules that create, check and
// change them. It decides every pending change, the core's kinds included:
// those it applies through ledger.Service.ApplyChange, in the same
// transaction (Tx.Ledger).
//
// # What this package must never do
//
// It never moves money or an obligation: an approval of a core change is
// applied by the core. It never stores a secret, only hashes. It imports no
// other domain package (compensation, delegate), no HTTP and nothing under
// sql/.
package access
