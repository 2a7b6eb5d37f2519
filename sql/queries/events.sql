-- name: EventStreamLock :exec
-- Serializes appends to one stream for the rest of the transaction.
SELECT pg_advisory_xact_lock(hashtextextended(@stream::text, 0));

-- name: EventStreamHead :one
SELECT stream_seq, hash FROM events WHERE stream = $1 ORDER BY stream_seq DESC LIMIT 1;

-- name: EventInsert :one
INSERT INTO events (
    stream, stream_seq, delegation_id, type, at, actor, obligation_from, obligation_to,
    data, evidence, prev_hash, hash
) VALUES (
    @stream, @stream_seq, @delegation_id, @type, @at, @actor, @obligation_from, @obligation_to,
    @data, @evidence, @prev_hash, @hash
)
RETURNING seq;

-- name: EventListByStream :many
SELECT * FROM events WHERE stream = $1 ORDER BY stream_seq;
