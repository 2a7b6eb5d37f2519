// Package a2a is a client of the A2A (agent-to-agent) protocol: it fetches
// a remote agent's card from a pinned URL and talks to the agent over the
// binding and protocol version of the interface it is given: JSON-RPC in
// A2A v1.0 or v0.3 (hand-written), HTTP+JSON or gRPC in v1.0 (through
// a2a-go v2's transports, their results converted to this package's types).
//
// It provides:
//   - agent cards, normalized over the v1.0 and v0.3 card shapes
//     (FetchAgentCard, AgentCard.PreferredInterface — the first interface
//     of the card's declared order the client speaks —, AgentCard.Extension);
//   - a client (Client) for SendMessage, GetTask, ListTasks, CancelTask,
//     push notification configs and task subscriptions on any of those
//     bindings, answering the same way whichever carried the call;
//   - version-neutral Task, Message, Part, Artifact and StreamEvent types,
//     task states normalized from either version's wire names (TaskState);
//   - parsing of inbound push notification bodies and their tokens
//     (ParsePushNotification, PushTokenFromRequest), and of message content
//     supplied by a caller that does not speak A2A (ParseMessageContent);
//   - the protocol's errors: the A2A error codes as sentinels matched by
//     *RPCError (the HTTP+JSON and gRPC bindings' ErrorInfo reasons become
//     the same codes), *HTTPStatusError, *GRPCStatusError,
//     ErrMalformedResponse, ErrBodyTooLarge, and Retryable to tell which
//     failed calls may be repeated unchanged.
//
// It reports what a remote agent said and nothing more. It is a protocol
// library another program could use: it must never import the ledger, the
// compensation or delegate packages or the sql/ store, never decide what a
// remote answer means for anyone's obligations, and never make a request
// except through the *http.Client it is given — in Quittance always the
// SSRF-safe one of delegate/egress, whose refusals it treats as final; the
// gRPC binding opens its connections with that client's transport's
// dialer (egress's DialURL), under the same policy. A
// push notification is only a hint: a caller confirms it with GetTask
// before acting on it.
package a2a
