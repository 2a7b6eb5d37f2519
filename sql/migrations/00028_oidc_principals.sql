-- +goose Up

-- People who sign in to the console through OpenID Connect are principals
-- (ledger/PRINCIPALS.md#people-signed-in-by-openid-connect). An identity is
-- the identity provider's (issuer, subject); it signs in as principal_id.
-- At its first sign-in the ledger records a person principal for it
-- (recorded_principal_id, whose id is derived from the issuer and subject);
-- on-call may instead link it, with a second on-call's approval, to an
-- existing person principal (linked_by, linked_at), and an identity that
-- already had its own principal then signs in as the one linked to, its own
-- principal becoming the same person for four-eyes.
CREATE TABLE oidc_identities (
    issuer                text        NOT NULL CHECK (length(btrim(issuer)) BETWEEN 1 AND 2048),
    subject               text        NOT NULL CHECK (length(btrim(subject)) BETWEEN 1 AND 255),
    principal_id          uuid        NOT NULL REFERENCES principals (id),
    -- The principal recorded at the identity's first sign-in; NULL for an
    -- identity linked before it ever signed in. It never changes.
    recorded_principal_id uuid        UNIQUE REFERENCES principals (id),
    -- Who made principal_id what it is: NULL when the identity provider's
    -- first sign-in recorded it, else the on-call principal whose link
    -- took effect (the approver of the pending change).
    linked_by             uuid        REFERENCES principals (id),
    linked_at             timestamptz NOT NULL,
    PRIMARY KEY (issuer, subject),
    CHECK (linked_by IS NOT NULL OR principal_id = recorded_principal_id)
);
CREATE INDEX oidc_identities_principal ON oidc_identities (principal_id);

-- The person of a principal: for a principal an identity recorded and
-- that was linked since to another principal, that principal; for every
-- other principal, itself. Linking keeps every identity pointing at a
-- principal that is its own person, so one step is enough.
-- +goose StatementBegin
CREATE FUNCTION principal_person(uuid) RETURNS uuid LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT o.principal_id FROM oidc_identities o WHERE o.recorded_principal_id = $1), $1)
$$;
-- +goose StatementEnd

-- The other principals of the same person as a principal: its person and
-- every principal recorded for an identity linked to that person, but
-- itself. Four-eyes refuses a decision by any of them
-- (ledger.Principal.SamePerson; the triggers below).
-- +goose StatementBegin
CREATE FUNCTION principal_aliases(uuid) RETURNS uuid[] LANGUAGE sql STABLE AS $$
    SELECT coalesce(array_agg(DISTINCT x) FILTER (WHERE x <> $1), '{}')
    FROM (SELECT principal_person($1) AS x
          UNION ALL
          SELECT o.recorded_principal_id FROM oidc_identities o
          WHERE o.principal_id = principal_person($1) AND o.recorded_principal_id IS NOT NULL) s
$$;
-- +goose StatementEnd

-- Four-eyes in the database as well: a write-off approved, or a pending
-- change applied, by another principal of the requesting person is
-- refused, as the CHECKs refuse it by the requesting principal itself.
-- +goose StatementBegin
CREATE FUNCTION quittance_refuse_same_person() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Each table's columns are named only in its own branch: a record
    -- field the row does not have is an error even where it would not
    -- decide the condition.
    IF TG_TABLE_NAME = 'write_offs' THEN
        IF NEW.approved_by_id = ANY (principal_aliases(NEW.requested_by_id)) THEN
            RAISE EXCEPTION 'write-off % approved by the requesting person', NEW.id USING ERRCODE = 'check_violation';
        END IF;
    ELSIF NEW.decided_by = ANY (principal_aliases(NEW.requested_by)) THEN
        RAISE EXCEPTION 'pending change % applied by the requesting person', NEW.id USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER write_offs_four_eyes BEFORE UPDATE OF approved_by_id ON write_offs
    FOR EACH ROW WHEN (NEW.approved_by_id IS NOT NULL) EXECUTE FUNCTION quittance_refuse_same_person();
CREATE TRIGGER pending_changes_four_eyes BEFORE UPDATE OF status ON pending_changes
    FOR EACH ROW WHEN (NEW.status = 'applied' AND NEW.decided_by IS NOT NULL) EXECUTE FUNCTION quittance_refuse_same_person();

-- A link changes who is the same person: every replica drops its
-- authentication cache, as for a revocation (00011).
CREATE TRIGGER oidc_identities_changed AFTER UPDATE OF principal_id ON oidc_identities
    FOR EACH STATEMENT EXECUTE FUNCTION quittance_credentials_changed();

-- Linking an OpenID Connect identity is a privileged change.
ALTER TABLE pending_changes DROP CONSTRAINT pending_changes_kind_check;
ALTER TABLE pending_changes ADD CONSTRAINT pending_changes_kind_check CHECK (kind IN (
    'principal_create', 'role_grant', 'org_update', 'task_class_update', 'write_off_threshold_update',
    'credential_create', 'oidc_link'));

