-- OpenID Connect identities (ledger/access/PRINCIPALS.md#people-signed-in-by-openid-connect):
-- which principal an identity provider's (issuer, subject) signs in as.

-- name: OIDCIdentityGet :one
SELECT * FROM oidc_identities WHERE issuer = @issuer AND subject = @subject;

-- name: OIDCIdentityGetForUpdate :one
SELECT * FROM oidc_identities WHERE issuer = @issuer AND subject = @subject FOR UPDATE;

-- name: OIDCIdentityInsert :execrows
-- Records an identity unless it exists: two first sign-ins of one identity
-- at once record it once (the second waits for the first to commit).
INSERT INTO oidc_identities (issuer, subject, principal_id, recorded_principal_id, linked_by, linked_at)
VALUES (@issuer, @subject, @principal_id, sqlc.narg(recorded_principal_id), sqlc.narg(linked_by), @linked_at)
ON CONFLICT (issuer, subject) DO NOTHING;

-- name: OIDCIdentityRelink :execrows
-- Points every identity that signs in as from_principal at to_principal:
-- the identity being linked, and any identity linked to its principal
-- before, so every identity keeps pointing at a principal that is its own
-- person (principal_person).
UPDATE oidc_identities SET principal_id = @to_principal, linked_by = @linked_by, linked_at = @linked_at
WHERE principal_id = @from_principal;

-- name: OIDCIdentityList :many
SELECT * FROM oidc_identities ORDER BY principal_id, linked_at, issuer, subject;

-- name: OIDCIdentityListByPrincipal :many
SELECT * FROM oidc_identities WHERE principal_id = @principal_id ORDER BY linked_at, issuer, subject;

-- name: PrincipalInsertIfAbsent :execrows
-- Inserts a principal unless one with its id, or its name key, exists.
INSERT INTO principals (id, kind, display_name, name_key, role, tenant, bootstrap, created_by, created_at)
VALUES (@id, @kind, @display_name, @name_key, @role, @tenant, false, NULL, @created_at)
ON CONFLICT DO NOTHING;

-- name: PrincipalPerson :one
-- The principal that is the person of a principal (itself, unless an
-- identity it was recorded for was linked to another).
SELECT principal_person(@id::uuid)::uuid AS person;

-- name: PrincipalAliases :one
-- The other principals of the same person.
SELECT principal_aliases(@id::uuid)::uuid[] AS aliases;
