-- name: CheckpointSpanHeads :many
-- What the next checkpoint signs: the span of the feed after the event at
-- position after_pos (0: from the start), up to max_events events in the
-- feed's order (order_xid, tx_pos, pos), and the head of every stream with
-- an event in it, by stream. Only final rows, order_xid below this
-- statement's snapshot xmin, are in a span (migration 00009): nothing can
-- still be written below that cut, so no event can later appear inside a
-- span already signed. Every row also carries the span's end: its last
-- event's position and feed order, and how many events it holds.
WITH span AS MATERIALIZED (
    SELECT p.pos, p.seq, p.order_xid, p.tx_pos
    FROM event_positions p
    WHERE (p.order_xid, p.tx_pos, p.pos) > (
            coalesce((SELECT a.order_xid FROM event_positions a WHERE a.pos = @after_pos), '0')::xid8,
            coalesce((SELECT a.tx_pos FROM event_positions a WHERE a.pos = @after_pos), 0)::bigint,
            @after_pos::bigint)
      AND p.order_xid < pg_snapshot_xmin(pg_current_snapshot())::xid8
    ORDER BY p.order_xid, p.tx_pos, p.pos
    LIMIT @max_events
), span_end AS (
    SELECT s.pos, s.order_xid, s.tx_pos, (SELECT count(*) FROM span)::int AS events
    FROM span s
    ORDER BY s.order_xid DESC, s.tx_pos DESC, s.pos DESC
    LIMIT 1
)
SELECT DISTINCT ON (e.stream) e.stream, e.stream_seq, e.hash,
    span_end.pos AS through_pos, span_end.order_xid AS through_order_xid,
    span_end.tx_pos AS through_tx_pos, span_end.events AS span_events
FROM span s
JOIN events e ON e.seq = s.seq
CROSS JOIN span_end
ORDER BY e.stream, e.stream_seq DESC;

-- name: CheckpointsSigningStream :one
-- The checkpoint that signed the stream's latest signed head: for the
-- stream's events from the last, the first one inside any checkpoint's
-- span, and the first checkpoint whose span reaches it — the one whose
-- span holds it, which lists the stream with that event as its head.
SELECT c.*
FROM events e
JOIN event_positions p ON p.seq = e.seq
CROSS JOIN LATERAL (
    SELECT * FROM checkpoints c
    WHERE c.through_pos IS NOT NULL
      AND (c.through_order_xid, c.through_tx_pos, c.through_pos) >= (p.order_xid, p.tx_pos, p.pos)
    ORDER BY c.through_order_xid, c.through_tx_pos, c.through_pos, c.id
    LIMIT 1
) c
WHERE e.stream = @stream
ORDER BY e.stream_seq DESC
LIMIT 1;

-- name: CheckpointLatest :one
SELECT * FROM checkpoints ORDER BY id DESC LIMIT 1;

-- name: CheckpointGet :one
SELECT * FROM checkpoints WHERE id = $1;

-- name: CheckpointList :many
-- Checkpoints after after_id, oldest first.
SELECT * FROM checkpoints WHERE id > @after_id ORDER BY id LIMIT @max_rows;

-- name: CheckpointInsert :exec
INSERT INTO checkpoints (id, created_at, created_by, kid, streams, heads_sha256, payload, jws,
                         through_pos, through_order_xid, through_tx_pos)
VALUES (@id, @created_at, @created_by, @kid, @streams, @heads_sha256, @payload, @jws,
        sqlc.narg(through_pos), sqlc.narg(through_order_xid), sqlc.narg(through_tx_pos));

-- name: CheckpointFeedHorizon :one
-- The feed's cut now (rows with order_xid below it are final) and the
-- snapshot's xmax: every event committed before this statement has an
-- order_xid below xmax (migration 00009), so once the cut reaches it they
-- are all final and a checkpoint can cover them.
SELECT pg_snapshot_xmin(pg_current_snapshot())::xid8 AS cut,
       pg_snapshot_xmax(pg_current_snapshot())::xid8 AS horizon;

-- name: CheckpointHeadsSigned :many
-- The head each of the given streams was last signed at, and by which
-- checkpoint (checkpoint_heads, kept from the checkpoints' payloads by
-- migration 00034's trigger): the next checkpoint must not move one back.
-- full: that checkpoint is one from before 00031, which lists every stream
-- (false when its row is gone).
SELECT h.stream, h.checkpoint_id, h.stream_seq, h.hash, coalesce(c.id IS NOT NULL AND c.through_pos IS NULL, false)::boolean AS full
FROM checkpoint_heads h
LEFT JOIN checkpoints c ON c.id = h.checkpoint_id
WHERE h.stream = ANY(@streams::text[]);
