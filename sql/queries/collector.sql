-- name: MetricsWaiting :many
-- What the scrape-time collector exports about waiting, in one statement;
-- each row is (metric, label, state, value):
--
--   state_entry     label = obligation state: when the obligation longest
--                   in it entered it (Unix seconds; one row per open state,
--                   0 when none). Each is one probe of delegations_open_since.
--   outbox_jobs     label = kind, state = due | lease_expired | scheduled | running:
--                   open A2A jobs. due: claimable at @now; lease_expired:
--                   claimable because the worker that held it never finished
--                   it; scheduled: waiting for run_after (a retry's backoff);
--                   running: leased.
--   outbox_oldest_due    label = kind: since when the longest-waiting
--                   claimable job has been claimable (Unix seconds).
--   outbox_retried_max_attempts  label = kind: the claims of the most-claimed
--                   open job among those that failed at least once (an error
--                   was recorded) or lost a lease.
--   outbox_lease_expiries  label = kind: claims made after a lease ran out,
--                   over every job ever enqueued (done ones included).
--   webhook_deliveries  label = pending | dead.
--   dispatch_unknown     delegations in the dispatch_unknown condition.
--   dispatch_unknown_since  since when (Unix seconds) the longest-standing
--                   of them has been in it; 0 when none is.
--   task_not_found  delegations with an active hold in the task_not_found
--                   condition (their agent no longer knows their task).
--   task_not_found_since  since when (Unix seconds) the longest-standing
--                   of them has been in it; 0 when none is.
--   extra_task_compensation  extra remote tasks of completed delegations
--                   whose compensation is required and not resolved (the
--                   extra_task_compensation anomaly).
--   extra_task_compensation_since  since when (Unix seconds) the oldest
--                   of them has been required; 0 when none is.
--   unanchored_since  the time (Unix seconds) of the first event, in the
--                   feed's order, after the span the latest checkpoint
--                   signed: the oldest event no checkpoint covers yet; 0
--                   when every event is covered. One probe of
--                   event_positions_feed: the latest checkpoint's end is
--                   compared as three scalars, each its own subquery, so
--                   that the comparison is the index scan's condition (as
--                   one record, coalesced, it was a filter on a scan of the
--                   whole feed, and the scrape timed out at 30 million
--                   events: make bench, 2026-12-07).
--
-- Only open jobs (a2a_outbox_due), jobs that lost a lease
-- (a2a_outbox_lease_expired) and pending or dead deliveries
-- (webhook_deliveries_due, webhook_deliveries_dead), dispatch_unknown
-- delegations (delegations_dispatch_unknown), task_not_found ones
-- (delegations_task_not_found) and open extra task compensations
-- (delegation_remote_tasks_compensation_open) are read.
WITH open_jobs AS MATERIALIZED (
    SELECT o.kind, o.attempts, o.run_after, o.locked_until, o.lease_token, o.last_error, o.lease_expiries
    FROM a2a_outbox o
    WHERE o.done_at IS NULL
), classified AS (
    SELECT j.*,
        CASE
            WHEN j.locked_until IS NOT NULL AND j.locked_until > @now::timestamptz THEN 'running'
            WHEN j.run_after > @now::timestamptz THEN 'scheduled'
            WHEN j.lease_token IS NOT NULL THEN 'lease_expired'
            ELSE 'due'
        END AS state
    FROM open_jobs j
)
SELECT 'state_entry'::text AS metric, s.state::text AS label, ''::text AS state,
       coalesce(extract(epoch FROM (
           SELECT min(d.obligation_state_since) FROM delegations d
           WHERE d.obligation_state = s.state
             AND d.obligation_state IN ('held', 'revocation_pending_compensation', 'compensation_unconfirmed', 'escalated')
       )), 0)::float8 AS value
FROM unnest(ARRAY['held', 'revocation_pending_compensation', 'compensation_unconfirmed', 'escalated']::text[]) AS s(state)
UNION ALL
SELECT 'outbox_jobs', c.kind, c.state, count(*)::float8
FROM classified c GROUP BY c.kind, c.state
UNION ALL
SELECT 'outbox_oldest_due', c.kind, '', extract(epoch FROM min(GREATEST(c.run_after, coalesce(c.locked_until, c.run_after))))::float8
FROM classified c WHERE c.state IN ('due', 'lease_expired') GROUP BY c.kind
UNION ALL
SELECT 'outbox_retried_max_attempts', c.kind, '', max(c.attempts)::float8
FROM classified c WHERE coalesce(c.last_error, '') <> '' OR c.lease_expiries > 0 GROUP BY c.kind
UNION ALL
SELECT 'outbox_lease_expiries', o.kind, '', sum(o.lease_expiries)::float8
FROM a2a_outbox o WHERE o.lease_expiries > 0 GROUP BY o.kind
UNION ALL
SELECT 'webhook_deliveries', 'pending', '', count(*)::float8
FROM webhook_deliveries w WHERE w.status = 'pending'
UNION ALL
SELECT 'webhook_deliveries', 'dead', '', count(*)::float8
FROM webhook_deliveries w WHERE w.status = 'dead'
UNION ALL
SELECT 'dispatch_unknown', '', '', count(*)::float8
FROM delegations d WHERE d.dispatch_unknown_at IS NOT NULL
UNION ALL
SELECT 'dispatch_unknown_since', '', '', coalesce(extract(epoch FROM min(d.dispatch_unknown_at)), 0)::float8
FROM delegations d WHERE d.dispatch_unknown_at IS NOT NULL
UNION ALL
SELECT 'task_not_found', '', '', count(*)::float8
FROM delegations d WHERE d.task_not_found_at IS NOT NULL
  AND d.obligation_state IN ('held', 'revocation_pending_compensation', 'compensation_unconfirmed', 'escalated')
UNION ALL
SELECT 'task_not_found_since', '', '', coalesce(extract(epoch FROM min(d.task_not_found_at)), 0)::float8
FROM delegations d WHERE d.task_not_found_at IS NOT NULL
  AND d.obligation_state IN ('held', 'revocation_pending_compensation', 'compensation_unconfirmed', 'escalated')
UNION ALL
SELECT 'extra_task_compensation', '', '', count(*)::float8
FROM delegation_remote_tasks r WHERE r.compensation_required_at IS NOT NULL AND r.compensation_resolved_at IS NULL
UNION ALL
SELECT 'extra_task_compensation_since', '', '', coalesce(extract(epoch FROM min(r.compensation_required_at)), 0)::float8
FROM delegation_remote_tasks r WHERE r.compensation_required_at IS NOT NULL AND r.compensation_resolved_at IS NULL
UNION ALL
SELECT 'unanchored_since', '', '', coalesce(extract(epoch FROM (
    SELECT e.at
    FROM event_positions p JOIN events e ON e.seq = p.seq
    WHERE (p.order_xid, p.tx_pos, p.pos) > (
        coalesce((SELECT c.through_order_xid FROM checkpoints c WHERE c.through_pos IS NOT NULL ORDER BY c.id DESC LIMIT 1), '0'::xid8),
        coalesce((SELECT c.through_tx_pos FROM checkpoints c WHERE c.through_pos IS NOT NULL ORDER BY c.id DESC LIMIT 1), 0::bigint),
        coalesce((SELECT c.through_pos FROM checkpoints c WHERE c.through_pos IS NOT NULL ORDER BY c.id DESC LIMIT 1), 0::bigint))
    ORDER BY p.order_xid, p.tx_pos, p.pos
    LIMIT 1
)), 0)::float8;
