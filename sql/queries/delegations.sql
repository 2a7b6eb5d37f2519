-- name: DelegationGetByID :one
SELECT * FROM delegations WHERE id = $1;

-- name: DelegationGetByIDForUpdate :one
SELECT * FROM delegations WHERE id = $1 FOR UPDATE;

-- name: DelegationGetByOperation :one
SELECT * FROM delegations WHERE tenant = $1 AND business_operation_id = $2;

-- name: DelegationGetByRemoteTask :one
-- A remote task id is unique per (org, tenant): another tenant may record
-- the same id for its own delegation.
SELECT * FROM delegations WHERE org_id = @org_id AND remote_task_id = @remote_task_id AND tenant = @tenant;

-- name: DelegationGetRemoteTaskHolder :one
-- Another delegation than @id, of any tenant, recording the org's remote
-- task: one of @tenant's first. The caller takes the remote task's
-- transaction lock (AdvisoryXactLock 'quittance/remote-task:<org>/<task>',
-- as the trigger of 00033 does) first, so a holder that committed while it
-- waited is seen.
SELECT * FROM delegations
WHERE org_id = @org_id AND remote_task_id = @remote_task_id AND id <> @id
ORDER BY (tenant = @tenant) DESC, id
LIMIT 1;

-- name: DelegationListByRemoteTaskForUpdate :many
-- Every delegation, of any tenant, recording the org's remote task, locked
-- in id order so concurrent lockers cannot deadlock. Evidence names the
-- task, not the tenant; the caller tells them apart by the compensation
-- idempotency key the evidence carries.
SELECT * FROM delegations WHERE org_id = $1 AND remote_task_id = $2 ORDER BY id FOR UPDATE;

-- name: DelegationInsert :execrows
-- Inserts nothing when a delegation with the same tenant and business
-- operation id, or the same tenant, org and remote task id, exists: any unique
-- index is an arbiter, so a concurrent identical request is never an error.
INSERT INTO delegations (
    id, tenant, business_operation_id, request_hash, org_id, task_class, budget_id,
    amount_minor, currency, remote_task_id, remote_context_id, protocol_version,
    task_status, obligation_state, version, created_at, updated_at
) VALUES (
    @id, @tenant, @business_operation_id, @request_hash, @org_id, @task_class, @budget_id,
    @amount_minor, @currency, @remote_task_id, @remote_context_id, @protocol_version,
    @task_status, @obligation_state, @version, @created_at, @updated_at
)
ON CONFLICT DO NOTHING;

-- name: DelegationUpdate :execrows
UPDATE delegations SET
    amount_minor            = @amount_minor,
    settled_amount_minor    = sqlc.narg(settled_amount_minor),
    reversed_amount_minor   = sqlc.narg(reversed_amount_minor),
    remote_task_id          = @remote_task_id,
    remote_context_id       = @remote_context_id,
    protocol_version        = @protocol_version,
    task_status             = @task_status,
    task_status_at          = @task_status_at,
    task_status_undated     = @task_status_undated,
    task_status_message     = @task_status_message,
    obligation_state        = @obligation_state,
    obligation_reason       = @obligation_reason,
    cancel_requested_at     = @cancel_requested_at,
    compensation_key        = @compensation_key,
    compensation_deadline   = @compensation_deadline,
    compensation_attempts   = @compensation_attempts,
    compensation_last_error = @compensation_last_error,
    compensation_receipt    = @compensation_receipt,
    pending_write_off_id    = @pending_write_off_id,
    -- An observation of the remote task that changes the row marks it
    -- here (NULL: none), so it needs no DelegationMarkObserved after.
    last_observed_at        = greatest(last_observed_at, sqlc.narg(observed_at)::timestamptz),
    version                 = version + 1,
    updated_at              = @updated_at
WHERE id = @id AND version = @previous_version;

