-- name: GatewayPushConfigCount :one
-- How many push configs the delegation has, other than @id.
SELECT count(*)::integer FROM gateway_push_configs WHERE delegation_id = @delegation_id AND id <> @id;

-- name: GatewayPushConfigUpsert :one
-- Registers a push config, or replaces the one of the same id on the
-- delegation (its URL, token and authentication), as A2A's
-- CreateTaskPushNotificationConfig does for an id it already has.
INSERT INTO gateway_push_configs (delegation_id, id, tenant, url, token, auth_scheme, auth_credentials, created_at, updated_at)
VALUES (@delegation_id, @id, @tenant, @url, @token, @auth_scheme, @auth_credentials, @now, @now)
ON CONFLICT (delegation_id, id) DO UPDATE SET
    url              = EXCLUDED.url,
    token            = EXCLUDED.token,
    auth_scheme      = EXCLUDED.auth_scheme,
    auth_credentials = EXCLUDED.auth_credentials,
    updated_at       = EXCLUDED.updated_at
RETURNING *;

-- name: GatewayPushConfigGet :one
SELECT * FROM gateway_push_configs WHERE delegation_id = @delegation_id AND id = @id;

-- name: GatewayPushConfigList :many
SELECT * FROM gateway_push_configs WHERE delegation_id = @delegation_id ORDER BY created_at, id;

-- name: GatewayPushConfigDelete :execrows
DELETE FROM gateway_push_configs WHERE tenant = @tenant AND delegation_id = @delegation_id AND id = @id;

-- name: GatewayPushLastPending :one
-- The newest pending delivery of a push config: every event before it
-- was committed when it was read.
SELECT coalesce(max(id), 0)::bigint FROM webhook_deliveries
WHERE push_delegation_id = @delegation_id AND push_config_id = @id AND status = 'pending';

-- name: GatewayPushSupersede :execrows
-- Marks delivered the pending deliveries of a push config up to @up_to
-- (but the claimed one, recorded by WebhookDeliveryDone): a push carries
-- the task as it stood when it was sent, after their events.
UPDATE webhook_deliveries SET
    status       = 'delivered',
    last_status  = @last_status,
    last_error   = NULL,
    delivered_at = @now,
    locked_until = NULL,
    lease_token  = NULL,
    updated_at   = @now
WHERE push_delegation_id = @delegation_id AND push_config_id = @id AND status = 'pending'
  AND id <= @up_to AND id <> @claimed_id AND lease_token IS NULL;
