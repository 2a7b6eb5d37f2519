-- +goose Up

-- Reconciliation reads every active hold (the summary) or one org's
-- pending obligations in any order (the console's queue sorted by amount
-- or deadline). At ten million delegations those rows are scattered over a
-- heap far larger than memory, so reading them from the heap costs one
-- random page read per row. This partial index carries every column those
-- reads filter, group or sort on, so they are index-only scans over the
-- active holds alone; the console's queue then reads the heap for one
-- page of rows only. Active holds are a small share of all delegations, so
-- the index stays small, and rows enter it only while their hold is active.
CREATE INDEX delegations_active_cover ON delegations (org_id, obligation_state)
    INCLUDE (id, currency, tenant, amount_minor, created_at, compensation_deadline)
    WHERE obligation_state IN ('held', 'revocation_pending_compensation', 'compensation_unconfirmed', 'escalated');

-- +goose Down
DROP INDEX delegations_active_cover;