-- name: DelegationUpdateBatch :many
-- The updates of delegations a transaction buffered (sql/pgstore/
-- updatebatch.go), in one statement: one row of the arrays each, each the
-- DelegationUpdate of a different delegation whose remote task (id,
-- context, protocol version) it leaves as it was, so those columns are
-- not set (and the shared-remote-task trigger does not fire). An empty
-- text stands for NULL in the optional texts, @pending_write_off_ids and
-- @compensation_receipts, the zero time (0001-01-01 UTC) in the optional
-- times: DelegationUpdate's callers never store either. The amounts are
-- set where @settled_set and @reversed_set say. Returns the ids of the
-- rows whose version matched: a missing one is that update's refusal.
-- The arrays are read through a subquery the planner cannot flatten
-- (OFFSET 0), so that PostgreSQL keeps the generic plan rather than
-- planning again on every flush, as DelegationsAndStreamsLockForFlush
-- explains.
UPDATE delegations d SET
    amount_minor            = u.amount_minor,
    settled_amount_minor    = CASE WHEN u.settled_set THEN u.settled_amount_minor END,
    reversed_amount_minor   = CASE WHEN u.reversed_set THEN u.reversed_amount_minor END,
    task_status             = u.task_status,
    task_status_at          = nullif(u.task_status_at, '0001-01-01 00:00:00+00'::timestamptz),
    task_status_undated     = u.task_status_undated,
    task_status_message     = nullif(u.task_status_message, ''),
    obligation_state        = u.obligation_state,
    obligation_reason       = nullif(u.obligation_reason, ''),
    cancel_requested_at     = nullif(u.cancel_requested_at, '0001-01-01 00:00:00+00'::timestamptz),
    compensation_key        = nullif(u.compensation_key, ''),
    compensation_deadline   = nullif(u.compensation_deadline, '0001-01-01 00:00:00+00'::timestamptz),
    compensation_attempts   = u.compensation_attempts,
    compensation_last_error = nullif(u.compensation_last_error, ''),
    compensation_receipt    = nullif(u.compensation_receipt, '')::jsonb,
    pending_write_off_id    = nullif(u.pending_write_off_id, '')::uuid,
    last_observed_at        = greatest(d.last_observed_at, nullif(u.observed_at, '0001-01-01 00:00:00+00'::timestamptz)),
    version                 = d.version + 1,
    updated_at              = u.updated_at
FROM (
    SELECT unnest(a.ids) AS id,
           unnest(a.previous_versions) AS previous_version,
           unnest(a.amount_minors) AS amount_minor,
           unnest(a.settled_set) AS settled_set,
           unnest(a.settled_amount_minors) AS settled_amount_minor,
           unnest(a.reversed_set) AS reversed_set,
           unnest(a.reversed_amount_minors) AS reversed_amount_minor,
           unnest(a.task_statuses) AS task_status,
           unnest(a.task_status_ats) AS task_status_at,
           unnest(a.task_status_undated) AS task_status_undated,
           unnest(a.task_status_messages) AS task_status_message,
           unnest(a.obligation_states) AS obligation_state,
           unnest(a.obligation_reasons) AS obligation_reason,
           unnest(a.cancel_requested_ats) AS cancel_requested_at,
           unnest(a.compensation_keys) AS compensation_key,
           unnest(a.compensation_deadlines) AS compensation_deadline,
           unnest(a.compensation_attempts) AS compensation_attempts,
           unnest(a.compensation_last_errors) AS compensation_last_error,
           unnest(a.compensation_receipts) AS compensation_receipt,
           unnest(a.pending_write_off_ids) AS pending_write_off_id,
           unnest(a.observed_ats) AS observed_at,
           unnest(a.updated_ats) AS updated_at
    FROM (SELECT @ids::uuid[] AS ids,
                 @previous_versions::bigint[] AS previous_versions,
                 @amount_minors::bigint[] AS amount_minors,
                 @settled_set::boolean[] AS settled_set,
                 @settled_amount_minors::bigint[] AS settled_amount_minors,
                 @reversed_set::boolean[] AS reversed_set,
                 @reversed_amount_minors::bigint[] AS reversed_amount_minors,
                 @task_statuses::text[] AS task_statuses,
                 @task_status_ats::timestamptz[] AS task_status_ats,
                 @task_status_undated::boolean[] AS task_status_undated,
                 @task_status_messages::text[] AS task_status_messages,
                 @obligation_states::text[] AS obligation_states,
                 @obligation_reasons::text[] AS obligation_reasons,
                 @cancel_requested_ats::timestamptz[] AS cancel_requested_ats,
                 @compensation_keys::text[] AS compensation_keys,
                 @compensation_deadlines::timestamptz[] AS compensation_deadlines,
                 @compensation_attempts::integer[] AS compensation_attempts,
                 @compensation_last_errors::text[] AS compensation_last_errors,
                 @compensation_receipts::text[] AS compensation_receipts,
                 @pending_write_off_ids::text[] AS pending_write_off_ids,
                 @observed_ats::timestamptz[] AS observed_ats,
                 @updated_ats::timestamptz[] AS updated_ats
          OFFSET 0) a
) u
WHERE d.id = u.id AND d.version = u.previous_version
RETURNING d.id;

