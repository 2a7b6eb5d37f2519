-- name: CredentialAuthenticate :one
-- A credential with its principal, by the hash of its secret, and the
-- other principals of the same person (principal_aliases).
SELECT sqlc.embed(t), sqlc.embed(p), principal_aliases(p.id)::uuid[] AS aliases
FROM api_tokens t JOIN principals p ON p.id = t.principal_id
WHERE t.token_hash = $1;

-- name: CredentialGetByIDForUpdate :one
SELECT * FROM api_tokens WHERE id = $1 FOR UPDATE;

-- name: CredentialGetByID :one
SELECT * FROM api_tokens WHERE id = $1;

-- name: CredentialList :many
SELECT * FROM api_tokens
WHERE (sqlc.narg(principal_id)::uuid IS NULL OR principal_id = sqlc.narg(principal_id))
ORDER BY created_at, id;

-- name: CredentialInsert :exec
INSERT INTO api_tokens (id, principal_id, name, role, tenant, token_hash, created_at, expires_at)
VALUES (@id, @principal_id, @name, @role, @tenant, @token_hash, @created_at, @expires_at);

-- name: CredentialRevoke :execrows
UPDATE api_tokens SET revoked_at = @revoked_at, revoked_by = @revoked_by, revoke_reason = @revoke_reason
WHERE id = @id AND revoked_at IS NULL;

-- name: CredentialRevokeAllOfPrincipal :many
UPDATE api_tokens SET revoked_at = @revoked_at, revoked_by = @revoked_by, revoke_reason = @revoke_reason
WHERE principal_id = @principal_id AND revoked_at IS NULL
RETURNING id;

-- name: CredentialTouch :exec
-- Records a use at most once a minute per credential.
UPDATE api_tokens SET last_used_at = @used_at
WHERE id = @id AND (last_used_at IS NULL OR last_used_at < @stale_before);
