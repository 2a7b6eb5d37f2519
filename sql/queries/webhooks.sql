-- name: WebhookEndpointUpsert :one
INSERT INTO webhook_endpoints (tenant, id, url, event_types, secret, created_at, updated_at)
VALUES (@tenant, @id, @url, @event_types, @secret, @now, @now)
ON CONFLICT (tenant, id) DO UPDATE SET
    url         = EXCLUDED.url,
    event_types = EXCLUDED.event_types,
    updated_at  = EXCLUDED.updated_at
RETURNING *, (xmax = 0)::boolean AS inserted;

-- name: WebhookEndpointGet :one
SELECT * FROM webhook_endpoints WHERE tenant = $1 AND id = $2;

-- name: WebhookDeliveryList :many
SELECT * FROM webhook_deliveries
WHERE tenant = @tenant AND endpoint_id = @endpoint_id
  AND (sqlc.narg(status)::text IS NULL OR status = sqlc.narg(status))
  AND (sqlc.narg(before_id)::bigint IS NULL OR id < sqlc.narg(before_id))
ORDER BY id DESC
LIMIT @max_rows;

-- name: WebhookDeliveryClaim :many
WITH due AS (
    SELECT id FROM webhook_deliveries
    WHERE status = 'pending'
      AND next_attempt_at <= @now
      AND (locked_until IS NULL OR locked_until <= @now)
      -- A push config's deliveries go one at a time, oldest first: each
      -- carries the task as it stands when sent, so a receiver never gets
      -- an older task after a newer one.
      AND (push_config_id IS NULL OR NOT EXISTS (
          SELECT 1 FROM webhook_deliveries e
          WHERE e.push_delegation_id = webhook_deliveries.push_delegation_id
            AND e.push_config_id = webhook_deliveries.push_config_id
            AND e.status = 'pending' AND e.id < webhook_deliveries.id))
    ORDER BY next_attempt_at, id
    LIMIT @max_rows
    FOR UPDATE SKIP LOCKED
)
UPDATE webhook_deliveries d SET
    locked_until = @lease_until,
    lease_token  = @lease_token,
    attempts     = d.attempts + 1,
    updated_at   = @now
FROM due
WHERE d.id = due.id
RETURNING d.*;

-- name: WebhookDeliveryDone :execrows
UPDATE webhook_deliveries SET
    status       = 'delivered',
    last_status  = @last_status,
    last_error   = NULL,
    delivered_at = @now,
    locked_until = NULL,
    lease_token  = NULL,
    updated_at   = @now
WHERE id = @id AND lease_token = @lease_token AND status = 'pending';

-- name: WebhookDeliveryFail :execrows
UPDATE webhook_deliveries SET
    status          = CASE WHEN @dead::boolean THEN 'dead' ELSE 'pending' END,
    next_attempt_at = @next_attempt_at,
    last_status     = @last_status,
    last_error      = @last_error,
    locked_until    = NULL,
    lease_token     = NULL,
    updated_at      = @now
WHERE id = @id AND lease_token = @lease_token AND status = 'pending';

-- name: WebhookDeliveryRedrive :execrows
-- Puts dead-lettered deliveries (optionally of one tenant and endpoint)
-- back to pending, due now, with their attempts reset.
UPDATE webhook_deliveries SET
    status          = 'pending',
    attempts        = 0,
    next_attempt_at = @now,
    locked_until    = NULL,
    lease_token     = NULL,
    updated_at      = @now
WHERE status = 'dead'
  AND (sqlc.narg(tenant)::text IS NULL OR tenant = sqlc.narg(tenant))
  AND (sqlc.narg(endpoint_id)::text IS NULL OR endpoint_id = sqlc.narg(endpoint_id));

-- name: WebhookDeliveryDueNow :execrows
-- Makes pending deliveries (optionally of one tenant and endpoint) due now.
UPDATE webhook_deliveries SET next_attempt_at = @now, updated_at = @now
WHERE status = 'pending' AND next_attempt_at > @now
  AND (sqlc.narg(tenant)::text IS NULL OR tenant = sqlc.narg(tenant))
  AND (sqlc.narg(endpoint_id)::text IS NULL OR endpoint_id = sqlc.narg(endpoint_id));
