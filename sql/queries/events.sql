-- name: EventStreamHead :one
-- Locks the stream for the rest of the transaction and returns its last
-- event (no row for a new stream): see event_stream_head.
SELECT h.stream_seq::integer AS stream_seq, h.hash::bytea AS hash FROM event_stream_head(@stream::text) AS h;

-- name: EventInsert :one
-- Appends an event, its data kept both exactly as hashed (hashed_data) and
-- as jsonb for queries (data), from the one parameter. The parameter is
-- text: were it jsonb, its json copy would be jsonb's normalised text. And, for a delegation's event, queues its delivery to
-- every webhook endpoint of the delegation's tenant that subscribes to its
-- type (all types when event_types is empty) and a push to each of the
-- delegation's gateway push configs, in one statement, and says
-- how many deliveries it queued: only those wake the webhook workers.
WITH appended AS (
    INSERT INTO events (
        stream, stream_seq, delegation_id, type, at, actor, obligation_from, obligation_to,
        data, hashed_data, evidence, prev_hash, hash
    ) VALUES (
        @stream, @stream_seq, @delegation_id, @type, @at, @actor, @obligation_from, @obligation_to,
        (@hashed_data::text)::jsonb, (@hashed_data::text)::json, @evidence, @prev_hash, @hash
    )
    RETURNING seq, delegation_id, type, at
), queued AS (
    INSERT INTO webhook_deliveries (tenant, endpoint_id, event_seq, next_attempt_at, created_at, updated_at)
    SELECT w.tenant, w.id, a.seq, a.at, a.at, a.at
    FROM appended a
    JOIN delegations d ON d.id = a.delegation_id
    JOIN webhook_endpoints w ON w.tenant = d.tenant
    WHERE cardinality(w.event_types) = 0 OR a.type = ANY (w.event_types)
    ON CONFLICT DO NOTHING
    RETURNING 1
), pushed AS (
    -- Every event of a delegation may change its task as the A2A gateway
    -- shows it: a push to each of the delegation's push configs.
    INSERT INTO webhook_deliveries (tenant, push_delegation_id, push_config_id, event_seq, next_attempt_at, created_at, updated_at)
    SELECT c.tenant, c.delegation_id, c.id, a.seq, a.at, a.at, a.at
    FROM appended a
    JOIN gateway_push_configs c ON c.delegation_id = a.delegation_id
    ON CONFLICT DO NOTHING
    RETURNING 1
)
SELECT a.seq, ((SELECT count(*) FROM queued) + (SELECT count(*) FROM pushed))::integer AS deliveries FROM appended a;

-- name: EventListByStream :many
SELECT * FROM events WHERE stream = $1 ORDER BY stream_seq;

-- name: EventGetBySeq :one
SELECT * FROM events WHERE seq = $1;

-- name: EventStreamHeadsLocked :many
-- Locks each of the streams for the rest of the transaction, in stream
-- order, as event_stream_head locks one, and returns the last event of
-- each that has one: the heads of a batch of appends, read in one
-- statement.
SELECT s.stream::text AS stream, h.stream_seq::integer AS stream_seq, h.hash::bytea AS hash
FROM (SELECT DISTINCT unnest(@streams::text[]) AS stream ORDER BY 1) s
CROSS JOIN LATERAL event_stream_head(s.stream) h;

-- name: EventStreamHeadsLockedForFlush :many
-- EventStreamHeadsLocked for a flush's pre-read: the streams of @streams
-- and those of the delegations DelegationsLockForFlush locked (the same
-- @ids, @org_ids and @task_ids), locked in stream order.
SELECT s.stream::text AS stream, h.stream_seq::integer AS stream_seq, h.hash::bytea AS hash
FROM (
    SELECT DISTINCT x.stream FROM (
        SELECT unnest(@streams::text[]) AS stream
        UNION ALL
        SELECT 'delegation:' || d.id::text FROM delegations d
        WHERE d.id = ANY(@ids::uuid[])
           OR (d.org_id, d.remote_task_id) IN (SELECT unnest(@org_ids::text[]), unnest(@task_ids::text[]))
    ) x
    ORDER BY 1
) s
CROSS JOIN LATERAL event_stream_head(s.stream) h;
