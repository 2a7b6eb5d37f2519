-- +goose Up

-- The org key history is evidence: a stored token is verified against the
-- keys in force when it was accepted (ledger/AUDIT.md), so a key row added,
-- backdated or kept open past its removal would make forged evidence pass.
-- The service's role may append a key and end one, nothing else: UPDATE,
-- DELETE and TRUNCATE are revoked but for the one column it sets, and the
-- trigger allows only valid_until going from NULL to a time not before
-- valid_from, once, with every other column unchanged. The owner can still
-- do anything; verify-chain and verify-pack then find the row without the
-- org_updated or org_keys_fetched event at its valid_from (or valid_until)
-- that the checkpointed org stream records.
-- +goose StatementBegin
CREATE FUNCTION org_keys_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.valid_until IS NULL AND NEW.valid_until IS NOT NULL
       AND NEW.valid_until >= OLD.valid_from
       AND NEW.org_id = OLD.org_id AND NEW.kid = OLD.kid AND NEW.thumbprint = OLD.thumbprint
       AND NEW.jwk = OLD.jwk AND NEW.valid_from = OLD.valid_from THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'org_keys is append-only: % refused (a key may only be ended once, not before it came into force)', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER org_keys_append_only
    BEFORE UPDATE OR DELETE ON org_keys
    FOR EACH ROW EXECUTE FUNCTION org_keys_refuse_change();
CREATE TRIGGER org_keys_no_truncate
    BEFORE TRUNCATE ON org_keys
    FOR EACH STATEMENT EXECUTE FUNCTION org_keys_refuse_change();

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
    -- The service reads the migration version (readiness) and never writes it.
    IF to_regclass('public.goose_db_version') IS NOT NULL THEN
        REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON goose_db_version FROM quittance_service;
    END IF;
END;
$$;
-- +goose StatementEnd
SELECT quittance_grant_service_role();
REVOKE EXECUTE ON FUNCTION quittance_grant_service_role() FROM PUBLIC;

-- +goose Down
DROP TRIGGER org_keys_no_truncate ON org_keys;
DROP TRIGGER org_keys_append_only ON org_keys;
DROP FUNCTION org_keys_refuse_change();
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
    -- The service reads the migration version (readiness) and never writes it.
    IF to_regclass('public.goose_db_version') IS NOT NULL THEN
        REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON goose_db_version FROM quittance_service;
    END IF;
END;
$$;
-- +goose StatementEnd
REVOKE EXECUTE ON FUNCTION quittance_grant_service_role() FROM PUBLIC;
SELECT quittance_grant_service_role();
