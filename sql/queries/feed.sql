-- name: FeedList :many
-- Events after the event at position after_pos in the feed's order
-- (order_xid, tx_pos, pos), optionally of one tenant or one delegation.
--
-- Only rows below the cut, order_xid < xmin of this statement's snapshot,
-- are final (migration 00009): nothing can still be written below it, and
-- everything committed below it is visible now. Such rows are ready
-- (ready = true) and come first; serving them up to the last and resuming
-- after it misses nothing and repeats nothing. The rows of the first
-- transaction above the cut, if any, follow with ready = false, so the
-- caller learns what it waits for (their order_xid) without reading the
-- rest; it must not serve them.
--
-- after_pos names the cursor row by its position: the cursor is that row's
-- (order_xid, tx_pos, pos). 0 is before the first event. A position no row
-- has is taken as one from before 00009 (order_xid 0, tx_pos 0), which
-- orders like the old numeric positions did.
WITH cut AS (
    SELECT pg_snapshot_xmin(pg_current_snapshot())::xid8 AS xmin
), bound AS (
    SELECT coalesce((
        SELECT min(h.order_xid) FROM event_positions h
        WHERE h.order_xid >= cut.xmin
          AND (sqlc.narg(tenant)::text IS NULL OR h.tenant = sqlc.narg(tenant))
          AND (sqlc.narg(delegation_id)::uuid IS NULL OR h.delegation_id = sqlc.narg(delegation_id))
    ), cut.xmin)::xid8 AS order_xid
    FROM cut
)
SELECT p.pos, p.order_xid, (p.order_xid < cut.xmin)::boolean AS ready, sqlc.embed(e)
FROM event_positions p
JOIN events e ON e.seq = p.seq
CROSS JOIN cut
WHERE (p.order_xid, p.tx_pos, p.pos) > (
        coalesce((SELECT a.order_xid FROM event_positions a WHERE a.pos = @after_pos), '0')::xid8,
        coalesce((SELECT a.tx_pos FROM event_positions a WHERE a.pos = @after_pos), 0)::bigint,
        @after_pos::bigint)
  AND p.order_xid <= (SELECT bound.order_xid FROM bound)
  AND (sqlc.narg(tenant)::text IS NULL OR p.tenant = sqlc.narg(tenant))
  AND (sqlc.narg(delegation_id)::uuid IS NULL OR p.delegation_id = sqlc.narg(delegation_id))
ORDER BY p.order_xid, p.tx_pos, p.pos
LIMIT @max_rows;

-- name: FeedPositionOf :one
SELECT pos FROM event_positions WHERE seq = $1;

-- name: FeedHead :one
-- The position of the last ready event in the feed's order (0: none), so
-- that reading after it yields exactly the events not yet readable.
SELECT coalesce((
    SELECT p.pos FROM event_positions p
    WHERE p.order_xid < pg_snapshot_xmin(pg_current_snapshot())::xid8
    ORDER BY p.order_xid DESC, p.tx_pos DESC, p.pos DESC
    LIMIT 1
), 0)::bigint;

-- name: FeedCut :one
-- The feed's cut now: rows with order_xid below it are ready.
SELECT pg_snapshot_xmin(pg_current_snapshot())::xid8;

-- name: FeedNotify :exec
-- Wakes the feed's readers on every replica (LISTEN quittance_events) and,
-- when the commits it announces queued webhook deliveries, the webhook
-- workers (LISTEN quittance_webhooks). Sent after a commit, in a
-- transaction of its own: NOTIFY takes a cluster-wide lock at commit, which
-- no writing transaction may hold. A lost notification costs latency,
-- never an event, so it need not wait for the WAL flush.
SELECT set_config('synchronous_commit', 'off', true), pg_notify('quittance_events', ''),
       CASE WHEN @webhooks::boolean THEN pg_notify('quittance_webhooks', '') END;
