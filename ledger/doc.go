// Package ledger is Quittance's domain: the delegations an organization
// makes to other organizations' agents, the money held for them, and the
// append-only audit log of everything that happened to them.
//
// A delegation has two lifecycles. Its TaskStatus is the remote A2A task as
// last observed (ParseTaskStatus accepts every wire form; a terminal status
// is immutable). Its ObligationState is Quittance's own: what is still owed
// after the remote task record is closed. NextObligation is that state
// machine, a pure function over every (state, ObligationEvent) pair;
// TerminalStatusEvent and GateApplies decide which event a terminal status
// raises, and HoldMove which budget movement goes with a transition. Time
// alone never moves a hold, and a hold leaves "active" only through a
// transition of NextObligation.
//
// Every change of a delegation is written by Apply (or Record, for an event
// that changes nothing): the state change, its hold movement and exactly
// one event commit in one Tx, or nothing does. Every event, of a
// delegation's stream or of a budget's, org's, task class's or token's, is
// appended by Append. Events form one hash chain
// per stream (Event.ComputeHash, VerifyChain) and are never updated or
// deleted; EventType is the catalogue of what they record, and EventRecord
// their published JSON form.
//
// Remote text is data: StorableText and StorableJSON define what is stored
// in place of text the database refuses (a NUL, invalid UTF-8, an unpaired
// surrogate, a number jsonb's numeric cannot hold), and StorableEvent
// applies them to an event before it is hashed, so an event's hash covers
// exactly the data stored, byte for byte.
//
// Service holds the use cases (delegations, hold changes, cancels, budgets,
// orgs, task classes, and requesting the pending changes of these; a task
// status is observed, and its terminal statuses applied as evidence, by the
// compensation package; principals, credentials and the decisions on
// pending changes are ledger/access; the read side is ledger/report, the
// audit ledger/audit). It authorizes through the
// action table (Authorize, permissions.go), takes the time from an
// injected Clock, and passes it to the Store, which never reads a clock. Errors are sentinels
// (ErrNotFound, ErrForbidden, …) and struct errors (*ValidationError,
// *ConflictError, *TransitionError, …); the HTTP layer maps them to statuses
// in one place.
//
// # What this package must never do
//
// It defines the interfaces it consumes (Store, Reader, Tx and the narrower
// ChangeTx and EventAppender, Clock) and
// never imports their implementations: no pgx, no database/sql, nothing
// under sql/ (neither the store nor the sqlc output).
// It imports no HTTP framework and no net/http: its types carry no huma or
// JSON-schema tags, and the HTTP layer has its own body types. It imports no
// other domain package (compensation, delegate, ledger/webhook) and none of
// its own subpackages but ledger/failpoint (ledger/access, ledger/audit,
// ledger/report); they import it. Apart from the standard library, it depends on github.com/google/uuid,
// ledger/failpoint and internal/text (the one rule for cutting text, a leaf
// package) only (a test checks this).
package ledger
