// Package gateway is Quittance's A2A face for orchestrating agents: for
// every registered org with an agent, an A2A 1.0 server (JSON-RPC and
// HTTP+JSON, served by a2a-go v2's a2asrv), with an A2A 0.3 JSON-RPC face
// over the same handler (v03.go), whose tasks are Quittance's dispatched
// delegations. An orchestrator that already speaks A2A points
// its client at /a2a/orgs/{org}/ instead of the org's agent and puts the
// ledger extension's data (budget, hold, task class) in the message's
// metadata; every task it creates is held, dispatched, tracked and gated
// exactly as POST /v1/delegations with dispatch does, through the same
// service calls (ledger.Service.CreateDelegation, RequestCancel,
// delegate.Orchestrator). Nothing here decides an outcome or moves money:
// the gateway translates between A2A and those calls (GATEWAY.md).
package gateway
