// Package delegate is Quittance acting as an A2A client on the ledger's
// behalf (ledger/DESIGN.md §4 and §5; the wire: A2A.md).
//
// It provides:
//   - the Worker, which claims due outbound jobs with a lease — dispatch,
//     cancel, compensation request, observe, follow-up message — makes the
//     remote call outside any transaction, and records the answer in a new
//     one; it also polls and streams dispatched tasks, receives push
//     notifications (ReceivePush), and finds and accounts for the extra
//     tasks an agent created for a delegation (remotetasks.go);
//   - the Orchestrator, the orchestrating agent's use cases on a dispatched
//     delegation: answering an interrupted task (Continue), reading back
//     answers and the latest task snapshot, and on-call's resolution of an
//     unknown dispatch (ResolveDispatch);
//   - the validators the ledger is wired with (ValidateDispatchMessage,
//     ValidateAgentEndpoint);
//   - the domain types the sql/ store persists: Job, Tracking, FollowUp,
//     TaskSnapshot, RemoteTask.
//
// A task state a remote agent reports becomes an observation for
// compensation.Service and nothing more: this package decides no
// obligation outcome and never releases a hold on an ambiguous answer. It
// speaks to agents only through delegate/a2a over the egress client it is
// given, and never imports pgx or the sql/ store.
package delegate
