-- +goose Up

-- The functions four-eyes relies on, pinned to their own schema: each one
-- resolved oidc_identities (and each other) through the caller's
-- search_path, so a session that put a table of its own first (a temporary
-- oidc_identities, which pg_temp puts before everything unless named)
-- decided who is the same person as whom. Now every name is qualified and
-- the search_path is pg_catalog, then pg_temp, whatever the caller's
-- (ledger/PRINCIPALS.md#the-two-person-rule).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION principal_person(uuid) RETURNS uuid LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp AS $$
    SELECT coalesce((SELECT o.principal_id FROM public.oidc_identities o WHERE o.recorded_principal_id = $1), $1)
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION principal_aliases(uuid) RETURNS uuid[] LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp AS $$
    SELECT coalesce(array_agg(DISTINCT x) FILTER (WHERE x <> $1), '{}')
    FROM (SELECT public.principal_person($1) AS x
          UNION ALL
          SELECT o.recorded_principal_id FROM public.oidc_identities o
          WHERE o.principal_id = public.principal_person($1) AND o.recorded_principal_id IS NOT NULL) s
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION quittance_refuse_same_person() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_TABLE_NAME = 'write_offs' THEN
        IF NEW.approved_by_id = ANY (public.principal_aliases(NEW.requested_by_id)) THEN
            RAISE EXCEPTION 'write-off % approved by the requesting person', NEW.id USING ERRCODE = 'check_violation';
        END IF;
    ELSIF NEW.decided_by = ANY (public.principal_aliases(NEW.requested_by)) THEN
        RAISE EXCEPTION 'pending change % applied by the requesting person', NEW.id USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

-- A person principal may say, through a two-person change, that its
-- person has no account at the identity provider
-- (no_identity_provider_account). Until it is linked to an identity or so
-- marked, an identity that signs in on its own may be the same human, and
-- the two are never the two persons of a four-eyes decision outside dev
-- (principals_unaccounted_pair).
ALTER TABLE principals ADD COLUMN no_identity_provider_account_at timestamptz;
ALTER TABLE principals ADD COLUMN no_identity_provider_account_by uuid REFERENCES principals (id);
ALTER TABLE principals ADD CONSTRAINT principals_no_identity_provider_account_check
    CHECK ((no_identity_provider_account_at IS NULL) = (no_identity_provider_account_by IS NULL));

-- Whether a principal is an identity's own principal (recorded at its
-- first sign-in) not linked to a principal of its person.
-- +goose StatementBegin
CREATE FUNCTION principal_identity_unlinked(uuid) RETURNS boolean LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp AS $$
    SELECT EXISTS (SELECT 1 FROM public.oidc_identities o WHERE o.recorded_principal_id = $1)
       AND public.principal_person($1) = $1
$$;
-- +goose StatementEnd

-- Whether a person principal's person is unknown to the identity provider
-- as far as Quittance can tell: not an identity's own principal, no
-- identity linked to it, not marked as having no account there, not the
-- bootstrap principal.
-- +goose StatementBegin
CREATE FUNCTION principal_identity_unaccounted(uuid) RETURNS boolean LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp AS $$
    SELECT EXISTS (
        SELECT 1 FROM public.principals p
        WHERE p.id = $1 AND p.kind = 'person' AND NOT p.bootstrap
          AND p.no_identity_provider_account_at IS NULL
          AND NOT EXISTS (SELECT 1 FROM public.oidc_identities o WHERE o.recorded_principal_id = p.id OR o.principal_id = p.id))
$$;
-- +goose StatementEnd

-- Whether two principals may be one human Quittance cannot tell apart: one
-- an identity signing in on its own, the other a person principal not yet
-- linked to an identity or marked as having none.
-- +goose StatementBegin
CREATE FUNCTION principals_unaccounted_pair(uuid, uuid) RETURNS boolean LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp AS $$
    SELECT (public.principal_identity_unlinked($1) AND public.principal_identity_unaccounted($2))
        OR (public.principal_identity_unlinked($2) AND public.principal_identity_unaccounted($1))
$$;
-- +goose StatementEnd

