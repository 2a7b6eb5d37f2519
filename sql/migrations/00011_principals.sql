-- +goose Up

-- A principal is who acts: a person (on-call, finance) or a machine (an
-- orchestrating agent, a finance job). Every API credential belongs to one;
-- events, write-offs and pending changes name principals by id, and
-- four-eyes compares those ids, never names.
CREATE TABLE principals (
    id              uuid        PRIMARY KEY,
    kind            text        NOT NULL CHECK (kind IN ('person', 'machine')),
    display_name    text        NOT NULL CHECK (length(btrim(display_name)) BETWEEN 1 AND 200),
    -- The name folded to lower case: one principal per name, whatever its
    -- case, so "Alice" and "alice" are the same principal.
    name_key        text        NOT NULL UNIQUE,
    role            text        NOT NULL CHECK (role IN ('orchestrator', 'finance', 'oncall')),
    tenant          text,
    -- The principal of QUITTANCE_BOOTSTRAP_TOKEN: outside dev it may only
    -- create the first two on-call principals.
    bootstrap       boolean     NOT NULL DEFAULT false,
    created_by      uuid        REFERENCES principals (id),
    created_at      timestamptz NOT NULL,
    disabled_at     timestamptz,
    disabled_by     uuid        REFERENCES principals (id),
    disabled_reason text,
    CHECK ((role = 'orchestrator') = (tenant IS NOT NULL))
);

ALTER TABLE api_tokens
    ADD COLUMN principal_id  uuid REFERENCES principals (id),
    ADD COLUMN expires_at    timestamptz,
    ADD COLUMN last_used_at  timestamptz,
    ADD COLUMN revoked_by    uuid REFERENCES principals (id),
    ADD COLUMN revoke_reason text;

-- Every existing token becomes a principal of its own, named as the token
-- was (a later token with a name already taken, whatever its case, gets its
-- id appended to the name key). Tokens of on-call and finance are people,
-- orchestrators machines.
INSERT INTO principals (id, kind, display_name, name_key, role, tenant, created_at)
SELECT t.id,
       CASE WHEN t.role = 'orchestrator' THEN 'machine' ELSE 'person' END,
       t.name,
       CASE WHEN row_number() OVER (PARTITION BY lower(t.name) ORDER BY t.created_at, t.id) = 1
            THEN lower(t.name) ELSE lower(t.name) || '#' || t.id::text END,
       t.role, t.tenant, t.created_at
FROM api_tokens t;
UPDATE api_tokens SET principal_id = id;
ALTER TABLE api_tokens ALTER COLUMN principal_id SET NOT NULL;
CREATE INDEX api_tokens_principal ON api_tokens (principal_id);

-- Write-offs named their requester and approver by token id; they name
-- principals from now on (the backfill made each token's principal id its
-- own id, so the recorded ids already are principal ids).

-- A credential or principal that changes (revoked, disabled, expired early)
-- tells every replica at commit, so each drops its authentication cache.
-- Recording a credential's last use does not.
-- +goose StatementBegin
CREATE FUNCTION quittance_credentials_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('quittance_credentials', '');
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER api_tokens_changed AFTER UPDATE OF revoked_at, expires_at, principal_id OR DELETE ON api_tokens
    FOR EACH STATEMENT EXECUTE FUNCTION quittance_credentials_changed();
CREATE TRIGGER principals_changed AFTER UPDATE OF disabled_at, role, tenant, bootstrap, kind OR DELETE ON principals
    FOR EACH STATEMENT EXECUTE FUNCTION quittance_credentials_changed();

-- A privileged change one on-call principal asked for, waiting for a
-- different one to approve it. payload is the change as the service applies
-- it on approval.
CREATE TABLE pending_changes (
    id              uuid        PRIMARY KEY,
    kind            text        NOT NULL CHECK (kind IN ('principal_create', 'role_grant', 'org_update', 'task_class_update')),
    target          text        NOT NULL,
    payload         jsonb       NOT NULL,
    summary         text        NOT NULL,
    status          text        NOT NULL CHECK (status IN ('pending', 'applied', 'refused', 'expired')),
    requested_by    uuid        NOT NULL REFERENCES principals (id),
    requested_at    timestamptz NOT NULL,
    expires_at      timestamptz NOT NULL,
    decided_by      uuid        REFERENCES principals (id),
    decided_at      timestamptz,
    decision_reason text,
    CHECK (decided_by IS NULL OR decided_by <> requested_by)
);
CREATE INDEX pending_changes_open ON pending_changes (expires_at) WHERE status = 'pending';

-- +goose Down
DROP TABLE pending_changes;
DROP TRIGGER principals_changed ON principals;
DROP TRIGGER api_tokens_changed ON api_tokens;
DROP FUNCTION quittance_credentials_changed();
ALTER TABLE api_tokens
    DROP COLUMN principal_id, DROP COLUMN expires_at, DROP COLUMN last_used_at,
    DROP COLUMN revoked_by, DROP COLUMN revoke_reason;
DROP TABLE principals;
