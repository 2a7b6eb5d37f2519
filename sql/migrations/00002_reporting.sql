-- +goose Up

-- The reporting schema is the contract for jobs that read the database
-- directly (finance reconciliation, BI exports). Each view carries a version
-- suffix: a published view is never changed incompatibly; a new shape is a
-- new view (_v2) next to the old one, and the old one is dropped only in a
-- later release, after its readers moved. Columns are named like the fields
-- of the JSON API (GET /v1/obligations and friends); money is integer minor
-- units plus an ISO 4217 currency.
--
-- The views run with their owner's rights, so the read-only role below needs
-- no access to the base tables, and has none.
CREATE SCHEMA reporting;

-- Open obligations: delegations whose remote task ended while the
-- compensation gate applied and whose hold is still active, with the last
-- event of their audit stream.
CREATE VIEW reporting.pending_obligations_v1 AS
SELECT
    d.id                                            AS delegation_id,
    d.tenant,
    d.org_id,
    d.task_class,
    d.budget_id,
    d.amount_minor,
    d.currency,
    d.remote_task_id,
    d.task_status,
    d.obligation_state,
    d.obligation_reason,
    d.created_at,
    extract(epoch FROM now() - d.created_at)::bigint AS age_seconds,
    d.cancel_requested_at,
    d.compensation_deadline,
    d.compensation_attempts,
    d.compensation_last_error,
    last_event.type                                 AS last_evidence_type,
    last_event.at                                   AS last_evidence_at,
    d.updated_at
FROM delegations d
LEFT JOIN LATERAL (
    SELECT e.type, e.at FROM events e
    WHERE e.delegation_id = d.id
    ORDER BY e.seq DESC
    LIMIT 1
) last_event ON true
WHERE d.obligation_state IN ('revocation_pending_compensation', 'compensation_unconfirmed', 'escalated');

COMMENT ON VIEW reporting.pending_obligations_v1 IS
    'Open obligations (revocation_pending_compensation, compensation_unconfirmed, escalated) with their last evidence. Version 1: columns are never removed or changed.';

-- Active holds by org, currency and obligation state, with age buckets
-- (<1d, 1-7d, 7-30d, >30d by creation time).
CREATE VIEW reporting.obligation_summary_v1 AS
SELECT
    d.org_id,
    d.currency,
    d.obligation_state,
    count(*)                                                                              AS obligation_count,
    sum(d.amount_minor)::bigint                                                           AS amount_minor,
    count(*) FILTER (WHERE d.created_at > now() - interval '1 day')                       AS count_lt_1d,
    coalesce(sum(d.amount_minor) FILTER (WHERE d.created_at > now() - interval '1 day'), 0)::bigint AS amount_lt_1d_minor,
    count(*) FILTER (WHERE d.created_at <= now() - interval '1 day'
                       AND d.created_at > now() - interval '7 days')                      AS count_1d_7d,
    coalesce(sum(d.amount_minor) FILTER (WHERE d.created_at <= now() - interval '1 day'
                       AND d.created_at > now() - interval '7 days'), 0)::bigint          AS amount_1d_7d_minor,
    count(*) FILTER (WHERE d.created_at <= now() - interval '7 days'
                       AND d.created_at > now() - interval '30 days')                     AS count_7d_30d,
    coalesce(sum(d.amount_minor) FILTER (WHERE d.created_at <= now() - interval '7 days'
                       AND d.created_at > now() - interval '30 days'), 0)::bigint         AS amount_7d_30d_minor,
    count(*) FILTER (WHERE d.created_at <= now() - interval '30 days')                    AS count_gt_30d,
    coalesce(sum(d.amount_minor) FILTER (WHERE d.created_at <= now() - interval '30 days'), 0)::bigint AS amount_gt_30d_minor
FROM delegations d
WHERE d.obligation_state IN ('held', 'revocation_pending_compensation', 'compensation_unconfirmed', 'escalated')
GROUP BY d.org_id, d.currency, d.obligation_state;

COMMENT ON VIEW reporting.obligation_summary_v1 IS
    'Active holds by org, currency and obligation state, with age buckets. Version 1.';

