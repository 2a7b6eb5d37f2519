-- +goose Up

-- What the checkpoints anchor to cannot be moved by the service's role
-- (ledger/AUDIT.md).
--
-- 1. event_positions decides which checkpoint's span an event falls in. A
-- role that could update a position could move an old event into the next
-- span, so that the next checkpoint signs its stream back at an older head
-- and a deleted tail goes unseen; one that could delete a position could
-- keep an event out of every span and out of the feed. Positions are now
-- written only by the events trigger: events_assign_position runs as the
-- owner (SECURITY DEFINER, with a fixed search_path), and the service's
-- role keeps only SELECT. The trigger also refuses a commit order carried
-- in quittance.event_feed_tx (a setting any session may set) that is not
-- its own transaction's, between its xid and the current snapshot's xmax:
-- a huge order would hold the feed back and keep the event out of every
-- span for ever.
--
-- Nothing the service runs updates or deletes a position, so none of it
-- is given back.

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION events_assign_position() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    v_pos    bigint := nextval('public.event_positions_pos_seq');
    v_xid    xid8   := pg_current_xact_id();
    v_tx     text   := coalesce(current_setting('quittance.event_feed_tx', true), '');
    v_order  xid8;
    v_tx_pos bigint;
BEGIN
    IF v_tx <> '' AND split_part(v_tx, ' ', 1)::xid8 = v_xid THEN
        v_order  := split_part(v_tx, ' ', 2)::xid8;
        v_tx_pos := split_part(v_tx, ' ', 3)::bigint;
        -- The first event of the transaction chose the order below, at
        -- most the xmax of a snapshot taken since it began.
        IF v_order < v_xid OR v_order > greatest(v_xid, pg_snapshot_xmax(pg_current_snapshot())) THEN
            RAISE EXCEPTION 'quittance.event_feed_tx names commit order %, outside this transaction''s (% to %)',
                v_order, v_xid, greatest(v_xid, pg_snapshot_xmax(pg_current_snapshot()))
                USING ERRCODE = 'insufficient_privilege';
        END IF;
    ELSE
        v_order  := greatest(v_xid,
            (pg_snapshot_xmax(pg_current_snapshot())::text::numeric - 1)::text::xid8);
        v_tx_pos := v_pos;
        PERFORM set_config('quittance.event_feed_tx', v_xid || ' ' || v_order || ' ' || v_tx_pos, true);
    END IF;
    INSERT INTO public.event_positions (pos, seq, delegation_id, tenant, order_xid, tx_pos)
    VALUES (v_pos, NEW.seq, NEW.delegation_id,
            (SELECT d.tenant FROM public.delegations d WHERE d.id = NEW.delegation_id),
            v_order, v_tx_pos);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- 2. Each stream's head as the latest checkpoint listing it signed it,
-- kept from the checkpoints' own payloads by a trigger, so that the
-- ledger refuses to sign a head that moves back (ledger.Checkpoints): a
-- lower position, or the same one with another hash. The service's role
-- only reads it. Checkpoints signed before 00031 list every stream, so
-- the latest of them and the incremental ones after it give every head.
-- checkpoint_id names the checkpoint without a foreign key: a head stays
-- signed even if the owner deletes the checkpoint row.
CREATE TABLE checkpoint_heads (
    stream        text    PRIMARY KEY,
    checkpoint_id bigint  NOT NULL,
    stream_seq    integer NOT NULL,
    hash          text    NOT NULL
);

-- +goose StatementBegin
CREATE FUNCTION checkpoints_keep_heads() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    INSERT INTO public.checkpoint_heads AS k (stream, checkpoint_id, stream_seq, hash)
    SELECT h.stream, NEW.id, h.seq, h.hash
    FROM jsonb_to_recordset(NEW.payload::jsonb -> 'streams') AS h(stream text, seq integer, hash text)
    ON CONFLICT (stream) DO UPDATE
        SET checkpoint_id = excluded.checkpoint_id, stream_seq = excluded.stream_seq, hash = excluded.hash
        WHERE k.checkpoint_id < excluded.checkpoint_id;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER checkpoints_keep_heads
    AFTER INSERT ON checkpoints
    FOR EACH ROW EXECUTE FUNCTION checkpoints_keep_heads();

