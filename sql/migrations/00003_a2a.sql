-- +goose Up

-- The A2A outbox: every outbound call Quittance makes to a remote agent on a
-- delegation's behalf (send the delegated message, cancel the task, request
-- compensation, observe the task) is a row here, written in the same
-- transaction as the change that calls for it, so a crash can delay a call
-- but never lose it. Workers claim due rows with FOR UPDATE SKIP LOCKED and
-- a lease (locked_until, lease_token): several replicas never work on the
-- same row at once, and a crashed worker's row is claimed again once its
-- lease runs out. The remote call is made outside any transaction; its
-- result is recorded, and the row finished or rescheduled, in a new one.
CREATE TABLE a2a_outbox (
    id            bigserial   PRIMARY KEY,
    delegation_id uuid        NOT NULL REFERENCES delegations (id),
    kind          text        NOT NULL CHECK (kind IN ('dispatch', 'cancel', 'compensation_request', 'observe')),
    payload       jsonb       NOT NULL DEFAULT '{}',
    -- attempts counts claims: a claim whose worker crashed counts too.
    attempts      integer     NOT NULL DEFAULT 0,
    run_after     timestamptz NOT NULL,
    locked_until  timestamptz,
    lease_token   text,
    -- requeue is set when the job is asked for again while it runs (a push
    -- arriving during a GetTask); finishing it then schedules it once more.
    requeue       boolean     NOT NULL DEFAULT false,
    last_error    text,
    outcome       text,
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL,
    done_at       timestamptz
);
-- At most one open job of each kind per delegation: enqueuing again is a no-op.
CREATE UNIQUE INDEX a2a_outbox_one_open ON a2a_outbox (delegation_id, kind) WHERE done_at IS NULL;
CREATE INDEX a2a_outbox_due ON a2a_outbox (run_after, id) WHERE done_at IS NULL;

-- What Quittance knows about a delegation as an A2A client: whether it sent
-- the work itself, the hash of the push token it registered (never the
-- token), when the remote task was last observed, and the compensation
-- request task at the remote.
CREATE TABLE a2a_delegations (
    delegation_id        uuid        PRIMARY KEY REFERENCES delegations (id),
    dispatched           boolean     NOT NULL DEFAULT false,
    push_token_hash      bytea,
    observed_at          timestamptz,
    compensation_task_id text,
    compensation_round   integer     NOT NULL DEFAULT 1 CHECK (compensation_round > 0),
    created_at           timestamptz NOT NULL,
    updated_at           timestamptz NOT NULL
);
CREATE INDEX a2a_delegations_observed ON a2a_delegations (observed_at NULLS FIRST) WHERE dispatched;

-- Per-org backoff of the poller: an org whose agent fails to answer is left
-- alone until retry_at, doubling the wait on each consecutive failure.
CREATE TABLE a2a_org_backoff (
    org_id     text        PRIMARY KEY REFERENCES remote_orgs (id),
    failures   integer     NOT NULL CHECK (failures > 0),
    retry_at   timestamptz NOT NULL,
    last_error text        NOT NULL DEFAULT '',
    updated_at timestamptz NOT NULL
);

-- +goose Down
DROP TABLE a2a_org_backoff;
DROP TABLE a2a_delegations;
DROP TABLE a2a_outbox;
