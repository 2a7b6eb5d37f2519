-- +goose Up

-- The scrape-time collector counts the extra remote tasks whose
-- compensation is required and not resolved (the extra_task_compensation
-- anomaly, ledger/DESIGN.md §2.2) and reads the oldest requirement. Open
-- ones are few among all remote tasks, so this partial index holds them
-- alone: the count and the min are an index-only scan over the open ones,
-- not a read of every remote task ever found.
CREATE INDEX delegation_remote_tasks_compensation_open ON delegation_remote_tasks (compensation_required_at)
    WHERE compensation_required_at IS NOT NULL AND compensation_resolved_at IS NULL;

-- +goose Down
DROP INDEX delegation_remote_tasks_compensation_open;
