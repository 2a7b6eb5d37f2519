-- name: EventStreamHeads :many
-- The last event of every stream, by stream: what a checkpoint signs.
SELECT DISTINCT ON (stream) stream, stream_seq, hash
FROM events
ORDER BY stream, stream_seq DESC;

-- name: CheckpointLatest :one
SELECT * FROM checkpoints ORDER BY id DESC LIMIT 1;

-- name: CheckpointGet :one
SELECT * FROM checkpoints WHERE id = $1;

-- name: CheckpointList :many
-- Checkpoints after after_id, oldest first.
SELECT * FROM checkpoints WHERE id > @after_id ORDER BY id LIMIT @max_rows;

-- name: CheckpointInsert :exec
INSERT INTO checkpoints (id, created_at, created_by, kid, streams, heads_sha256, payload, jws)
VALUES (@id, @created_at, @created_by, @kid, @streams, @heads_sha256, @payload, @jws);
