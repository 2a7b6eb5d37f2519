-- Write-off listings and rejections (compensation/writeoff_decisions.go).

-- name: WriteOffList :many
SELECT * FROM write_offs w
WHERE (cardinality(@statuses::text[]) = 0 OR w.status = ANY (@statuses::text[]))
  AND (sqlc.narg(delegation_id)::uuid IS NULL OR w.delegation_id = sqlc.narg(delegation_id))
ORDER BY w.created_at DESC, w.id DESC
LIMIT @max_rows;

-- name: WriteOffReject :execrows
UPDATE write_offs SET
    status = 'rejected',
    rejected_by = @rejected_by,
    rejected_by_id = @rejected_by_id,
    rejection_reason = @rejection_reason,
    rejected_at = @rejected_at
WHERE id = @id AND status = 'pending_approval';
