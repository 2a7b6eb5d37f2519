-- Write-off listings and rejections (compensation/writeoff_decisions.go).

-- name: WriteOffList :many
SELECT * FROM write_offs w
WHERE (cardinality(@statuses::text[]) = 0 OR w.status = ANY (@statuses::text[]))
ORDER BY w.created_at DESC, w.id DESC
LIMIT @max_rows;

-- name: WriteOffListByDelegation :many
-- WriteOffList of one delegation (a delegation's page): its own statement,
-- so that its plan, generic too, finds the delegation's write-offs through
-- write_offs_delegation (migration 00045) rather than reading them all.
SELECT * FROM write_offs w
WHERE w.delegation_id = @delegation_id
  AND (cardinality(@statuses::text[]) = 0 OR w.status = ANY (@statuses::text[]))
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
