-- +goose Up

-- task_not_found: the agent answered GetTask (or CancelTask) for the task
-- a delegation tracks with TaskNotFoundError: it may have purged it. That
-- says nothing of the task's end or of its effects, so the hold stays; the
-- condition is listed (GET /v1/obligations?condition=task_not_found),
-- counted and alerted, and ends when the agent returns the task again.
-- task_not_found_answer is the agent's last such answer: a poll answered
-- the same way again records no event, only a different answer does.
ALTER TABLE delegations
    ADD COLUMN task_not_found_at     timestamptz,
    ADD COLUMN task_not_found_answer text;
CREATE INDEX delegations_task_not_found ON delegations (created_at, id)
    WHERE task_not_found_at IS NOT NULL;

-- +goose Down
DROP INDEX delegations_task_not_found;
ALTER TABLE delegations
    DROP COLUMN task_not_found_answer,
    DROP COLUMN task_not_found_at;
