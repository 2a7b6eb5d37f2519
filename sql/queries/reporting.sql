-- Reporting queries for the API (GET /v1/obligations, /summary, /anomalies)
-- and the metrics collector. They read the base tables, not the reporting
-- views: the views are a frozen contract for outside readers, these queries
-- may change with the API. Ages are measured from a now parameter given by
-- the caller (its injected clock), never from the database clock.

-- name: ObligationPage :many
-- One page of obligations in (created_at, id) order, after the cursor, with
-- the last event of the stream of each delegation. The page is chosen
-- first and only its rows look up their last event, so the cost does not
-- grow with the number of open obligations. The caller pages through a
-- read-only repeatable-read transaction to stream a consistent snapshot.
SELECT
    p.id, p.tenant, p.business_operation_id, p.org_id, p.task_class, p.budget_id, p.amount_minor, p.currency,
    p.remote_task_id, p.task_status, p.obligation_state, p.obligation_reason,
    p.cancel_requested_at, p.compensation_deadline, p.compensation_attempts,
    p.compensation_last_error, p.created_at, p.updated_at, p.dispatch_unknown_at, p.task_not_found_at,
    coalesce(last_event.type, '')::text                AS last_evidence_type,
    coalesce(last_event.at, p.created_at)::timestamptz AS last_evidence_at
FROM (
    SELECT d.* FROM delegations d
    WHERE d.obligation_state = ANY (@states::text[])
      AND (sqlc.narg(org_id)::text IS NULL OR d.org_id = sqlc.narg(org_id))
      AND (sqlc.narg(tenant)::text IS NULL OR d.tenant = sqlc.narg(tenant))
      AND (sqlc.narg(created_before)::timestamptz IS NULL OR d.created_at < sqlc.narg(created_before))
      AND (NOT @dispatch_unknown_only::boolean OR d.dispatch_unknown_at IS NOT NULL)
      AND (NOT @task_not_found_only::boolean OR d.task_not_found_at IS NOT NULL)
      AND (sqlc.narg(after_created_at)::timestamptz IS NULL
           OR d.created_at > sqlc.narg(after_created_at) OR (d.created_at = sqlc.narg(after_created_at) AND d.id > @after_id::uuid))
    ORDER BY d.created_at, d.id
    LIMIT @max_rows
) p
LEFT JOIN LATERAL (
    SELECT e.type, e.at FROM events e
    WHERE e.delegation_id = p.id
    ORDER BY e.seq DESC
    LIMIT 1
) last_event ON true
ORDER BY p.created_at, p.id;

-- name: ObligationSummary :many
-- Active amounts and counts by org, currency and state, with age buckets:
-- under 1 day, 1-7 days, 7-30 days, over 30 days. The caller gives the
-- buckets' bounds as creation times (now less 24, 168 and 720 hours), so
-- each row is placed by comparing timestamps, with no interval computed
-- per row; every column read is in delegations_active_cover.
SELECT
    b.org_id, b.currency, b.obligation_state,
    count(*)                                                        AS obligation_count,
    sum(b.amount_minor)::bigint                                     AS amount_minor,
    count(*) FILTER (WHERE b.bucket = 0)                            AS count_lt_1d,
    coalesce(sum(b.amount_minor) FILTER (WHERE b.bucket = 0), 0)::bigint AS amount_lt_1d,
    count(*) FILTER (WHERE b.bucket = 1)                            AS count_1d_7d,
    coalesce(sum(b.amount_minor) FILTER (WHERE b.bucket = 1), 0)::bigint AS amount_1d_7d,
    count(*) FILTER (WHERE b.bucket = 2)                            AS count_7d_30d,
    coalesce(sum(b.amount_minor) FILTER (WHERE b.bucket = 2), 0)::bigint AS amount_7d_30d,
    count(*) FILTER (WHERE b.bucket = 3)                            AS count_gt_30d,
    coalesce(sum(b.amount_minor) FILTER (WHERE b.bucket = 3), 0)::bigint AS amount_gt_30d
FROM (
    SELECT d.org_id, d.currency, d.obligation_state, d.amount_minor,
           CASE
               WHEN d.created_at > sqlc.arg(created_after_1d)::timestamptz THEN 0
               WHEN d.created_at > sqlc.arg(created_after_7d)::timestamptz THEN 1
               WHEN d.created_at > sqlc.arg(created_after_30d)::timestamptz THEN 2
               ELSE 3
           END AS bucket
    FROM delegations d
    WHERE d.obligation_state = ANY (sqlc.arg(states)::text[])
      AND (sqlc.narg(org_id)::text IS NULL OR d.org_id = sqlc.narg(org_id))
      AND (sqlc.narg(tenant)::text IS NULL OR d.tenant = sqlc.narg(tenant))
) b
GROUP BY b.org_id, b.currency, b.obligation_state
ORDER BY b.org_id, b.currency, b.obligation_state;

