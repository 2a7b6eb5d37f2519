-- name: EventStreamHead :one
-- Locks the stream for the rest of the transaction and returns its last
-- event (no row for a new stream): see event_stream_head.
SELECT h.stream_seq::integer AS stream_seq, h.hash::bytea AS hash FROM event_stream_head(@stream::text) AS h;

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

-- name: EventInsertBatch :one
-- Appends the events of a transaction (a flush's, in arrival order) in
-- one statement, one row of the arrays each, in their order, so that their
-- seqs, and the feed positions the commit gives them, follow it. Each
-- event's data is kept both exactly as hashed (hashed_data) and as jsonb
-- for queries (data), from the one text (were it jsonb, its json copy
-- would be jsonb's normalised text). An empty text stands for NULL in
-- @delegation_ids, @obligation_froms, @obligation_tos and @evidences (none
-- is ever empty otherwise). For a delegation's event, queues its delivery
-- to every webhook endpoint of the delegation's tenant that subscribes to
-- its type (all types when event_types is empty), and a push to each of
-- the delegation's gateway push configs. Says how many events it appended
-- and how many deliveries it queued: only those wake the webhook workers.
--
-- Each event finds its delegation and its push configs through their
-- indexes, in subqueries the planner cannot merge into a join (LIMIT,
-- OFFSET 0): planned as joins, with the thousand rows it guesses for the
-- arrays, a generic plan hashes the whole of delegations and of
-- gateway_push_configs on every flush until those tables reach hundreds
-- of thousands of rows (TestWritePathPlansUseIndexes). The arrays are read
-- through a subquery the planner cannot flatten either (OFFSET 0), so that
-- PostgreSQL keeps the generic plan rather than planning again on many
-- flushes, as DelegationsAndStreamsLockForFlush explains.
WITH appended AS (
    INSERT INTO events (
        stream, stream_seq, delegation_id, type, at, actor, obligation_from, obligation_to,
        data, hashed_data, evidence, prev_hash, hash
    )
    SELECT r.stream, r.stream_seq, nullif(r.delegation_id, '')::uuid, r.type, r.at, r.actor,
           nullif(r.obligation_from, ''), nullif(r.obligation_to, ''),
           r.hashed_data::jsonb, r.hashed_data::json, nullif(r.evidence, ''), r.prev_hash, r.hash
    FROM (
        SELECT generate_subscripts(a.streams, 1) AS ord,
               unnest(a.streams) AS stream, unnest(a.stream_seqs) AS stream_seq,
               unnest(a.delegation_ids) AS delegation_id, unnest(a.types) AS type,
               unnest(a.ats) AS at, unnest(a.actors) AS actor,
               unnest(a.obligation_froms) AS obligation_from, unnest(a.obligation_tos) AS obligation_to,
               unnest(a.hashed_datas) AS hashed_data, unnest(a.evidences) AS evidence,
               unnest(a.prev_hashes) AS prev_hash, unnest(a.hashes) AS hash
        FROM (SELECT @streams::text[] AS streams, @stream_seqs::integer[] AS stream_seqs,
                     @delegation_ids::text[] AS delegation_ids, @types::text[] AS types,
                     @ats::timestamptz[] AS ats, @actors::text[] AS actors,
                     @obligation_froms::text[] AS obligation_froms, @obligation_tos::text[] AS obligation_tos,
                     @hashed_datas::text[] AS hashed_datas, @evidences::text[] AS evidences,
                     @prev_hashes::bytea[] AS prev_hashes, @hashes::bytea[] AS hashes
              OFFSET 0) a
    ) r
    ORDER BY r.ord
    RETURNING seq, delegation_id, type, at
), queued AS (
    INSERT INTO webhook_deliveries (tenant, endpoint_id, event_seq, next_attempt_at, created_at, updated_at)
    SELECT w.tenant, w.id, a.seq, a.at, a.at, a.at
    FROM appended a
    CROSS JOIN LATERAL (SELECT d.tenant FROM delegations d WHERE d.id = a.delegation_id LIMIT 1) d
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
    CROSS JOIN LATERAL (
        SELECT c.tenant, c.delegation_id, c.id FROM gateway_push_configs c WHERE c.delegation_id = a.delegation_id OFFSET 0
    ) c
    ON CONFLICT DO NOTHING
    RETURNING 1
)
SELECT (SELECT count(*) FROM appended)::integer AS appended,
       ((SELECT count(*) FROM queued) + (SELECT count(*) FROM pushed))::integer AS deliveries;
