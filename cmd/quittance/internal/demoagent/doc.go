// Package demoagent is a small A2A v1.0 remote agent that plays a supplier
// organization for local demonstrations and tests: it takes procurement
// requests, commits a purchase order while it works, keeps that purchase
// order when its task is canceled (the gap Quittance exists to close), and
// implements Quittance's compensation extension
// (https://quittance.dev/a2a/compensation/v1), reversing the purchase order
// and answering with a compensation receipt signed by the org's Ed25519 key.
// The extension's card declaration, the reading of a request and the signed
// receipt come from compensation/kit, the kit a remote org's agent uses.
//
// It speaks JSON-RPC A2A v1.0 over net/http: the agent card, SendMessage,
// SendStreamingMessage, GetTask, ListTasks (by context, newest first),
// CancelTask, SubscribeToTask and CreateTaskPushNotificationConfig, with
// push notifications on every status change. It deduplicates on messageId
// and keeps the contextId a client sets on a new task. State lives in memory and is lost when the process stops.
//
// Config picks how it answers where remote agents differ: a compensation
// request reversed at once, answered pending and completed later on the same
// task, or answered not_supported (Config.Compensation); a receipt in the
// cancel reply itself (Config.AtomicCancel); or a task purged as soon as it
// is asked to cancel it, so that the cancel and every later call on the task
// answer TaskNotFoundError (Config.PurgeOnCancel).
//
// It is a stand-in for another organization's agent and nothing more: it
// never imports the ledger's store or service, never talks to Quittance
// except through the push endpoints Quittance registers with it, and is not
// meant to be exposed beyond a developer's machine (it has no
// authentication and no persistence).
package demoagent
