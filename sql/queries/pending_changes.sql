-- name: PendingChangeInsert :exec
INSERT INTO pending_changes (id, kind, target, payload, summary, status, requested_by, requested_at, expires_at)
VALUES (@id, @kind, @target, @payload, @summary, 'pending', @requested_by, @requested_at, @expires_at);

-- name: PendingChangeGetByID :one
SELECT * FROM pending_changes WHERE id = $1;

-- name: PendingChangeGetByIDForUpdate :one
SELECT * FROM pending_changes WHERE id = $1 FOR UPDATE;

-- name: PendingChangeList :many
SELECT * FROM pending_changes
WHERE (sqlc.narg(status)::text IS NULL OR status = sqlc.narg(status))
ORDER BY requested_at DESC, id DESC
LIMIT 500;

-- name: PendingChangeDecide :exec
UPDATE pending_changes SET status = @status, decided_by = @decided_by, decided_at = @decided_at, decision_reason = @decision_reason
WHERE id = @id;

-- name: PendingChangeExpiredForUpdate :many
SELECT * FROM pending_changes WHERE status = 'pending' AND expires_at <= @now
ORDER BY expires_at LIMIT 100 FOR UPDATE SKIP LOCKED;

-- name: PendingChangeOpenByRequesterForUpdate :many
SELECT * FROM pending_changes WHERE status = 'pending' AND requested_by = @requested_by
ORDER BY requested_at, id FOR UPDATE;
