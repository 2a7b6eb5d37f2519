-- name: MessageInsert :execrows
INSERT INTO delegation_messages (
    delegation_id, message_id, a2a_message_id, request_hash, payload, status, created_at, updated_at
) VALUES (
    @delegation_id, @message_id, @a2a_message_id, @request_hash, @payload, 'queued', @now, @now
)
ON CONFLICT (delegation_id, message_id) DO NOTHING;

-- name: MessageGet :one
SELECT * FROM delegation_messages WHERE delegation_id = $1 AND message_id = $2;

-- name: MessageListQueued :many
SELECT * FROM delegation_messages WHERE delegation_id = $1 AND status = 'queued' ORDER BY created_at, message_id;

-- name: MessageFinish :exec
UPDATE delegation_messages SET
    status       = @status,
    attempts     = attempts + 1,
    error        = @error,
    result_state = @result_state,
    sent_at      = CASE WHEN @status::text = 'sent' THEN @now::timestamptz ELSE sent_at END,
    updated_at   = @now
WHERE delegation_id = @delegation_id AND message_id = @message_id;

-- name: MessageAttempt :exec
UPDATE delegation_messages SET attempts = attempts + 1, error = @error, updated_at = @now
WHERE delegation_id = @delegation_id AND message_id = @message_id;

-- name: LinkInsert :exec
INSERT INTO delegation_links (delegation_id, linked_id, kind, created_at)
VALUES (@delegation_id, @linked_id, @kind, @now)
ON CONFLICT DO NOTHING;

-- name: LinkListFrom :many
SELECT delegation_id, linked_id, kind FROM delegation_links WHERE delegation_id = $1 ORDER BY kind, created_at, linked_id;

-- name: LinkListTo :many
SELECT delegation_id, linked_id, kind FROM delegation_links WHERE linked_id = $1 ORDER BY kind, created_at, delegation_id;

-- name: SnapshotGet :one
SELECT snapshot, updated_at FROM task_snapshots WHERE delegation_id = $1;

-- name: SnapshotGetForUpdate :one
SELECT snapshot, updated_at FROM task_snapshots WHERE delegation_id = $1 FOR UPDATE;

-- name: SnapshotPut :exec
INSERT INTO task_snapshots (delegation_id, snapshot, updated_at) VALUES (@delegation_id, @snapshot, @now)
ON CONFLICT (delegation_id) DO UPDATE SET snapshot = EXCLUDED.snapshot, updated_at = EXCLUDED.updated_at;

-- name: FeedList :many
-- Events after a commit-ordered position, in commit order, optionally of
-- one tenant or one delegation.
SELECT p.pos, sqlc.embed(e) FROM event_positions p
JOIN events e ON e.seq = p.seq
WHERE p.pos > @after_pos
  AND (sqlc.narg(tenant)::text IS NULL OR p.tenant = sqlc.narg(tenant))
  AND (sqlc.narg(delegation_id)::uuid IS NULL OR p.delegation_id = sqlc.narg(delegation_id))
ORDER BY p.pos
LIMIT @max_rows;

-- name: FeedPositionOf :one
SELECT pos FROM event_positions WHERE seq = $1;

-- name: FeedHead :one
SELECT coalesce(max(pos), 0)::bigint FROM event_positions;

-- name: EventGetBySeq :one
SELECT * FROM events WHERE seq = $1;

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