-- name: DelegationMarkObserved :exec
-- An observation of the remote task: last_observed_at only moves forward,
-- and the row's version and updated_at stay (nothing it shows changed).
UPDATE delegations SET last_observed_at = greatest(last_observed_at, @observed_at::timestamptz)
WHERE id = @id;

-- name: DelegationList :many
SELECT * FROM delegations
WHERE (sqlc.narg(tenant)::text IS NULL OR tenant = sqlc.narg(tenant))
  AND (sqlc.narg(obligation_state)::text IS NULL OR obligation_state = sqlc.narg(obligation_state))
  AND (sqlc.narg(task_status)::text IS NULL OR task_status = sqlc.narg(task_status))
  AND (sqlc.narg(org_id)::text IS NULL OR org_id = sqlc.narg(org_id))
  AND (sqlc.narg(status_after)::timestamptz IS NULL OR task_status_at > sqlc.narg(status_after))
  AND (sqlc.narg(after)::uuid IS NULL OR id < sqlc.narg(after))
ORDER BY id DESC
LIMIT @max_rows;

-- name: DelegationCount :one
-- How many delegations DelegationList's filters match, on every page.
SELECT count(*) FROM delegations
WHERE (sqlc.narg(tenant)::text IS NULL OR tenant = sqlc.narg(tenant))
  AND (sqlc.narg(obligation_state)::text IS NULL OR obligation_state = sqlc.narg(obligation_state))
  AND (sqlc.narg(task_status)::text IS NULL OR task_status = sqlc.narg(task_status))
  AND (sqlc.narg(org_id)::text IS NULL OR org_id = sqlc.narg(org_id))
  AND (sqlc.narg(status_after)::timestamptz IS NULL OR task_status_at > sqlc.narg(status_after));

-- name: DelegationListEscalatableByOrgForUpdate :many
-- Every obligation an identity revocation escalates, locked in id order.
SELECT * FROM delegations
WHERE org_id = $1
  AND obligation_state IN ('held', 'revocation_pending_compensation', 'compensation_unconfirmed')
ORDER BY id
FOR UPDATE;

-- name: DelegationClaimPastDeadline :many
-- The sweep's claim: rows another transaction holds (another replica's
-- sweep, an ack being applied) are skipped, never waited for or taken twice.
SELECT * FROM delegations
WHERE obligation_state = 'revocation_pending_compensation'
  AND compensation_deadline <= @now
ORDER BY compensation_deadline, id
LIMIT @max_rows
FOR UPDATE SKIP LOCKED;

-- name: DelegationSetDispatchUnknown :exec
-- Puts a delegation whose dispatch outcome nothing proves in the
-- dispatch_unknown condition (kept from the first time it was set). The
-- caller holds the row lock; the version is not bumped: the condition is
-- not part of either state machine.
UPDATE delegations SET
    dispatch_unknown_at     = coalesce(dispatch_unknown_at, @now::timestamptz),
    dispatch_unknown_reason = @reason::text
WHERE id = @id;

-- name: DelegationClearDispatchUnknown :execrows
-- Ends the dispatch_unknown condition: a task id is now recorded, or a
-- person decided. No row when the delegation was not in it.
UPDATE delegations SET dispatch_unknown_at = NULL, dispatch_unknown_reason = NULL
WHERE id = @id AND dispatch_unknown_at IS NOT NULL;