INSERT INTO checkpoint_heads (stream, checkpoint_id, stream_seq, hash)
SELECT DISTINCT ON (h.stream) h.stream, c.id, h.seq, h.hash
FROM checkpoints c
CROSS JOIN LATERAL jsonb_to_recordset(c.payload::jsonb -> 'streams') AS h(stream text, seq integer, hash text)
WHERE c.through_pos IS NOT NULL
   OR c.id = (SELECT max(f.id) FROM checkpoints f WHERE f.through_pos IS NULL)
ORDER BY h.stream, c.id DESC;

-- 3. A release on a revoked identity is surfaced until finance
-- acknowledges it, in one transaction with its revoked_release_acknowledged
-- event. The service's role may no longer delete the row, and may set the
-- acknowledged_* columns only, once, from unacknowledged to acknowledged;
-- an acknowledgement without its event is a failed invariant
-- (pgstore.CheckInvariants).
-- +goose StatementBegin
CREATE FUNCTION revoked_identity_releases_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.acknowledged_at IS NULL AND NEW.acknowledged_at IS NOT NULL
       AND NEW.delegation_id = OLD.delegation_id AND NEW.org_id = OLD.org_id
       AND NEW.amount_minor = OLD.amount_minor AND NEW.currency = OLD.currency
       AND NEW.released_at = OLD.released_at AND NEW.identity_revoked_at = OLD.identity_revoked_at THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'revoked_identity_releases is append-only: % refused (a release may only be acknowledged once)', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER revoked_identity_releases_append_only
    BEFORE UPDATE OR DELETE ON revoked_identity_releases
    FOR EACH ROW EXECUTE FUNCTION revoked_identity_releases_refuse_change();
CREATE TRIGGER revoked_identity_releases_no_truncate
    BEFORE TRUNCATE ON revoked_identity_releases
    FOR EACH STATEMENT EXECUTE FUNCTION revoked_identity_releases_refuse_change();

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
    -- The events' feed positions and the signed heads: written only by
    -- the triggers on events and checkpoints, as the owner; read only.
    IF to_regclass('public.checkpoint_heads') IS NOT NULL THEN
        REVOKE INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON event_positions, checkpoint_heads FROM quittance_service;
    END IF;
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
    -- Releases on revoked identities: recorded, and acknowledged once (the
    -- trigger revoked_identity_releases_append_only checks how).
    IF to_regclass('public.revoked_identity_releases') IS NOT NULL THEN
        REVOKE UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON revoked_identity_releases FROM quittance_service;
        GRANT UPDATE (acknowledged_at, acknowledged_by, acknowledge_note) ON revoked_identity_releases TO quittance_service;
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
REVOKE EXECUTE ON FUNCTION quittance_grant_service_role() FROM PUBLIC;
SELECT quittance_grant_service_role();
DROP TRIGGER revoked_identity_releases_no_truncate ON revoked_identity_releases;
DROP TRIGGER revoked_identity_releases_append_only ON revoked_identity_releases;
DROP FUNCTION revoked_identity_releases_refuse_change();
DROP TRIGGER checkpoints_keep_heads ON checkpoints;
DROP FUNCTION checkpoints_keep_heads();
DROP TABLE checkpoint_heads;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION events_assign_position() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_pos    bigint := nextval('event_positions_pos_seq');
    v_xid    xid8   := pg_current_xact_id();
    v_tx     text   := coalesce(current_setting('quittance.event_feed_tx', true), '');
    v_order  xid8;
    v_tx_pos bigint;
BEGIN
    IF v_tx <> '' AND split_part(v_tx, ' ', 1)::xid8 = v_xid THEN
        v_order  := split_part(v_tx, ' ', 2)::xid8;
        v_tx_pos := split_part(v_tx, ' ', 3)::bigint;
    ELSE
        v_order  := greatest(v_xid,
            (pg_snapshot_xmax(pg_current_snapshot())::text::numeric - 1)::text::xid8);
        v_tx_pos := v_pos;
        PERFORM set_config('quittance.event_feed_tx', v_xid || ' ' || v_order || ' ' || v_tx_pos, true);
    END IF;
    INSERT INTO event_positions (pos, seq, delegation_id, tenant, order_xid, tx_pos)
    VALUES (v_pos, NEW.seq, NEW.delegation_id,
            (SELECT d.tenant FROM delegations d WHERE d.id = NEW.delegation_id),
            v_order, v_tx_pos);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
