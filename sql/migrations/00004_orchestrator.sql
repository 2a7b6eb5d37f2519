-- +goose Up

-- What an orchestrator needs beyond the ledger core: continuing interrupted
-- remote tasks, links between delegations, the latest remote task snapshot,
-- a commit-ordered position for every event (the replayable event stream),
-- and signed webhooks with a delivery outbox.

-- The outbox gains the "message" job: send the queued follow-up messages of
-- a delegation (answers to input_required / auth_required tasks).
ALTER TABLE a2a_outbox DROP CONSTRAINT a2a_outbox_kind_check;
ALTER TABLE a2a_outbox ADD CONSTRAINT a2a_outbox_kind_check
    CHECK (kind IN ('dispatch', 'cancel', 'compensation_request', 'observe', 'message'));

-- Follow-up messages on a delegation's remote task, idempotent on the
-- orchestrator's message_id: a repeat finds this row and sends nothing.
CREATE TABLE delegation_messages (
    delegation_id  uuid        NOT NULL REFERENCES delegations (id),
    message_id     text        NOT NULL CHECK (length(message_id) BETWEEN 1 AND 200),
    a2a_message_id text        NOT NULL,
    request_hash   bytea       NOT NULL,
    payload        jsonb       NOT NULL,
    status         text        NOT NULL CHECK (status IN ('queued', 'sent', 'failed')),
    attempts       integer     NOT NULL DEFAULT 0,
    error          text,
    result_state   text,
    created_at     timestamptz NOT NULL,
    sent_at        timestamptz,
    updated_at     timestamptz NOT NULL,
    PRIMARY KEY (delegation_id, message_id)
);
CREATE INDEX delegation_messages_queued ON delegation_messages (delegation_id, created_at) WHERE status = 'queued';

-- Links between delegations: a refinement sent in the context of another
-- (context_from), and remote tasks referenced by a new one (reference).
CREATE TABLE delegation_links (
    delegation_id uuid        NOT NULL REFERENCES delegations (id),
    linked_id     uuid        NOT NULL REFERENCES delegations (id),
    kind          text        NOT NULL CHECK (kind IN ('context_from', 'reference')),
    created_at    timestamptz NOT NULL,
    PRIMARY KEY (delegation_id, kind, linked_id)
);
CREATE INDEX delegation_links_linked ON delegation_links (linked_id);

-- The latest remote task snapshot Quittance observed: status message and
-- artifacts (chunks applied in order), bounded in size.
CREATE TABLE task_snapshots (
    delegation_id uuid        PRIMARY KEY REFERENCES delegations (id),
    snapshot      jsonb       NOT NULL,
    updated_at    timestamptz NOT NULL
);

-- Commit-ordered event positions. events.seq is a bigserial taken at insert
-- time, so concurrent transactions can commit out of seq order: a reader
-- that resumes "after seq N" could miss a lower seq committed later. Each
-- event therefore also gets a position, assigned by a deferred constraint
-- trigger at commit time under one transaction-level advisory lock. The lock
-- is released only after the transaction is visible, so positions are
-- handed out in commit order and become visible in that order: a reader
-- that has seen position P will never later find a committed position below
-- P. Only the commit itself is serialized; the lock is taken after every
-- other lock of the transaction, so it cannot take part in a deadlock.
CREATE TABLE event_positions (
    pos           bigserial   PRIMARY KEY,
    seq           bigint      NOT NULL UNIQUE,
    delegation_id uuid,
    tenant        text
);
CREATE INDEX event_positions_delegation ON event_positions (delegation_id, pos) WHERE delegation_id IS NOT NULL;
CREATE INDEX event_positions_tenant ON event_positions (tenant, pos) WHERE tenant IS NOT NULL;

INSERT INTO event_positions (seq, delegation_id, tenant)
SELECT e.seq, e.delegation_id, d.tenant
FROM events e LEFT JOIN delegations d ON d.id = e.delegation_id
ORDER BY e.seq;

-- +goose StatementBegin
CREATE FUNCTION events_assign_position() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('quittance/event-positions', 0));
    INSERT INTO event_positions (seq, delegation_id, tenant)
    VALUES (NEW.seq, NEW.delegation_id,
            (SELECT d.tenant FROM delegations d WHERE d.id = NEW.delegation_id));
    PERFORM pg_notify('quittance_events', '');
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE CONSTRAINT TRIGGER events_position
    AFTER INSERT ON events
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION events_assign_position();

-- Webhook endpoints, per tenant. The secret signs deliveries (HMAC-SHA256,
-- Standard Webhooks); it is shown to the caller once, when created.
CREATE TABLE webhook_endpoints (
    tenant      text        NOT NULL,
    id          text        NOT NULL CHECK (id ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$'),
    url         text        NOT NULL,
    event_types text[]      NOT NULL DEFAULT '{}',
    secret      text        NOT NULL,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    PRIMARY KEY (tenant, id)
);

-- The webhook outbox: one row per (endpoint, event), written in the same
-- transaction as the event. Workers claim due rows with FOR UPDATE SKIP
-- LOCKED and a lease; after max attempts a row is dead-lettered until an
-- on-call redrive puts it back.
CREATE TABLE webhook_deliveries (
    id              bigserial   PRIMARY KEY,
    tenant          text        NOT NULL,
    endpoint_id     text        NOT NULL,
    event_seq       bigint      NOT NULL,
    status          text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'dead')),
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL,
    locked_until    timestamptz,
    lease_token     text,
    last_status     integer,
    last_error      text,
    created_at      timestamptz NOT NULL,
    delivered_at    timestamptz,
    updated_at      timestamptz NOT NULL,
    FOREIGN KEY (tenant, endpoint_id) REFERENCES webhook_endpoints (tenant, id),
    CONSTRAINT webhook_deliveries_once UNIQUE (tenant, endpoint_id, event_seq)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at, id) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (tenant, endpoint_id, id DESC);

-- +goose Down
DROP TABLE webhook_deliveries;
DROP TABLE webhook_endpoints;
DROP TRIGGER events_position ON events;
DROP FUNCTION events_assign_position();
DROP TABLE event_positions;
DROP TABLE task_snapshots;
DROP TABLE delegation_links;
DROP TABLE delegation_messages;
ALTER TABLE a2a_outbox DROP CONSTRAINT a2a_outbox_kind_check;
ALTER TABLE a2a_outbox ADD CONSTRAINT a2a_outbox_kind_check
    CHECK (kind IN ('dispatch', 'cancel', 'compensation_request', 'observe'));
