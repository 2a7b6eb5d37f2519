-- +goose Up

-- delegation_remote_tasks: every remote task an agent created for a
-- delegation beyond the one recorded on the delegation row (delegations.
-- remote_task_id) and the compensation task Quittance follows
-- (a2a_delegations.compensation_task_id): a second task created on a
-- resend with the same messageId, found by ListTasks on the delegation's
-- context, or by a push or stream event naming that context. Each is
-- canceled and named in the compensation request; the obligation does not
-- close while one is unaccounted for (not terminal, or not named in the
-- compensation request the evidence answers). purpose says which message
-- created it: the dispatch or a compensation request.
CREATE TABLE delegation_remote_tasks (
    delegation_id  uuid        NOT NULL REFERENCES delegations (id),
    task_id        text        NOT NULL,
    purpose        text        NOT NULL CHECK (purpose IN ('dispatch', 'compensation')),
    context_id     text        NOT NULL DEFAULT '',
    found_by       text        NOT NULL,
    status         text        NOT NULL DEFAULT 'unknown',
    found_at       timestamptz NOT NULL,
    cancel_sent_at timestamptz,
    named_round    integer,
    updated_at     timestamptz NOT NULL,
    PRIMARY KEY (delegation_id, task_id)
);

-- +goose Down
DROP TABLE delegation_remote_tasks;
