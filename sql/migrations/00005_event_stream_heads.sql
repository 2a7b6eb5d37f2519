-- +goose Up

-- The head of each event stream: its last position and hash. Appending an
-- event claims the next position with one upsert, which also locks the head
-- row until the transaction ends, so appends to one stream are serialized
-- and the chain's previous hash comes back in the same round trip.
CREATE TABLE event_stream_heads (
    stream     text    PRIMARY KEY,
    stream_seq integer NOT NULL CHECK (stream_seq > 0),
    hash       bytea   NOT NULL
);

INSERT INTO event_stream_heads (stream, stream_seq, hash)
SELECT DISTINCT ON (stream) stream, stream_seq, hash
FROM events
ORDER BY stream, stream_seq DESC;

-- +goose Down
DROP TABLE event_stream_heads;
