-- name: TokenRefusalCount :one
-- Counts one refused token for (org_id, reason) and returns the new count,
-- whose remainder by the ring size is the sample slot it takes.
INSERT INTO token_refusals (org_id, reason, refused, first_at, last_at)
VALUES (@org_id, @reason, 1, @at, @at)
ON CONFLICT (org_id, reason) DO UPDATE
SET refused = token_refusals.refused + 1,
    last_at = greatest(token_refusals.last_at, excluded.last_at)
RETURNING refused;

-- name: TokenRefusalSamplePut :exec
INSERT INTO token_refusal_samples (org_id, reason, slot, kind, token_sha256, token_bytes, claimed_issuer, client_address, at)
VALUES (@org_id, @reason, @slot, @kind, @token_sha256, @token_bytes, @claimed_issuer, @client_address, @at)
ON CONFLICT (org_id, reason, slot) DO UPDATE
SET kind = excluded.kind, token_sha256 = excluded.token_sha256, token_bytes = excluded.token_bytes,
    claimed_issuer = excluded.claimed_issuer, client_address = excluded.client_address, at = excluded.at;

-- name: TokenRefusalList :many
-- The refusal counts last updated at or after since (all when null), by
-- org and reason.
SELECT * FROM token_refusals
WHERE sqlc.narg(since)::timestamptz IS NULL OR last_at >= sqlc.narg(since)
ORDER BY org_id, reason;

-- name: TokenRefusalSampleList :many
-- The kept samples of the listed refusal counts, newest first.
SELECT s.* FROM token_refusal_samples s
JOIN token_refusals r USING (org_id, reason)
WHERE sqlc.narg(since)::timestamptz IS NULL OR r.last_at >= sqlc.narg(since)
ORDER BY s.org_id, s.reason, s.at DESC, s.slot DESC;

-- name: SharedRemoteTaskList :many
-- Remote task ids of one org recorded by delegations of more than one
-- tenant: evidence for them is told apart by the compensation idempotency
-- key only, so on-call sees each. At most max_rows of them, off the kept
-- set (migration 00033).
SELECT org_id, remote_task_id::text AS remote_task_id,
       delegation_ids::uuid[] AS delegation_ids, tenants::text[] AS tenants,
       last_created_at::timestamptz AS last_created_at
FROM reporting.shared_remote_tasks_v1
ORDER BY last_created_at, org_id, remote_task_id
LIMIT @max_rows;
