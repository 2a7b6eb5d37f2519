-- +goose Up

-- The tamper-evident audit (ledger/AUDIT.md).
--
-- Signed checkpoints: every so often (and on demand) the ledger signs, with
-- its own Ed25519 key, the head (last stream_seq and hash) of every event
-- stream. A tail deleted or rewritten behind the append-only trigger's back
-- no longer reaches the head a checkpoint signed, and verify-chain says so.
-- Like events, checkpoints are append-only. payload is the signed JSON as
-- signed, byte for byte; jws is its compact JWS.
CREATE TABLE checkpoints (
    id          bigint      PRIMARY KEY CHECK (id > 0),
    created_at  timestamptz NOT NULL,
    created_by  text        NOT NULL,
    kid         text        NOT NULL,
    streams     integer     NOT NULL CHECK (streams >= 0),
    heads_sha256 bytea      NOT NULL,
    payload     text        NOT NULL,
    jws         text        NOT NULL
);
CREATE TRIGGER checkpoints_append_only
    BEFORE UPDATE OR DELETE ON checkpoints
    FOR EACH ROW EXECUTE FUNCTION events_refuse_change();
CREATE TRIGGER checkpoints_no_truncate
    BEFORE TRUNCATE ON checkpoints
    FOR EACH STATEMENT EXECUTE FUNCTION events_refuse_change();

-- The service's database role. The service connects as a login role that
-- is a member of quittance_service (GRANT quittance_service TO
-- quittance_app), never as the owner of the schema: it may read and write
-- the working tables, append to and read events and checkpoints, and
-- nothing more. UPDATE, DELETE and TRUNCATE of events are then refused by
-- the privilege system before the trigger is reached, and ALTER TABLE
-- (disabling the trigger), DROP TRIGGER and CREATE OR REPLACE FUNCTION
-- need ownership, which only the role that migrates has.
--
-- quittance_grant_service_role() applies the grants; the migration calls it,
-- and a DBA who creates quittance_service after migrating calls it again
-- (SELECT quittance_grant_service_role();). Roles are cluster-wide, so the
-- role may exist already; creating it needs CREATEROLE, and a migrating
-- user without it gets a warning, as for quittance_reporting (00002).
-- Default privileges give the role the tables later migrations create (by
-- the same migrating role); a later append-only table revokes its own.
-- +goose StatementBegin
CREATE FUNCTION quittance_grant_service_role() RETURNS void LANGUAGE plpgsql AS $$
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
SELECT quittance_grant_service_role();
REVOKE EXECUTE ON FUNCTION quittance_grant_service_role() FROM PUBLIC;

-- Nobody but the owner creates objects in the schema (PostgreSQL 15 and
-- later have this default; 14 granted CREATE to PUBLIC). Without ownership
-- of the schema this is a warning and changes nothing.
REVOKE CREATE ON SCHEMA public FROM PUBLIC;

-- +goose Down
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'quittance_service') THEN
        ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE ALL ON TABLES FROM quittance_service;
        ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE ALL ON SEQUENCES FROM quittance_service;
        ALTER DEFAULT PRIVILEGES IN SCHEMA reporting REVOKE ALL ON TABLES FROM quittance_service;
        REVOKE ALL ON ALL TABLES IN SCHEMA public FROM quittance_service;
        REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM quittance_service;
        REVOKE ALL ON ALL TABLES IN SCHEMA reporting FROM quittance_service;
        REVOKE ALL ON SCHEMA public, reporting FROM quittance_service;
    END IF;
END
$$;
-- +goose StatementEnd
DROP FUNCTION quittance_grant_service_role();
DROP TABLE checkpoints;
