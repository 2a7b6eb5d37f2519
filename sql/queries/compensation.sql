-- name: OrgGetByIDForUpdate :one
SELECT * FROM remote_orgs WHERE id = $1 FOR UPDATE;

-- name: DelegationListEscalatableByOrgForUpdate :many
-- Every obligation an identity revocation escalates, locked in id order.
SELECT * FROM delegations
WHERE org_id = $1
  AND obligation_state IN ('held', 'revocation_pending_compensation', 'compensation_unconfirmed')
ORDER BY id
FOR UPDATE;

-- name: DelegationClaimPastDeadline :many
-- The sweep's claim: rows another transaction holds (another replica's
-- sweep, an ack being applied) are skipped, never waited for or taken twice.
SELECT * FROM delegations
WHERE obligation_state = 'revocation_pending_compensation'
  AND compensation_deadline <= @now
ORDER BY compensation_deadline, id
LIMIT @max_rows
FOR UPDATE SKIP LOCKED;

-- name: UsedTokenGet :one
SELECT * FROM used_token_ids WHERE org_id = $1 AND jti = $2;

-- name: UsedTokenInsert :execrows
INSERT INTO used_token_ids (org_id, jti, delegation_id, token_sha256, used_at)
VALUES (@org_id, @jti, @delegation_id, @token_sha256, @used_at)
ON CONFLICT (org_id, jti) DO NOTHING;

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
