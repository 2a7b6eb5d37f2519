// Package a2a is a client of the A2A (agent-to-agent) protocol: it fetches
// a remote agent's card from a pinned URL and talks to the agent over
// JSON-RPC in the protocol version the card declares, A2A v1.0 or v0.3.
//
// It provides:
//   - agent cards, normalized over the v1.0 and v0.3 card shapes
//     (FetchAgentCard, AgentCard.JSONRPCInterface, AgentCard.Extension);
//   - a JSON-RPC client (Client) for SendMessage, GetTask, CancelTask,
//     push notification configs and task subscriptions, whose streamed
//     responses are read as server-sent events;
//   - version-neutral Task, Message, Part, Artifact and StreamEvent types,
//     task states normalized from either version's wire names (TaskState);
//   - parsing of inbound push notification bodies and their tokens
//     (ParsePushNotification, PushTokenFromRequest), and of message content
//     supplied by a caller that does not speak A2A (ParseMessageContent);
//   - the protocol's errors: the A2A error codes as sentinels matched by
//     *RPCError, *HTTPStatusError, ErrMalformedResponse, ErrBodyTooLarge,
//     and Retryable to tell which failed calls may be repeated unchanged.
//
// It reports what a remote agent said and nothing more. It is a protocol
// library another program could use: it must never import the ledger, the
// compensation or delegate packages or the sql/ store, never decide what a
// remote answer means for anyone's obligations, and never make a request
// except through the *http.Client it is given — in Quittance always the
// SSRF-safe one of delegate/egress, whose refusals it treats as final. A
// push notification is only a hint: a caller confirms it with GetTask
// before acting on it.
package a2a
