-- +goose Up
-- task_status_undated: the remote task's current status came without a
-- date of its own (a2a-go's NewSubmittedTask sends none), so task_status_at
-- is when Quittance received it. Statuses are ordered by the agent's own
-- dates only: Quittance's receipt time of an undated status does not make
-- a status the agent dated a moment earlier stale (ledger/DESIGN.md §2.1).
ALTER TABLE delegations ADD COLUMN task_status_undated boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE delegations DROP COLUMN task_status_undated;
