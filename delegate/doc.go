// Package delegate is the A2A client side of Quittance: it talks to the
// agents of remote organizations on the ledger's behalf.
//
// It provides:
//   - an SSRF-safe HTTP client (NewHTTPClient) that every outbound request
//     goes through — agent cards, JSON-RPC calls, SSE streams, JWKS — and the
//     static URL checks (ValidateURL) used when an organization registers URLs;
//   - agent card fetching from a pinned URL, normalized over the A2A v1.0 and
//     v0.3 card shapes (FetchAgentCard);
//   - a JSON-RPC client that speaks A2A v1.0 or v0.3, as the card says, with
//     domain-neutral Task, Message and StreamEvent types (Client);
//   - an SSE reader for streamed responses;
//   - parsing of inbound push notification bodies and tokens
//     (ParsePushNotification, PushTokenFromRequest).
//
// A task state reported by a remote agent is normalized to ledger.TaskStatus
// and nothing more: this package reports what the remote side said. It never
// decides obligation outcomes (settling, releasing, compensating, writing off
// belong to the ledger and compensation packages), never imports pgx or the
// sql/ store, and never opens an outbound connection except through the
// client built by NewHTTPClient. A push notification is only a hint: callers
// confirm it with GetTask before acting on it.
package delegate
