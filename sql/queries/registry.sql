-- name: OrgGetByID :one
SELECT * FROM remote_orgs WHERE id = $1;

-- name: CreationReferences :one
-- The org and the budget a new delegation refers to, in one round trip; no
-- row when either is missing. Delegation creation holds the org's share
-- lock until it commits, so an identity revocation (which updates the row)
-- either sees the new delegation and escalates it, or commits first and the
-- creation sees the revocation. A flush's pre-read serves it too
-- (CreationReferencesForFlush): change both together.
SELECT sqlc.embed(o), sqlc.embed(b)
FROM remote_orgs o, budgets b
WHERE o.id = @org_id AND b.id = @budget_id
FOR SHARE OF o;

-- name: CreationReferencesForFlush :many
-- CreationReferences of each of a flush's creations (@org_ids[i],
-- @budget_ids[i]), for its pre-read to answer them (sql/pgstore/
-- served.go): the pair, then CreationReferences' columns in its order
-- (CheckServedReads, sql/pgstore/served_check_test.go), each org share-locked as
-- CreationReferences locks it, in id order. No row for a pair with either
-- missing.
SELECT k.org_id AS key_org_id, k.budget_id AS key_budget_id, o.*, b.*
FROM (SELECT DISTINCT unnest(a.org_ids) AS org_id, unnest(a.budget_ids) AS budget_id
      FROM (SELECT @org_ids::text[] AS org_ids, @budget_ids::text[] AS budget_ids OFFSET 0) a
      ORDER BY 1, 2) k
CROSS JOIN LATERAL (SELECT o.* FROM remote_orgs o WHERE o.id = k.org_id OFFSET 0 FOR SHARE) o
CROSS JOIN LATERAL (SELECT b.* FROM budgets b WHERE b.id = k.budget_id OFFSET 0) b;

-- name: OrgUpsert :exec
INSERT INTO remote_orgs (
    id, name, shared_coordinator, jwks, jwks_url, agent_card_url, allowed_hosts, require_signed_receipts,
    require_signed_card, card_jku_hosts, identity_revoked_at, identity_revoked_reason, created_at, updated_at
) VALUES (
    @id, @name, @shared_coordinator, @jwks, @jwks_url, @agent_card_url, @allowed_hosts, @require_signed_receipts,
    @require_signed_card, @card_jku_hosts, @identity_revoked_at, @identity_revoked_reason, @created_at, @updated_at
)
ON CONFLICT (id) DO UPDATE SET
    name                    = EXCLUDED.name,
    shared_coordinator      = EXCLUDED.shared_coordinator,
    jwks                    = EXCLUDED.jwks,
    jwks_url                = EXCLUDED.jwks_url,
    -- What was fetched from a JWKS URL is kept while the URL stays, and
    -- forgotten with it.
    jwks_fetched            = CASE WHEN remote_orgs.jwks_url IS NOT DISTINCT FROM EXCLUDED.jwks_url THEN remote_orgs.jwks_fetched END,
    jwks_fetched_at         = CASE WHEN remote_orgs.jwks_url IS NOT DISTINCT FROM EXCLUDED.jwks_url THEN remote_orgs.jwks_fetched_at END,
    jwks_fetch_attempted_at = CASE WHEN remote_orgs.jwks_url IS NOT DISTINCT FROM EXCLUDED.jwks_url THEN remote_orgs.jwks_fetch_attempted_at END,
    jwks_fetch_error        = CASE WHEN remote_orgs.jwks_url IS NOT DISTINCT FROM EXCLUDED.jwks_url THEN remote_orgs.jwks_fetch_error END,
    agent_card_url          = EXCLUDED.agent_card_url,
    allowed_hosts           = EXCLUDED.allowed_hosts,
    require_signed_receipts = EXCLUDED.require_signed_receipts,
    require_signed_card     = EXCLUDED.require_signed_card,
    card_jku_hosts          = EXCLUDED.card_jku_hosts,
    -- The card's pin and last check are the card's (OrgCardRecord), not
    -- the registration's: a registration keeps them.
    -- A registration never undoes a revocation, even one committed while
    -- the registration was in flight.
    identity_revoked_at     = COALESCE(remote_orgs.identity_revoked_at, EXCLUDED.identity_revoked_at),
    identity_revoked_reason = COALESCE(remote_orgs.identity_revoked_reason, EXCLUDED.identity_revoked_reason),
    updated_at              = EXCLUDED.updated_at;

