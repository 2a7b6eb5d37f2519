// Package jspeer runs an A2A remote agent built on the official JS SDK
// (@a2a-js/sdk 1.3.x, in Node 20 or later) for interop tests: Start installs
// the pinned npm packages once per machine into the user cache directory,
// starts the agent (agent/agent.mjs) on a free loopback port, and stops it
// when the test ends.
//
// The agent speaks A2A v1.0 JSON-RPC (and v0.3 through the SDK's
// compatibility layer), streams, sends push notifications, and implements
// Quittance's compensation extension with receipts signed by an Ed25519 key
// that the harness generates, so tests can verify them against Peer.JWKS.
// Its scenarios are chosen by the text of the first user message; see the
// Scenario constants. Besides the task lifecycles, they cover the remote
// answers Quittance must not misread: a compensation answered pending and
// completed later on the same task (ScenarioCompensationPending), one
// answered not_supported (ScenarioCompensationNotSupported), and a task
// purged when it is canceled, after which every call on it answers
// TaskNotFoundError (ScenarioPurgeOnCancel). Peer.CompensationRequests and
// Peer.Purged report what the peer received and did, from its output.
//
// It is test support only and must never be imported by non-test code. It
// is not under an internal directory only so that the HTTP API's tests
// (cmd/quittance/internal/httpapi), which run the interop lifecycle through
// Quittance's public API, can import it. It
// skips (or, with QUITTANCE_REQUIRE_JS_PEER set, fails) the test when node
// or npm is missing rather than install anything system-wide.
package jspeer
