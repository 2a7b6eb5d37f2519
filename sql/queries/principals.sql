-- name: PrincipalGetByID :one
-- With the other principals of the same person (principal_aliases), and
-- whether an OpenID Connect identity's first sign-in recorded it.
SELECT sqlc.embed(p), principal_aliases(p.id)::uuid[] AS aliases,
       EXISTS (SELECT 1 FROM oidc_identities o WHERE o.recorded_principal_id = p.id)::boolean AS recorded_by_idp
FROM principals p WHERE p.id = $1;

-- name: PrincipalGetByIDForUpdate :one
SELECT * FROM principals WHERE id = $1 FOR UPDATE;

-- name: PrincipalGetByNameKeyForUpdate :one
SELECT * FROM principals WHERE name_key = $1 FOR UPDATE;

-- name: PrincipalList :many
-- With the other principals of the same person (principal_aliases), and
-- whether an OpenID Connect identity's first sign-in recorded it.
SELECT sqlc.embed(p), principal_aliases(p.id)::uuid[] AS aliases,
       EXISTS (SELECT 1 FROM oidc_identities o WHERE o.recorded_principal_id = p.id)::boolean AS recorded_by_idp
FROM principals p ORDER BY p.created_at, p.id;

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

-- name: PrincipalCountBootstrapSpent :one
-- How many of the bootstrap credential's two on-call principals are
-- spent: every principal other than the bootstrap one that was ever
-- on-call (made_oncall_at, never cleared), and every principal the
-- bootstrap principal ever created, disabled or not. Neither a disable nor
-- a demotion gives one back, so holding the bootstrap secret does not
-- re-arm it (disable or demote bob, mint "mallory"). The advisory lock
-- (PrincipalLockRegistry) serializes bootstrap creations.
SELECT count(*) FROM principals p
WHERE NOT p.bootstrap
  AND (p.made_oncall_at IS NOT NULL
       OR p.created_by IN (SELECT b.id FROM principals b WHERE b.bootstrap));

-- name: PrincipalsUnaccountedPair :one
-- Whether the two principals may be one human that Quittance cannot tell
-- apart (principals_unaccounted_pair, migration 00039).
SELECT principals_unaccounted_pair(@a::uuid, @b::uuid)::boolean AS pair;

-- name: PrincipalMarkNoIdentityProviderAccount :execrows
UPDATE principals SET no_identity_provider_account_at = @at, no_identity_provider_account_by = @by
WHERE id = @id AND no_identity_provider_account_at IS NULL;

-- name: PrincipalTenantInUse :one
-- Whether a tenant was ever given to a principal or a credential, has
-- delegations or is named by a budget: only the first orchestrator of an
-- unused tenant is created without a second approver (it can hold on no
-- budget).
SELECT (EXISTS (SELECT 1 FROM principals p WHERE p.tenant = @tenant::text)
    OR EXISTS (SELECT 1 FROM api_tokens t WHERE t.tenant = @tenant::text)
    OR EXISTS (SELECT 1 FROM delegations d WHERE d.tenant = @tenant::text)
    OR EXISTS (SELECT 1 FROM budgets b WHERE @tenant::text = ANY (b.tenants)))::boolean AS used;

-- name: PrincipalLockRegistry :exec
SELECT pg_advisory_xact_lock(7239410021);
