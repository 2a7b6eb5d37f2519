-- Console sessions (ledger/session). Only the SHA-256 of a session id is
-- stored. A token session reads its principal from the token as it is now,
-- so revoking the token ends the session, and an OpenID Connect session
-- reads its principal, so disabling it ends the session; times come from
-- the caller's clock.

-- name: ConsoleSessionInsert :exec
INSERT INTO console_sessions (
    id_hash, source, token_id, principal_id, principal_name, role, tenant, created_at, expires_at
) VALUES (
    @id_hash, @source, sqlc.narg(token_id), @principal_id, @principal_name, @role, sqlc.narg(tenant), @created_at, @expires_at
);

-- name: ConsoleSessionGetByHash :one
-- The one rule of which sessions are live (ledger/session): a token session
-- while its credential is unrevoked and unexpired and its principal not
-- disabled; an OpenID Connect session while its principal is not disabled,
-- still holds the role the session signed in with, and is its own person
-- (its identity was not linked to another principal since). owner_id is the
-- principal four-eyes compares (the token's principal, or an OIDC
-- session's), aliases the other principals of the same person. The role is
-- the principal's as it is now, except that a session the bootstrap
-- credential started outside dev keeps its restricted role.
SELECT
    s.id_hash, s.source, s.principal_id, s.created_at, s.expires_at,
    coalesce(t.principal_id, s.principal_id)::uuid AS owner_id,
    coalesce(p.display_name, op.display_name, s.principal_name)::text AS principal_name,
    (CASE WHEN s.role = 'bootstrap' THEN s.role ELSE coalesce(p.role, s.role) END)::text AS role,
    coalesce(p.tenant, s.tenant, '')::text   AS tenant,
    principal_aliases(coalesce(t.principal_id, s.principal_id))::uuid[] AS aliases
FROM console_sessions s
LEFT JOIN api_tokens t ON t.id = s.token_id
LEFT JOIN principals p ON p.id = t.principal_id
LEFT JOIN principals op ON s.source = 'oidc' AND op.id = s.principal_id
WHERE s.id_hash = @id_hash
  AND s.expires_at > @now
  AND (s.token_id IS NULL OR (
        t.id IS NOT NULL AND t.revoked_at IS NULL
        AND (t.expires_at IS NULL OR t.expires_at > @now)
        AND p.disabled_at IS NULL))
  AND (s.source <> 'oidc' OR (
        op.id IS NOT NULL AND op.disabled_at IS NULL AND op.role = s.role
        AND principal_person(op.id) = op.id));

-- name: ConsoleSessionDelete :exec
DELETE FROM console_sessions WHERE id_hash = @id_hash;

-- name: ConsoleSessionDeleteExpired :execrows
DELETE FROM console_sessions WHERE expires_at <= @now;

-- name: ConsoleSessionListByPrincipal :many
SELECT s.id_hash, s.source, s.principal_id, s.principal_name, s.role, coalesce(s.tenant, '')::text AS tenant,
       s.created_at, s.expires_at
FROM console_sessions s
WHERE s.principal_id = @principal_id AND s.expires_at > @now
ORDER BY s.created_at DESC
LIMIT 100;
