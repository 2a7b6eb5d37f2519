-- name: WriteOffInsert :exec
INSERT INTO write_offs (
    id, delegation_id, amount_minor, currency, reason, reference, status,
    requested_by, requested_by_id, approved_by, approved_by_id, created_at, executed_at
) VALUES (
    @id, @delegation_id, @amount_minor, @currency, @reason, @reference, @status,
    @requested_by, @requested_by_id, @approved_by, @approved_by_id, @created_at, @executed_at
);

-- name: WriteOffGetByID :one
SELECT * FROM write_offs WHERE id = $1;

-- name: WriteOffGetByIDForUpdate :one
SELECT * FROM write_offs WHERE id = $1 FOR UPDATE;

-- name: WriteOffUpdate :execrows
UPDATE write_offs SET
    status         = @status,
    approved_by    = @approved_by,
    approved_by_id = @approved_by_id,
    executed_at    = @executed_at
WHERE id = @id;