-- The grants, in the function a DBA re-runs after creating the role
-- (00015), so running it again never gives the rights back.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION quittance_grant_service_role() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'quittance_service') THEN
        BEGIN
            CREATE ROLE quittance_service NOLOGIN;
        EXCEPTION
            WHEN insufficient_privilege THEN
                RAISE WARNING 'cannot create role quittance_service (needs CREATEROLE); create it, then run SELECT quittance_grant_service_role()';
                RETURN;
            WHEN duplicate_object OR unique_violation THEN
                NULL; -- created meanwhile by a migration of another database
        END;
    END IF;
    GRANT USAGE ON SCHEMA public, reporting TO quittance_service;
    GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO quittance_service;
    GRANT SELECT ON ALL TABLES IN SCHEMA reporting TO quittance_service;
    GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO quittance_service;
    ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO quittance_service;
    ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT ON SEQUENCES TO quittance_service;
    ALTER DEFAULT PRIVILEGES IN SCHEMA reporting GRANT SELECT ON TABLES TO quittance_service;
    -- The audit log and its checkpoints: append and read only.
    REVOKE UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON events, checkpoints FROM quittance_service;
    -- The key history: appended, and a key ended once (the trigger
    -- org_keys_append_only checks how); never rewritten or removed.
    IF to_regclass('public.org_keys') IS NOT NULL THEN
        REVOKE UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON org_keys FROM quittance_service;
        GRANT UPDATE (valid_until) ON org_keys TO quittance_service;
    END IF;
    -- OpenID Connect identities: appended at a first sign-in or a link,
    -- and pointed at another principal by a link; never removed, and an
    -- identity's issuer, subject and recorded principal never rewritten.
    IF to_regclass('public.oidc_identities') IS NOT NULL THEN
        REVOKE UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON oidc_identities FROM quittance_service;
        GRANT UPDATE (principal_id, linked_by, linked_at) ON oidc_identities TO quittance_service;
    END IF;
    -- The service reads the migration version (readiness) and never writes it.
    IF to_regclass('public.goose_db_version') IS NOT NULL THEN
        REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON goose_db_version FROM quittance_service;
    END IF;
END;
$$;
-- +goose StatementEnd
SELECT quittance_grant_service_role();
REVOKE EXECUTE ON FUNCTION quittance_grant_service_role() FROM PUBLIC;

-- Console sessions signed in through OpenID Connect before this migration
-- acted as an id with no principal; they end, and the next sign-in
-- records the principal.
DELETE FROM console_sessions WHERE source = 'oidc';

-- +goose Down
ALTER TABLE pending_changes DROP CONSTRAINT pending_changes_kind_check;
ALTER TABLE pending_changes ADD CONSTRAINT pending_changes_kind_check CHECK (kind IN (
    'principal_create', 'role_grant', 'org_update', 'task_class_update', 'write_off_threshold_update',
    'credential_create')) NOT VALID;
DROP TRIGGER pending_changes_four_eyes ON pending_changes;
DROP TRIGGER write_offs_four_eyes ON write_offs;
DROP FUNCTION quittance_refuse_same_person();
DROP FUNCTION principal_aliases(uuid);
DROP FUNCTION principal_person(uuid);
DROP TABLE oidc_identities;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION quittance_grant_service_role() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'quittance_service') THEN
        BEGIN
            CREATE ROLE quittance_service NOLOGIN;
        EXCEPTION
            WHEN insufficient_privilege THEN
                RAISE WARNING 'cannot create role quittance_service (needs CREATEROLE); create it, then run SELECT quittance_grant_service_role()';
                RETURN;
            WHEN duplicate_object OR unique_violation THEN
                NULL; -- created meanwhile by a migration of another database
        END;
    END IF;
    GRANT USAGE ON SCHEMA public, reporting TO quittance_service;
    GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO quittance_service;
    GRANT SELECT ON ALL TABLES IN SCHEMA reporting TO quittance_service;
    GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO quittance_service;
    ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO quittance_service;
    ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT ON SEQUENCES TO quittance_service;
    ALTER DEFAULT PRIVILEGES IN SCHEMA reporting GRANT SELECT ON TABLES TO quittance_service;
    -- The audit log and its checkpoints: append and read only.
    REVOKE UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON events, checkpoints FROM quittance_service;
    -- The key history: appended, and a key ended once (the trigger
    -- org_keys_append_only checks how); never rewritten or removed.
    IF to_regclass('public.org_keys') IS NOT NULL THEN
        REVOKE UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON org_keys FROM quittance_service;
        GRANT UPDATE (valid_until) ON org_keys TO quittance_service;
    END IF;
    -- The service reads the migration version (readiness) and never writes it.
    IF to_regclass('public.goose_db_version') IS NOT NULL THEN
        REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON goose_db_version FROM quittance_service;
    END IF;
END;
$$;
-- +goose StatementEnd
REVOKE EXECUTE ON FUNCTION quittance_grant_service_role() FROM PUBLIC;
