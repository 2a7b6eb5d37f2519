-- name: EventStreamAdvance :one
-- Claims the next position of a stream and returns it with the hash of the
-- event before it (the genesis hash for a new stream). The head row stays
-- locked until the transaction ends: appends to one stream are serialized.
INSERT INTO event_stream_heads AS h (stream, stream_seq, hash)
VALUES (@stream, 1, @genesis)
ON CONFLICT (stream) DO UPDATE SET stream_seq = h.stream_seq + 1
RETURNING stream_seq, hash;

-- name: EventInsert :one
-- Inserts the event and records its hash as the stream's head.
WITH head AS (
    UPDATE event_stream_heads SET hash = @hash WHERE stream = @stream
)
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