-- name: AnomalyList :many
-- Anomaly events (status conflicts, late evidence, refused tokens) after
-- the after_seq cursor, oldest first.
SELECT
    e.seq, e.type, e.stream, e.delegation_id, e.at, e.actor, e.data,
    coalesce(d.org_id, e.data ->> 'org_id',
             CASE WHEN e.stream LIKE 'org:%' THEN substr(e.stream, 5) END, '')::text AS org_id,
    coalesce(d.tenant, '')::text           AS tenant,
    coalesce(d.obligation_state, '')::text AS obligation_state
FROM events e
LEFT JOIN delegations d ON d.id = e.delegation_id
WHERE e.type = ANY (@types::text[])
  -- A release on a revoked identity is an anomaly until finance acknowledges it.
  AND NOT (e.type = 'released_on_revoked_identity' AND EXISTS (
      SELECT FROM revoked_identity_releases r
      WHERE r.delegation_id = e.delegation_id AND r.acknowledged_at IS NOT NULL))
  -- An extra task needing compensation is an anomaly until it is resolved.
  AND NOT (e.type = 'extra_task_compensation_required' AND EXISTS (
      SELECT FROM delegation_remote_tasks t
      WHERE t.delegation_id = e.delegation_id AND t.task_id = e.data ->> 'task_id'
        AND t.compensation_resolved_at IS NOT NULL))
  AND e.seq > @after_seq
  AND (sqlc.narg(since)::timestamptz IS NULL OR e.at >= sqlc.narg(since))
ORDER BY e.seq
LIMIT @max_rows;

-- name: MetricsSnapshot :many
-- Everything the scrape-time collector exports, in one statement (so from
-- one snapshot): the number of delegations per obligation state, the amount
-- held per currency (from the budgets, whose held column is the sum of
-- active holds) and the creation time of the oldest obligation per active
-- state. The active states are counted live off delegations_active_cover
-- (00029), an index over the active holds alone. The ended states are
-- never counted from delegations: each is its folded total plus the deltas
-- not yet folded, which in any one snapshot is exactly the number of its
-- rows (migration 00032 gives the argument), so the cost follows the active
-- holds and the deltas since the last fold, not the ended delegations.
SELECT 'obligations'::text AS metric, obligation_state::text AS label, count(*)::float8 AS value
FROM delegations
WHERE obligation_state IN ('held', 'revocation_pending_compensation', 'compensation_unconfirmed', 'escalated')
GROUP BY obligation_state
UNION ALL
SELECT 'obligations'::text, ended.state::text, sum(ended.n)::float8
FROM (SELECT c.state, c.n FROM obligation_counts c
      UNION ALL
      SELECT d.state, d.n::bigint FROM obligation_count_deltas d) ended
GROUP BY ended.state
UNION ALL
SELECT 'held'::text, currency::text, sum(held_minor)::float8
FROM budgets GROUP BY currency
UNION ALL
SELECT 'oldest'::text, obligation_state::text, extract(epoch FROM min(created_at))::float8
FROM delegations
WHERE obligation_state IN ('held', 'revocation_pending_compensation', 'compensation_unconfirmed', 'escalated')
GROUP BY obligation_state;

-- name: ObligationCountsFold :execrows
-- Folds up to max_rows of the oldest ended-state deltas into their totals:
-- the deltas deleted and their sums added in one statement, so every
-- snapshot sees a delta either in its total or as a delta, never both or
-- neither. The caller holds the fold's advisory lock, so replicas fold in
-- turn rather than wait on each other's total rows.
WITH folded AS (
    DELETE FROM obligation_count_deltas
    WHERE id IN (SELECT id FROM obligation_count_deltas ORDER BY id LIMIT @max_rows)
    RETURNING state, n
), sums AS (
    SELECT state, sum(n)::bigint AS n FROM folded GROUP BY state
)
UPDATE obligation_counts c SET n = c.n + sums.n
FROM sums WHERE c.state = sums.state;

-- name: ReplayLag :one
-- How old a standby's data is (ledger/DESIGN.md §7): zero on a server that
-- is not in recovery or has replayed all the WAL it received, otherwise the
-- time since the last transaction it replayed committed on the primary.
SELECT (CASE
    WHEN NOT pg_is_in_recovery() THEN 0
    WHEN pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn() THEN 0
    ELSE GREATEST(0, COALESCE(EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp()), 0))
END)::float8 AS lag_seconds;