-- The bootstrap credential's allowance counts principals ever made
-- on-call, not those on-call now: a demoted one does not give it back.
-- made_oncall_at is set the first time a principal is on-call and never
-- cleared (the trigger keeps it, whatever the writer sends).
ALTER TABLE principals ADD COLUMN made_oncall_at timestamptz;
UPDATE principals SET made_oncall_at = created_at WHERE role = 'oncall';
UPDATE principals p SET made_oncall_at = e.at
FROM (SELECT substr(stream, length('principal:') + 1)::uuid AS id, min(at) AS at
      FROM events
      WHERE stream LIKE 'principal:%'
        AND ((type = 'principal_created' AND data->>'role' = 'oncall')
          OR (type = 'principal_role_granted' AND (data->>'role_granted' = 'oncall' OR data->>'previous_role' = 'oncall')))
      GROUP BY 1) e
WHERE p.id = e.id AND p.made_oncall_at IS NULL;
-- +goose StatementBegin
CREATE FUNCTION principals_keep_made_oncall() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        NEW.made_oncall_at := OLD.made_oncall_at;
    ELSE
        NEW.made_oncall_at := NULL;
    END IF;
    IF NEW.made_oncall_at IS NULL AND NEW.role = 'oncall' THEN
        NEW.made_oncall_at := now();
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER principals_made_oncall BEFORE INSERT OR UPDATE ON principals
    FOR EACH ROW EXECUTE FUNCTION principals_keep_made_oncall();

-- A rejection recorded the rejecting credential's id as rejected_by_id;
-- it is the principal's, as approved_by_id is.
UPDATE write_offs w SET rejected_by_id = t.principal_id
FROM api_tokens t
WHERE t.id = w.rejected_by_id AND t.principal_id IS NOT NULL AND t.principal_id <> w.rejected_by_id;

-- Write-off approval thresholds of their own for some currencies, each set
-- by an approved write_off_threshold_update change naming the currency. A
-- currency without one follows the configured per-currency map, then the
-- default threshold (write_off_threshold, or the configuration).
CREATE TABLE write_off_currency_thresholds (
    currency        text        PRIMARY KEY CHECK (currency ~ '^[A-Z]{3}$'),
    threshold_minor bigint      NOT NULL CHECK (threshold_minor >= 0),
    updated_at      timestamptz NOT NULL,
    updated_by      uuid        NOT NULL REFERENCES principals (id),
    pending_change  uuid        REFERENCES pending_changes (id)
);
SELECT quittance_grant_service_role();

-- Marking a person as having no identity-provider account is a privileged
-- change.
ALTER TABLE pending_changes DROP CONSTRAINT pending_changes_kind_check;
ALTER TABLE pending_changes ADD CONSTRAINT pending_changes_kind_check CHECK (kind IN (
    'principal_create', 'role_grant', 'org_update', 'task_class_update', 'write_off_threshold_update',
    'credential_create', 'oidc_link', 'task_class_policy_update', 'budget_tenants_update', 'no_identity_provider_account'));

-- +goose Down
ALTER TABLE pending_changes DROP CONSTRAINT pending_changes_kind_check;
ALTER TABLE pending_changes ADD CONSTRAINT pending_changes_kind_check CHECK (kind IN (
    'principal_create', 'role_grant', 'org_update', 'task_class_update', 'write_off_threshold_update',
    'credential_create', 'oidc_link', 'task_class_policy_update', 'budget_tenants_update')) NOT VALID;
DROP TABLE write_off_currency_thresholds;
DROP TRIGGER principals_made_oncall ON principals;
DROP FUNCTION principals_keep_made_oncall();
ALTER TABLE principals DROP COLUMN made_oncall_at;
DROP FUNCTION principals_unaccounted_pair(uuid, uuid);
DROP FUNCTION principal_identity_unaccounted(uuid);
DROP FUNCTION principal_identity_unlinked(uuid);
ALTER TABLE principals DROP CONSTRAINT principals_no_identity_provider_account_check;
ALTER TABLE principals DROP COLUMN no_identity_provider_account_by;
ALTER TABLE principals DROP COLUMN no_identity_provider_account_at;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION quittance_refuse_same_person() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
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
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION principal_aliases(uuid) RETURNS uuid[] LANGUAGE sql STABLE AS $$
    SELECT coalesce(array_agg(DISTINCT x) FILTER (WHERE x <> $1), '{}')
    FROM (SELECT principal_person($1) AS x
          UNION ALL
          SELECT o.recorded_principal_id FROM oidc_identities o
          WHERE o.principal_id = principal_person($1) AND o.recorded_principal_id IS NOT NULL) s
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION principal_person(uuid) RETURNS uuid LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT o.principal_id FROM oidc_identities o WHERE o.recorded_principal_id = $1), $1)
$$;
-- +goose StatementEnd
