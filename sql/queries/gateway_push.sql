-- name: GatewayPushConfigCount :one
-- How many push configs the delegation has, other than @id.
SELECT count(*)::integer FROM gateway_push_configs WHERE delegation_id = @delegation_id AND id <> @id;

-- name: GatewayPushConfigUpsert :one
-- Registers a push config, or replaces the one of the same id on the
-- delegation (its URL, token, authentication and protocol version), as
-- A2A's CreateTaskPushNotificationConfig does for an id it already has.
INSERT INTO gateway_push_configs (delegation_id, id, tenant, url, token, auth_scheme, auth_credentials, protocol_version, created_at, updated_at)
VALUES (@delegation_id, @id, @tenant, @url, @token, @auth_scheme, @auth_credentials, @protocol_version, @now, @now)
ON CONFLICT (delegation_id, id) DO UPDATE SET
    url              = EXCLUDED.url,
    token            = EXCLUDED.token,
    auth_scheme      = EXCLUDED.auth_scheme,
    auth_credentials = EXCLUDED.auth_credentials,
    protocol_version = EXCLUDED.protocol_version,
    updated_at       = EXCLUDED.updated_at
RETURNING *;

-- name: GatewayPushConfigGet :one
SELECT * FROM gateway_push_configs WHERE delegation_id = @delegation_id AND id = @id;

-- name: GatewayPushConfigList :many
SELECT * FROM gateway_push_configs WHERE delegation_id = @delegation_id ORDER BY created_at, id;

-- name: GatewayPushConfigDelete :execrows
DELETE FROM gateway_push_configs WHERE tenant = @tenant AND delegation_id = @delegation_id AND id = @id;

-- name: GatewayPushPending :many
-- The pending deliveries of a push config, but the claimed one @claimed_id:
-- their events were committed when they were read.
SELECT id FROM webhook_deliveries
WHERE push_delegation_id = @delegation_id AND push_config_id = @id AND status = 'pending' AND id <> @claimed_id
ORDER BY id;

-- name: GatewayPushSupersede :execrows
-- Marks delivered the pending deliveries @ids of a push config (read by
-- GatewayPushPending before the push's task was read): the push that
-- succeeded carries the task as it stood after their events.
UPDATE webhook_deliveries SET
    status       = 'delivered',
    last_status  = @last_status,
    last_error   = NULL,
    delivered_at = @now,
    locked_until = NULL,
    lease_token  = NULL,
    updated_at   = @now
WHERE id = ANY(@ids::bigint[]) AND status = 'pending' AND lease_token IS NULL;

-- name: GatewayPushQueueCurrent :exec
-- Queues a push of the task as it stands to a config just registered,
-- keyed to the delegation's last event: a task that moved before its
-- config was stored (a worker is quick) is pushed its current state at
-- once, not at its next change.
INSERT INTO webhook_deliveries (tenant, push_delegation_id, push_config_id, event_seq, next_attempt_at, created_at, updated_at)
SELECT @tenant::text, @delegation_id::uuid, @id::text, e.seq, @now::timestamptz, @now, @now
FROM events e
WHERE e.delegation_id = @delegation_id::uuid
ORDER BY e.seq DESC
LIMIT 1
ON CONFLICT DO NOTHING;