-- name: GatePolicy :one
-- What decides whether a terminal task status gates a delegation's hold:
-- its org, its task class when registered (NULL columns when not), whether
-- Quittance dispatched it, and whether the task-class policy of its tenant
-- at its org lists its class, in one round trip.
-- A flush's pre-read serves it too (DelegationsServedForFlush's
-- served_gate_policy columns): change both together.
SELECT sqlc.embed(o), c.name AS class_name, c.effect_capable, c.gate_on, c.compensation_timeout_ms,
       c.updated_at AS class_updated_at,
       coalesce((SELECT a.dispatched FROM a2a_delegations a WHERE a.delegation_id = @delegation_id), false)::boolean AS dispatched,
       EXISTS (SELECT FROM task_class_policies p
               WHERE p.org_id = o.id AND p.tenant = @tenant AND @task_class::text = ANY (p.classes))::boolean AS policy_lists_class
FROM remote_orgs o
LEFT JOIN task_classes c ON c.name = @task_class
WHERE o.id = @org_id;

-- name: TaskClassPolicyGet :one
SELECT * FROM task_class_policies WHERE org_id = @org_id AND tenant = @tenant;

-- name: TaskClassPolicyList :many
-- The task-class policies at an org, by tenant.
SELECT * FROM task_class_policies WHERE org_id = @org_id ORDER BY tenant;

-- name: TaskClassPolicyUpsert :exec
INSERT INTO task_class_policies (org_id, tenant, classes, updated_at)
VALUES (@org_id, @tenant, @classes, @updated_at)
ON CONFLICT (org_id, tenant) DO UPDATE SET
    classes    = EXCLUDED.classes,
    updated_at = EXCLUDED.updated_at;

-- name: TaskClassGetByName :one
SELECT * FROM task_classes WHERE name = $1;

-- name: TaskClassList :many
-- Every registered task class, by name. There are few: a full read.
SELECT * FROM task_classes ORDER BY name;

-- name: TaskClassUpsert :exec
INSERT INTO task_classes (name, effect_capable, gate_on, compensation_timeout_ms, updated_at)
VALUES (@name, @effect_capable, @gate_on, @compensation_timeout_ms, @updated_at)
ON CONFLICT (name) DO UPDATE SET
    effect_capable          = EXCLUDED.effect_capable,
    gate_on                 = EXCLUDED.gate_on,
    compensation_timeout_ms = EXCLUDED.compensation_timeout_ms,
    updated_at              = EXCLUDED.updated_at;

-- name: OrgGetByIDForUpdate :one
SELECT * FROM remote_orgs WHERE id = $1 FOR UPDATE;

-- name: OrgListWithJWKSURL :many
-- The orgs whose keys come from a JWKS URL, for the periodic refresh.
SELECT * FROM remote_orgs WHERE jwks_url IS NOT NULL ORDER BY id;

-- name: OrgJWKSFetchRecord :exec
-- Records a fetch of the org's JWKS URL: the set in force (unchanged on a
-- failed fetch), when it was fetched, and the last attempt and its error.
UPDATE remote_orgs
SET jwks_fetched = @jwks_fetched, jwks_fetched_at = @jwks_fetched_at,
    jwks_fetch_attempted_at = @jwks_fetch_attempted_at, jwks_fetch_error = @jwks_fetch_error
WHERE id = @id AND jwks_url = @jwks_url;

-- name: OrgCardRecord :exec
-- Records what a check of the org's agent card found, and the pin.
UPDATE remote_orgs SET card_check = @card_check, card_pin = @card_pin WHERE id = @id;