-- What reconciliation must look at: a different terminal status after a
-- terminal one (status_conflict), evidence that arrived after the obligation
-- ended (late_evidence; contradicted_write_off when it contradicts a
-- write-off) and signed tokens that were refused (refused_token).
CREATE VIEW reporting.anomalies_v1 AS
SELECT
    e.seq,
    CASE
        WHEN e.type = 'status_conflict' THEN 'status_conflict'
        WHEN e.type = 'token_refused' THEN 'refused_token'
        WHEN coalesce(e.data ->> 'contradicts_write_off', 'false') = 'true' THEN 'contradicted_write_off'
        ELSE 'late_evidence'
    END                                              AS kind,
    e.type                                           AS event_type,
    e.delegation_id,
    coalesce(d.org_id, e.data ->> 'org_id',
             CASE WHEN e.stream LIKE 'org:%' THEN substr(e.stream, 5) END) AS org_id,
    d.tenant,
    d.obligation_state,
    e.at,
    e.actor,
    e.data
FROM events e
LEFT JOIN delegations d ON d.id = e.delegation_id
WHERE e.type IN ('status_conflict', 'late_evidence', 'token_refused');

COMMENT ON VIEW reporting.anomalies_v1 IS
    'Status conflicts, late evidence, write-offs contradicted by later evidence and refused tokens. Version 1.';

-- Budgets and where their money is. available + held + spent + written_off = funded.
CREATE VIEW reporting.budgets_v1 AS
SELECT
    b.id                AS budget_id,
    b.currency,
    b.funded_minor,
    b.available_minor,
    b.held_minor,
    b.spent_minor,
    b.written_off_minor,
    (SELECT count(*) FROM delegations d
     WHERE d.budget_id = b.id
       AND d.obligation_state IN ('held', 'revocation_pending_compensation', 'compensation_unconfirmed', 'escalated')
    )                   AS active_holds,
    b.created_at,
    b.updated_at
FROM budgets b;

COMMENT ON VIEW reporting.budgets_v1 IS
    'Budgets: funded, available, held, spent and written-off amounts, and the number of active holds. Version 1.';

-- The read-only role for reporting jobs: NOLOGIN, so a DBA grants it to the
-- login roles of the jobs (GRANT quittance_reporting TO finance_job). Roles
-- are cluster-wide, so it may exist already (another database of the same
-- cluster); creating it needs CREATEROLE, and a migrating user without it
-- gets a warning instead of a failed deployment: a DBA then creates the role
-- and applies the grants below by hand (sql/RECONCILIATION.md).
-- +goose StatementBegin
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'quittance_reporting') THEN
        BEGIN
            CREATE ROLE quittance_reporting NOLOGIN;
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE WARNING 'cannot create role quittance_reporting (needs CREATEROLE); create it and grant it the reporting views by hand';
            RETURN;
        END;
    END IF;
    EXECUTE 'GRANT USAGE ON SCHEMA reporting TO quittance_reporting';
    EXECUTE 'GRANT SELECT ON reporting.pending_obligations_v1, reporting.obligation_summary_v1, '
            'reporting.anomalies_v1, reporting.budgets_v1 TO quittance_reporting';
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'quittance_reporting') THEN
        EXECUTE 'REVOKE ALL ON ALL TABLES IN SCHEMA reporting FROM quittance_reporting';
        EXECUTE 'REVOKE ALL ON SCHEMA reporting FROM quittance_reporting';
    END IF;
END
$$;
-- +goose StatementEnd
DROP VIEW reporting.budgets_v1;
DROP VIEW reporting.anomalies_v1;
DROP VIEW reporting.obligation_summary_v1;
DROP VIEW reporting.pending_obligations_v1;
DROP SCHEMA reporting;
-- The role is cluster-wide: it is dropped only when no other database of the
-- cluster still grants it anything, and the owner may lack the right to.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'quittance_reporting') THEN
        BEGIN
            DROP ROLE quittance_reporting;
        EXCEPTION WHEN dependent_objects_still_exist OR insufficient_privilege THEN
            RAISE NOTICE 'role quittance_reporting kept: %', SQLERRM;
        END;
    END IF;
END
$$;
-- +goose StatementEnd
