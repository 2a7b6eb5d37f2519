-- name: BudgetListWithTotals :many
-- For CheckInvariants: every budget with the sums its columns must equal,
-- the delegations' amounts by hold state and the journal folded per column.
SELECT b.id, b.funded_minor, b.available_minor, b.held_minor, b.spent_minor, b.written_off_minor,
       coalesce((SELECT sum(d.amount_minor) FROM delegations d
                 WHERE d.budget_id = b.id AND d.obligation_state = ANY(@active_states::text[])), 0)::bigint AS active_sum,
       coalesce((SELECT sum(CASE d.obligation_state WHEN 'settled' THEN d.settled_amount_minor
                                                    ELSE d.amount_minor - d.reversed_amount_minor END)
                 FROM delegations d
                 WHERE d.budget_id = b.id AND d.obligation_state IN ('settled', 'compensated')), 0)::bigint AS settled_sum,
       coalesce((SELECT sum(d.amount_minor) FROM delegations d
                 WHERE d.budget_id = b.id AND d.obligation_state = 'written_off'), 0)::bigint AS written_off_sum,
       coalesce((SELECT sum(CASE j.kind WHEN 'fund' THEN j.amount_minor ELSE 0 END)
                 FROM budget_entries j WHERE j.budget_id = b.id), 0)::bigint AS journal_funded,
       coalesce((SELECT sum(CASE j.kind WHEN 'hold' THEN j.amount_minor WHEN 'fund' THEN 0 ELSE -j.amount_minor END)
                 FROM budget_entries j WHERE j.budget_id = b.id), 0)::bigint AS journal_held,
       coalesce((SELECT sum(CASE j.kind WHEN 'spend' THEN j.amount_minor ELSE 0 END)
                 FROM budget_entries j WHERE j.budget_id = b.id), 0)::bigint AS journal_spent,
       coalesce((SELECT sum(CASE j.kind WHEN 'write_off' THEN j.amount_minor ELSE 0 END)
                 FROM budget_entries j WHERE j.budget_id = b.id), 0)::bigint AS journal_written_off
FROM budgets b
ORDER BY b.id;

-- name: DelegationListWithEntries :many
-- For CheckInvariants: every delegation with its recorded amounts and its
-- journal entries, oldest first.
SELECT d.id, d.obligation_state, d.amount_minor, d.settled_amount_minor, d.reversed_amount_minor,
       coalesce(array_agg(j.kind ORDER BY j.id) FILTER (WHERE j.id IS NOT NULL), '{}')::text[] AS entry_kinds,
       coalesce(array_agg(j.amount_minor ORDER BY j.id) FILTER (WHERE j.id IS NOT NULL), '{}')::bigint[] AS entry_amounts
FROM delegations d
LEFT JOIN budget_entries j ON j.delegation_id = d.id
GROUP BY d.id
ORDER BY d.id;

-- name: EventListAll :many
-- For CheckInvariants: every event, grouped by stream, in stream order,
-- and whether its jsonb data still equals the data it was hashed over.
SELECT sqlc.embed(events), (hashed_data IS NULL OR hashed_data::jsonb = data)::boolean AS data_matches_hashed
FROM events ORDER BY stream, stream_seq;

-- name: DelegationPendingWriteOffMismatches :many
-- For CheckInvariants: delegations whose pending_write_off_id does not name
-- their write-off awaiting approval (or names one when there is none).
SELECT d.id, d.pending_write_off_id, w.id AS pending_id
FROM delegations d
LEFT JOIN write_offs w ON w.delegation_id = d.id AND w.status = 'pending_approval'
WHERE d.pending_write_off_id IS DISTINCT FROM w.id
ORDER BY d.id;

-- name: DelegationWriteOffMismatches :many
-- For CheckInvariants: delegations written off without exactly one executed
-- write-off of their amount, and executed write-offs of delegations that
-- are not written off.
SELECT d.id, d.obligation_state, d.amount_minor,
       count(w.id)::integer AS executed, coalesce(sum(w.amount_minor), 0)::bigint AS executed_minor
FROM delegations d
LEFT JOIN write_offs w ON w.delegation_id = d.id AND w.status = 'executed'
GROUP BY d.id
HAVING (d.obligation_state = 'written_off' AND (count(w.id) <> 1 OR coalesce(sum(w.amount_minor), 0) <> d.amount_minor))
    OR (d.obligation_state <> 'written_off' AND count(w.id) > 0)
ORDER BY d.id;

-- name: DelegationEvidenceList :many
-- For CheckInvariants: every delegation with what may be the evidence of
-- its hold leaving active: its compensation evidence row (kind and status
-- empty when it has none) and its executed write-offs.
SELECT d.id, d.obligation_state, d.amount_minor, d.settled_amount_minor, d.reversed_amount_minor,
       coalesce(e.kind, '')::text AS evidence_kind, coalesce(e.status, '')::text AS evidence_status,
       e.decided_at AS evidence_decided_at, coalesce(e.data, '{}'::json) AS evidence_data,
       coalesce((SELECT array_agg(w.id::text ORDER BY w.id) FROM write_offs w
                 WHERE w.delegation_id = d.id AND w.status = 'executed'), '{}')::text[] AS executed_write_offs
FROM delegations d
LEFT JOIN compensation_evidence e ON e.delegation_id = d.id
ORDER BY d.id;

-- name: EventListTransitions :many
-- For CheckHoldEvidence: every event that carries an obligation transition,
-- grouped by stream, in stream order.
SELECT * FROM events WHERE obligation_to IS NOT NULL ORDER BY stream, stream_seq;
