// Package delegate is Quittance acting as an A2A client on the ledger's
// behalf: the outbox worker that makes every outbound call a delegation
// needs, and the domain types it keeps about a delegation's remote task.
//
// It provides:
//   - the Worker, which claims due outbound jobs with a lease — dispatch,
//     cancel, compensation request, observe, follow-up message — makes the
//     remote call outside any transaction, and records the answer in a new
//     one through ledger.Apply, compensation.Service.ObserveTaskStatus and
//     compensation.Service.ApplyRemoteReceipt (which hand terminal statuses
//     and receipts to the one evidence function, ApplyEvidence) or
//     compensation.Service.RequestFailed (which decides what a failed or
//     exhausted compensation request means); it also polls and streams
//     dispatched tasks and receives push notifications (ReceivePush); it
//     dispatches in a context of its own choosing (DispatchContextID), and
//     finds, records, cancels and names in the compensation request every
//     extra task an agent created for a delegation (remotetasks.go),
//     resolving dispatch_unknown by a ListTasks lookup where it can;
//   - the Orchestrator, the orchestrating agent's use cases on a dispatched
//     delegation: answering a remote task that stopped for input or
//     authorization (Continue), and reading back those answers and the
//     latest snapshot of the remote task, and on-call's resolution of an
//     unknown dispatch (ResolveDispatch); it writes through its own
//     OrchestratorTx, a small part of the Worker's Tx, queues work for the
//     Worker and never calls a remote agent itself;
//   - the validators the ledger is wired with for what it will dispatch
//     (ValidateDispatchMessage, ValidateAgentEndpoint);
//   - the domain types the sql/ store persists: Job, Tracking, FollowUp,
//     TaskSnapshot, RemoteTask.
//
// It speaks to remote agents only through delegate/a2a, over the SSRF-safe
// client of delegate/egress it is given. A task state a remote agent
// reports becomes an observation for the ledger and nothing more: this
// package never decides obligation outcomes itself (settling, releasing,
// compensating, writing off belong to the ledger and compensation
// packages), never releases a hold on an ambiguous answer, never imports
// pgx or the sql/ store, and never opens an outbound connection except
// through the client it is given. A push notification is only a hint: it
// is confirmed with GetTask before anything is applied.
package delegate
