-- name: PrincipalGetByID :one
SELECT * FROM principals WHERE id = $1;

-- name: PrincipalGetByIDForUpdate :one
SELECT * FROM principals WHERE id = $1 FOR UPDATE;

-- name: PrincipalGetByNameKeyForUpdate :one
SELECT * FROM principals WHERE name_key = $1 FOR UPDATE;

-- name: PrincipalList :many
SELECT * FROM principals ORDER BY created_at, id;

-- name: PrincipalInsert :exec
INSERT INTO principals (id, kind, display_name, name_key, role, tenant, bootstrap, created_by, created_at)
VALUES (@id, @kind, @display_name, @name_key, @role, @tenant, @bootstrap, @created_by, @created_at);

-- name: PrincipalUpdate :exec
UPDATE principals SET
    role            = @role,
    tenant          = @tenant,
    bootstrap       = @bootstrap,
    disabled_at     = @disabled_at,
    disabled_by     = @disabled_by,
    disabled_reason = @disabled_reason
WHERE id = @id;

-- name: PrincipalCountActiveOncall :one
-- On-call principals that are not the bootstrap principal and not
-- disabled: the bootstrap credential may create two, and no more.
-- The advisory lock serializes bootstrap creations.
SELECT count(*) FROM principals
WHERE role = 'oncall' AND NOT bootstrap AND disabled_at IS NULL;

-- name: PrincipalLockRegistry :exec
SELECT pg_advisory_xact_lock(7239410021);
