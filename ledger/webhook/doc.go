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
// It must never import pgx, the sql/ store or the delegate packages (it is
// handed its HTTP client and URL check), never send anywhere the egress
// policy forbids, and never log a secret or a signature.
package webhook