-- name: DelegationSetTaskNotFound :execrows
-- Puts a delegation whose remote task the agent no longer knows in the
-- task_not_found condition (kept from the first time it was set) with the
-- agent's answer. No row when the delegation was already in it with the
-- same answer: a repeat, which records nothing. The caller holds the row
-- lock; the version is not bumped: the condition is not part of either
-- state machine.
UPDATE delegations SET
    task_not_found_at     = coalesce(task_not_found_at, @now::timestamptz),
    task_not_found_answer = @answer::text
WHERE id = @id AND task_not_found_answer IS DISTINCT FROM @answer::text;

-- name: DelegationClearTaskNotFound :exec
-- Ends the task_not_found condition: the agent returned the task again.
UPDATE delegations SET task_not_found_at = NULL, task_not_found_answer = NULL
WHERE id = @id AND task_not_found_at IS NOT NULL;

-- name: DelegationsAndStreamsLockForFlush :many
-- Locks, in id order, the delegations a flush of coalesced writes touches,
-- then their event streams in stream order, as event_stream_head locks
-- one, and returns a row for each delegation locked: the last event of its
-- stream (stream_seq 0 when it has none), and the positions i (from 1) of
-- the remote tasks it records among those named (sql/pgstore/
-- prereader.go). The delegations are those of @ids and every delegation,
-- of any tenant, recording one of the org's remote tasks (@org_ids[i],
-- @task_ids[i]), as evidence naming the task locks them; which tasks each
-- records lets an operation naming a delegation and one naming its remote
-- task run one after the other (sql/pgstore/pipeline.go). All row locks
-- are taken before the first stream's: the sort of the streams reads the
-- whole of the locked CTE first.
--
-- NO KEY UPDATE is the lock the delegations' UPDATE takes; FOR UPDATE would
-- also wait for the key share locks the foreign keys of other transactions'
-- new events, evidence and outbox rows hold until they commit.
--
-- Each delegation is found by a lookup of its own through an index (a
-- lateral subquery the planner cannot flatten into a join): as a join, a
-- generic plan made while the table was small hashes a scan of the whole
-- table, and a connection keeps that plan while the table grows (an OR of
-- the two conditions is a scan of every delegation at any size;
-- TestWritePathPlansUseIndexes). The arrays are read through subqueries
-- the planner cannot flatten either (OFFSET 0), so that a plan made for
-- one flush's arrays is estimated no cheaper than the generic plan:
-- PostgreSQL then keeps the generic plan instead of planning the statement
-- again on every flush (TestWritePathKeepsGenericPlans).
WITH by_task AS MATERIALIZED (
    SELECT k.ord, t.id
    FROM (SELECT generate_subscripts(a.org_ids, 1) AS ord, unnest(a.org_ids) AS org_id, unnest(a.task_ids) AS task_id
          FROM (SELECT @org_ids::text[] AS org_ids, @task_ids::text[] AS task_ids OFFSET 0) a) k
    CROSS JOIN LATERAL (
        SELECT t.id FROM delegations t WHERE t.org_id = k.org_id AND t.remote_task_id = k.task_id OFFSET 0
    ) t
), wanted AS MATERIALIZED (
    SELECT unnest(a.ids) AS id FROM (SELECT @ids::uuid[] AS ids OFFSET 0) a
    UNION
    SELECT b.id FROM by_task b
    ORDER BY id
), locked AS MATERIALIZED (
    SELECT d.id FROM wanted w
    CROSS JOIN LATERAL (SELECT d.id FROM delegations d WHERE d.id = w.id FOR NO KEY UPDATE) d
)
SELECT s.id, coalesce(h.stream_seq, 0)::integer AS stream_seq, h.hash, s.recorded_tasks
FROM (
    SELECT l.id, 'delegation:' || l.id::text AS stream, r.ords::integer[] AS recorded_tasks
    FROM locked l
    LEFT JOIN (SELECT b.id, array_agg(b.ord ORDER BY b.ord) AS ords FROM by_task b GROUP BY b.id) r ON r.id = l.id
    ORDER BY 2
) s
LEFT JOIN LATERAL (
    SELECT e.stream_seq::integer AS stream_seq, e.hash::bytea AS hash FROM event_stream_head(s.stream) e
) h ON true;

