-- name: CompensationEvidenceGet :one
SELECT * FROM compensation_evidence WHERE delegation_id = $1;

-- name: CompensationEvidencePutBatch :exec
-- The evidence a transaction buffered (sql/pgstore/evidencebatch.go), in
-- one statement: one row of the arrays each, in their order, each of a
-- different delegation: a delegation's evidence is inserted, or, stored
-- already, its status and decision time are updated. The zero time
-- (0001-01-01 UTC) in @decided_ats stands for NULL.
INSERT INTO compensation_evidence (
    delegation_id, idempotency_key, kind, channel, payload_sha256, status, receipt, data, token, received_at, decided_at
)
SELECT r.delegation_id, r.idempotency_key, r.kind, r.channel, r.payload_sha256, r.status, r.receipt::json, r.data::json,
       r.token, r.received_at, nullif(r.decided_at, '0001-01-01 00:00:00+00'::timestamptz)
FROM (
    SELECT generate_subscripts(@delegation_ids::uuid[], 1) AS ord,
           unnest(@delegation_ids::uuid[]) AS delegation_id, unnest(@idempotency_keys::text[]) AS idempotency_key,
           unnest(@kinds::text[]) AS kind, unnest(@channels::text[]) AS channel,
           unnest(@payload_sha256s::bytea[]) AS payload_sha256, unnest(@statuses::text[]) AS status,
           unnest(@receipts::text[]) AS receipt, unnest(@datas::text[]) AS data, unnest(@tokens::text[]) AS token,
           unnest(@received_ats::timestamptz[]) AS received_at, unnest(@decided_ats::timestamptz[]) AS decided_at
) r
ORDER BY r.ord
ON CONFLICT (delegation_id) DO UPDATE SET status = EXCLUDED.status, decided_at = EXCLUDED.decided_at;

-- name: EvidenceFactsGet :one
-- What deciding evidence for a delegation reads besides the locked row, in
-- one round trip: its stored evidence (has_evidence false when none), its
-- extra remote tasks (oldest first), and whether a person named its
-- remote task (an on-call dispatch_resolved event).
-- A flush's pre-read serves it too (DelegationsServedForFlush's
-- served_evidence_facts_get columns): change both together.
SELECT
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
    ), '[]')::json AS remote_tasks
FROM delegations d
LEFT JOIN compensation_evidence e ON e.delegation_id = d.id
WHERE d.id = @delegation_id;
