-- name: UsedTokenGet :one
SELECT * FROM used_token_ids WHERE org_id = $1 AND jti = $2;

-- name: UsedTokenInsert :execrows
INSERT INTO used_token_ids (org_id, jti, delegation_id, token_sha256, used_at)
VALUES (@org_id, @jti, @delegation_id, @token_sha256, @used_at)
ON CONFLICT (org_id, jti) DO NOTHING;