-- name: DelegationsServedForFlush :many
-- Answers, for each delegation DelegationsAndStreamsLockForFlush locked
-- (the same arguments: the same delegations), the reads a flush's
-- operations would otherwise send one by one (sql/pgstore/served.go):
-- after a marker column naming each (served_<statement>), the columns of
-- DelegationGetByIDForUpdateWithDispatch, EvidenceFactsGet and GatePolicy,
-- the same expressions in the same order as the statement's own
-- (CheckServedReads, sql/pgstore/served_check_test.go): change them together. It is
-- a statement of its own, sent after the lock: a statement sees what was
-- committed when it began, and the lock may have waited for a commit
-- that changed these rows.
WITH wanted AS MATERIALIZED (
    SELECT unnest(a.ids) AS id FROM (SELECT @ids::uuid[] AS ids OFFSET 0) a
    UNION
    SELECT t.id
    FROM (SELECT unnest(a.org_ids) AS org_id, unnest(a.task_ids) AS task_id
          FROM (SELECT @org_ids::text[] AS org_ids, @task_ids::text[] AS task_ids OFFSET 0) a) k
    CROSS JOIN LATERAL (
        SELECT t.id FROM delegations t WHERE t.org_id = k.org_id AND t.remote_task_id = k.task_id OFFSET 0
    ) t
)
SELECT w.id,
       NULL::boolean AS served_delegation_get_by_id_for_update_with_dispatch,
       d.*,
       coalesce(a.dispatched, false)::boolean AS dispatched,
       (d.remote_task_id IS NOT NULL OR d.dispatch_unknown_at IS NOT NULL OR EXISTS (
           SELECT FROM a2a_outbox ob WHERE ob.delegation_id = d.id AND ob.kind = 'dispatch' AND ob.attempts > 0))::boolean AS sent,
       d.dispatch_unknown_at AS unknown_since,
       NULL::boolean AS served_evidence_facts_get,
       (e.delegation_id IS NOT NULL)::boolean AS has_evidence,
       coalesce(e.idempotency_key, '')::text AS idempotency_key,
       coalesce(e.kind, '')::text AS kind,
       coalesce(e.channel, '')::text AS channel,
       coalesce(e.payload_sha256, ''::bytea)::bytea AS payload_sha256,
       coalesce(e.status, '')::text AS status,
       e.receipt,
       e.data,
       coalesce(e.token, '')::text AS token,
       e.received_at AS evidence_received_at,
       e.decided_at AS evidence_decided_at,
       EXISTS (
           SELECT 1 FROM events ev
           WHERE ev.delegation_id = d.id AND ev.type = 'dispatch_resolved' AND ev.data->>'found_by' = 'oncall'
       )::boolean AS resolved_by_person,
       coalesce((
           SELECT json_agg(json_build_object(
               'task_id', t.task_id, 'purpose', t.purpose, 'context_id', t.context_id, 'found_by', t.found_by,
               'status', t.status, 'found_at', t.found_at, 'cancel_sent_at', t.cancel_sent_at,
               'named_round', coalesce(t.named_round, 0),
               'compensation_required_at', t.compensation_required_at, 'compensation_attempts', t.compensation_attempts,
               'compensation_resolved_at', t.compensation_resolved_at,
               'compensation_resolution', t.compensation_resolution) ORDER BY t.found_at, t.task_id)
           FROM delegation_remote_tasks t WHERE t.delegation_id = d.id
       ), '[]')::json AS remote_tasks,
       NULL::boolean AS served_gate_policy,
       o.*,
       c.name AS class_name, c.effect_capable, c.gate_on, c.compensation_timeout_ms,
       c.updated_at AS class_updated_at,
       coalesce(a.dispatched, false)::boolean AS dispatched,
       EXISTS (SELECT FROM task_class_policies p
               WHERE p.org_id = o.id AND p.tenant = d.tenant AND d.task_class = ANY (p.classes))::boolean AS policy_lists_class
