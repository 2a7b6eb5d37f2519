-- Budgets, orgs and the counterparty scorecard for the console
-- (ledger/overview.go). The period and now come from the caller's clock.

-- name: BudgetListAll :many
SELECT * FROM budgets ORDER BY id LIMIT 1000;

-- name: OrgListAll :many
SELECT * FROM remote_orgs ORDER BY id LIMIT 1000;

-- name: ScorecardExposure :many
-- Active holds by org and currency.
SELECT d.org_id, d.currency, count(*)::bigint AS holds, sum(d.amount_minor)::bigint AS amount_minor
FROM delegations d
WHERE d.obligation_state IN ('held', 'revocation_pending_compensation', 'compensation_unconfirmed', 'escalated')
  AND (sqlc.narg(org_id)::text IS NULL OR d.org_id = sqlc.narg(org_id))
GROUP BY d.org_id, d.currency;

-- name: ScorecardAckTimes :many
-- Obligations an ack discharged in the period after they waited for it,
-- with the median and 90th percentile of the time from the cancel request
-- (or the gated end of the task) to the ack, in seconds.
SELECT
    d.org_id,
    count(*)::bigint AS acks,
    coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM x.at - coalesce(d.cancel_requested_at, g.at))), 0)::float8 AS median_seconds,
    coalesce(percentile_cont(0.9) WITHIN GROUP (ORDER BY extract(epoch FROM x.at - coalesce(d.cancel_requested_at, g.at))), 0)::float8 AS p90_seconds
FROM events x
JOIN delegations d ON d.id = x.delegation_id
JOIN LATERAL (
    SELECT min(e.at) AS at FROM events e
    WHERE e.delegation_id = x.delegation_id AND e.obligation_to = 'revocation_pending_compensation'
) g ON g.at IS NOT NULL
WHERE x.obligation_from IN ('revocation_pending_compensation', 'compensation_unconfirmed', 'escalated')
  AND x.obligation_to = 'compensated'
  AND x.at >= @since AND x.at < @until
  AND (sqlc.narg(org_id)::text IS NULL OR d.org_id = sqlc.narg(org_id))
GROUP BY d.org_id;

-- name: ScorecardOutcomes :many
-- Gated obligations that ended in the period, and how many were written off.
SELECT
    d.org_id,
    count(*)::bigint                                              AS resolved,
    count(*) FILTER (WHERE x.obligation_to = 'written_off')::bigint AS written_off
FROM events x
JOIN delegations d ON d.id = x.delegation_id
WHERE x.obligation_from IN ('revocation_pending_compensation', 'compensation_unconfirmed', 'escalated')
  AND x.obligation_to IN ('compensated', 'released', 'written_off')
  AND x.at >= @since AND x.at < @until
  AND (sqlc.narg(org_id)::text IS NULL OR d.org_id = sqlc.narg(org_id))
GROUP BY d.org_id;

-- name: ScorecardUnconfirmed :many
-- compensation_unconfirmed obligations now, by org, aged from when they
-- became unconfirmed.
WITH unconfirmed AS (
    SELECT d.org_id, coalesce(entered.at, d.updated_at) AS since
    FROM delegations d
    LEFT JOIN LATERAL (
        SELECT max(e.at) AS at FROM events e
        WHERE e.delegation_id = d.id AND e.obligation_to = 'compensation_unconfirmed'
    ) entered ON true
    WHERE d.obligation_state = 'compensation_unconfirmed'
      AND (sqlc.narg(org_id)::text IS NULL OR d.org_id = sqlc.narg(org_id))
)
SELECT
    org_id,
    count(*)::bigint                                                   AS total,
    count(*) FILTER (WHERE since > sqlc.arg(day_ago)::timestamptz)::bigint       AS lt_1d,
    count(*) FILTER (WHERE since <= sqlc.arg(day_ago)::timestamptz
                       AND since > sqlc.arg(week_ago)::timestamptz)::bigint      AS d1_7,
    count(*) FILTER (WHERE since <= sqlc.arg(week_ago)::timestamptz
                       AND since > sqlc.arg(month_ago)::timestamptz)::bigint     AS d7_30,
    count(*) FILTER (WHERE since <= sqlc.arg(month_ago)::timestamptz)::bigint    AS gt_30d,
    min(since)::timestamptz                                            AS oldest
FROM unconfirmed
GROUP BY org_id;
