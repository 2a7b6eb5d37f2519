-- name: DelegationListDeclaredReleasesByOrgForUpdate :many
-- Every obligation of the org released on one of its declarations (the
-- no_compensation_required evidence an identity revocation discredits),
-- locked in id order.
SELECT * FROM delegations
WHERE org_id = $1
  AND obligation_state = 'released'
  AND obligation_reason = 'no_compensation_declared'
ORDER BY id
FOR UPDATE;

-- name: RevokedReleaseInsert :exec
INSERT INTO revoked_identity_releases (delegation_id, org_id, amount_minor, currency, released_at, identity_revoked_at)
VALUES (@delegation_id, @org_id, @amount_minor, @currency, @released_at, @identity_revoked_at)
ON CONFLICT (delegation_id) DO NOTHING;

-- name: RevokedReleaseGetForUpdate :one
SELECT * FROM revoked_identity_releases WHERE delegation_id = $1 FOR UPDATE;

-- name: RevokedReleaseAcknowledge :exec
UPDATE revoked_identity_releases
SET acknowledged_at = @acknowledged_at, acknowledged_by = @acknowledged_by, acknowledge_note = @acknowledge_note
WHERE delegation_id = @delegation_id AND acknowledged_at IS NULL;

-- name: RevokedReleaseTotals :many
-- Unacknowledged releases on revoked identities, by org and currency.
SELECT r.org_id, r.currency, count(*) AS release_count, sum(r.amount_minor)::bigint AS amount_minor
FROM revoked_identity_releases r
JOIN delegations d ON d.id = r.delegation_id
WHERE r.acknowledged_at IS NULL
  AND (sqlc.narg(org_id)::text IS NULL OR r.org_id = sqlc.narg(org_id))
  AND (sqlc.narg(tenant)::text IS NULL OR d.tenant = sqlc.narg(tenant))
GROUP BY r.org_id, r.currency
ORDER BY r.org_id, r.currency;

-- name: DelegationListUnannouncedRevokedReleasesForUpdate :many
-- Delegations with a release on a revoked identity but no
-- released_on_revoked_identity event: the releases migration 00020 surfaced
-- for identities revoked before 00018. Locked, skipping rows another
-- transaction holds, in id order.
SELECT d.* FROM delegations d
JOIN revoked_identity_releases r ON r.delegation_id = d.id
WHERE NOT EXISTS (
    SELECT FROM events e WHERE e.delegation_id = d.id AND e.type = 'released_on_revoked_identity')
ORDER BY d.id
LIMIT $1
FOR UPDATE OF d SKIP LOCKED;

-- name: RevokedReleaseAnnounced :one
-- Whether the delegation's release on a revoked identity has its event.
SELECT EXISTS (
    SELECT FROM events WHERE delegation_id = $1 AND type = 'released_on_revoked_identity') AS announced;

-- name: RevokedReleaseListAcknowledgedWithoutEvent :many
-- For CheckInvariants: releases on revoked identities acknowledged with no
-- revoked_release_acknowledged event in the delegation's stream. The
-- acknowledgement and its event are written in one transaction
-- (compensation.Service.AcknowledgeRevokedRelease), so such a row was
-- acknowledged behind the ledger's back, hiding the release.
SELECT r.delegation_id, r.acknowledged_at
FROM revoked_identity_releases r
WHERE r.acknowledged_at IS NOT NULL
  AND NOT EXISTS (
    SELECT FROM events e WHERE e.delegation_id = r.delegation_id AND e.type = 'revoked_release_acknowledged')
ORDER BY r.delegation_id;