FROM wanted w
CROSS JOIN LATERAL (SELECT d.* FROM delegations d WHERE d.id = w.id OFFSET 0) d
LEFT JOIN LATERAL (SELECT a.* FROM a2a_delegations a WHERE a.delegation_id = w.id OFFSET 0) a ON true
LEFT JOIN LATERAL (SELECT e.* FROM compensation_evidence e WHERE e.delegation_id = w.id OFFSET 0) e ON true
CROSS JOIN LATERAL (SELECT o.* FROM remote_orgs o WHERE o.id = d.org_id OFFSET 0) o
LEFT JOIN LATERAL (SELECT c.* FROM task_classes c WHERE c.name = d.task_class OFFSET 0) c ON true;

-- name: DelegationInsertBatch :many
-- Inserts a flush's new delegations, in one statement, each as
-- DelegationInsert would (an empty remote task, context or protocol version
-- stored as NULL), and returns the ids of those inserted: a flush buffers
-- only creations its pre-read proved no delegation records yet, under
-- their locks (sql/pgstore/insertbatch.go), so a missing id is a conflict
-- the proof missed, whose operation runs again alone.
INSERT INTO delegations (
    id, tenant, business_operation_id, request_hash, org_id, task_class, budget_id,
    amount_minor, currency, remote_task_id, remote_context_id, protocol_version,
    task_status, obligation_state, version, created_at, updated_at
)
SELECT u.id, u.tenant, u.business_operation_id, u.request_hash, u.org_id, u.task_class, u.budget_id,
       u.amount_minor, u.currency, NULLIF(u.remote_task_id, ''), NULLIF(u.remote_context_id, ''),
       NULLIF(u.protocol_version, ''), u.task_status, u.obligation_state, u.version, u.created_at, u.updated_at
FROM (
    SELECT generate_subscripts(@ids::uuid[], 1) AS ord,
           unnest(@ids::uuid[]) AS id, unnest(@tenants::text[]) AS tenant,
           unnest(@business_operation_ids::text[]) AS business_operation_id,
           unnest(@request_hashes::bytea[]) AS request_hash, unnest(@org_ids::text[]) AS org_id,
           unnest(@task_classes::text[]) AS task_class, unnest(@budget_ids::text[]) AS budget_id,
           unnest(@amount_minors::bigint[]) AS amount_minor, unnest(@currencies::text[]) AS currency,
           unnest(@remote_task_ids::text[]) AS remote_task_id, unnest(@remote_context_ids::text[]) AS remote_context_id,
           unnest(@protocol_versions::text[]) AS protocol_version, unnest(@task_statuses::text[]) AS task_status,
           unnest(@obligation_states::text[]) AS obligation_state, unnest(@versions::bigint[]) AS version,
           unnest(@created_ats::timestamptz[]) AS created_at, unnest(@updated_ats::timestamptz[]) AS updated_at
) u
ORDER BY u.ord
ON CONFLICT DO NOTHING
RETURNING id;

-- name: DelegationKeysTaken :many
-- Of the business operation ids (@tenants[i], @operation_ids[i]) and the
-- org's remote tasks (@org_ids[i], @task_ids[i]) a flush's creations
-- record, those a delegation records already (a task: of any tenant). Read
-- in the flush's pre-read, after their locks are taken, so what it does not
-- return no committed delegation records and no creation that takes those
-- locks can record before the flush commits (sql/pgstore/insertbatch.go).
-- The arrays are read through subqueries the planner cannot flatten
-- (OFFSET 0), so that PostgreSQL keeps the generic plan rather than
-- planning again on every flush, as DelegationsAndStreamsLockForFlush
-- explains.
SELECT 'operation'::text AS kind, d.tenant AS k1, d.business_operation_id AS k2
FROM delegations d
WHERE (d.tenant, d.business_operation_id) IN (
    SELECT unnest(a.tenants), unnest(a.operation_ids)
    FROM (SELECT @tenants::text[] AS tenants, @operation_ids::text[] AS operation_ids OFFSET 0) a)
UNION ALL
SELECT 'task'::text, d.org_id, d.remote_task_id
FROM delegations d
WHERE (d.org_id, d.remote_task_id) IN (
    SELECT unnest(a.org_ids), unnest(a.task_ids)
    FROM (SELECT @org_ids::text[] AS org_ids, @task_ids::text[] AS task_ids OFFSET 0) a);
