-- +goose Up

-- Compensation of the extra remote tasks of a completed delegation
-- (ledger/DESIGN.md §2.2, "Every remote task accounted for"). When the
-- delegation's tracked task completes, the obligation settles, but another
-- task the agent created for the delegation (a second task on a resend)
-- may have committed effects of its own: a duplicate purchase order. Each
-- such task is marked here as needing compensation, asked for it over A2A
-- with an idempotency key of its own, and surfaced as an
-- extra_task_compensation anomaly until a receipt proves it compensated
-- (or free of effects) or on-call writes it off. None of it moves money:
-- the settled obligation spent the hold once, for the tracked task.
ALTER TABLE delegation_remote_tasks
    ADD COLUMN compensation_required_at timestamptz,
    ADD COLUMN compensation_round       integer NOT NULL DEFAULT 1,
    ADD COLUMN compensation_attempts    integer NOT NULL DEFAULT 0,
    ADD COLUMN compensation_task_id     text,
    ADD COLUMN compensation_last_error  text,
    ADD COLUMN compensation_resolved_at timestamptz,
    ADD COLUMN compensation_resolution  text
        CHECK (compensation_resolution IN ('compensated', 'no_effects', 'written_off')),
    ADD CONSTRAINT delegation_remote_tasks_resolution_check
        CHECK ((compensation_resolved_at IS NULL) = (compensation_resolution IS NULL)
           AND (compensation_resolved_at IS NULL OR compensation_required_at IS NOT NULL));

-- +goose Down
ALTER TABLE delegation_remote_tasks
    DROP CONSTRAINT delegation_remote_tasks_resolution_check,
    DROP COLUMN compensation_resolution,
    DROP COLUMN compensation_resolved_at,
    DROP COLUMN compensation_last_error,
    DROP COLUMN compensation_task_id,
    DROP COLUMN compensation_attempts,
    DROP COLUMN compensation_round,
    DROP COLUMN compensation_required_at;
