// Package webhook delivers a tenant's delegation events to the HTTPS
// endpoints it registers, signed the Standard Webhooks way (webhook-id,
// webhook-timestamp, webhook-signature: v1,<base64 HMAC-SHA256 of
// "id.timestamp.body"> under a per-endpoint whsec_ secret).
//
// Every delivery is an outbox row written by the store in the same
// transaction as the event it carries, so an event can never be committed
// without its deliveries. Workers on every replica claim due rows with a
// lease, POST them through the SSRF-safe client the wiring gives them (the
// same egress policy as A2A calls), and retry failures with bounded
// exponential backoff; a delivery that keeps failing is dead-lettered until
// on-call redrives it. A receiver therefore sees each event at least once,
// identified by the same webhook-id on every attempt.
//
// The A2A gateway's push notification configs (PushConfig) are delivered
// by the same outbox and workers: a push is a delivery whose target is a
// config of one delegation rather than a tenant's endpoint, queued with
// each of the delegation's events, its body the task as the gateway shows
// it when sent (PushRenderer), signed with Sign under PushSecret.
//
// It must never import pgx, the sql/ store or the delegate packages (it is
// handed its HTTP client and URL check), never send anywhere the egress
// policy forbids, and never log a secret or a signature.
package webhook
