-- +goose Up

-- Budgets hold money in integer minor units of one ISO 4217 currency. The
-- conservation invariant of DESIGN.md §2.2 is a CHECK constraint, so no code
-- path, however wrong, can commit a budget that does not add up.
CREATE TABLE budgets (
    id                text        PRIMARY KEY CHECK (id ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$'),
    currency          text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    funded_minor      bigint      NOT NULL CHECK (funded_minor >= 0),
    available_minor   bigint      NOT NULL CHECK (available_minor >= 0),
    held_minor        bigint      NOT NULL DEFAULT 0 CHECK (held_minor >= 0),
    spent_minor       bigint      NOT NULL DEFAULT 0 CHECK (spent_minor >= 0),
    written_off_minor bigint      NOT NULL DEFAULT 0 CHECK (written_off_minor >= 0),
    created_at        timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL,
    CONSTRAINT budgets_conservation
        CHECK (available_minor + held_minor + spent_minor + written_off_minor = funded_minor)
);

-- Remote organizations whose agents Quittance delegates to. jwks holds the
-- public keys the org signs acks and declarations with; identity_revoked_at
-- is set when on-call revokes the org's agent identity.
CREATE TABLE remote_orgs (
    id                      text        PRIMARY KEY CHECK (id ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$'),
    name                    text        NOT NULL,
    shared_coordinator      boolean     NOT NULL DEFAULT false,
    jwks                    jsonb,
    agent_card_url          text,
    allowed_hosts           text[]      NOT NULL DEFAULT '{}',
    require_signed_receipts boolean     NOT NULL DEFAULT false,
    identity_revoked_at     timestamptz,
    identity_revoked_reason text,
    created_at              timestamptz NOT NULL,
    updated_at              timestamptz NOT NULL
);

-- Task classes say whether a kind of delegated work can commit effects at
-- the remote, which terminal statuses gate the hold, and how long
-- compensation is sought before the obligation becomes unconfirmed.
CREATE TABLE task_classes (
    name                    text        PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_]{0,63}$'),
    effect_capable          boolean     NOT NULL,
    gate_on                 text[]      NOT NULL CHECK (gate_on <@ ARRAY['canceled', 'failed']),
    compensation_timeout_ms bigint      NOT NULL CHECK (compensation_timeout_ms > 0),
    updated_at              timestamptz NOT NULL
);

INSERT INTO task_classes (name, effect_capable, gate_on, compensation_timeout_ms, updated_at) VALUES
    ('procurement',  true,  ARRAY['canceled', 'failed'], 259200000, now()),
    ('payment',      true,  ARRAY['canceled', 'failed'], 259200000, now()),
    ('provisioning', true,  ARRAY['canceled', 'failed'], 259200000, now()),
    ('shipment',     true,  ARRAY['canceled', 'failed'], 259200000, now()),
    ('read_only',    false, ARRAY['canceled', 'failed'], 259200000, now());

-- One row per outbound delegation. task_status is the remote A2A task as last
-- observed; obligation_state is Quittance's own lifecycle. version increases
-- on every update (optimistic concurrency for readers that compare).
CREATE TABLE delegations (
    id                      uuid        PRIMARY KEY,
    tenant                  text        NOT NULL,
    business_operation_id   text        NOT NULL CHECK (length(business_operation_id) BETWEEN 1 AND 200),
    request_hash            bytea       NOT NULL,
    org_id                  text        NOT NULL REFERENCES remote_orgs (id),
    task_class              text        NOT NULL,
    budget_id               text        NOT NULL REFERENCES budgets (id),
    amount_minor            bigint      NOT NULL CHECK (amount_minor > 0),
    currency                text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    remote_task_id          text,
    remote_context_id       text,
    protocol_version        text,
    task_status             text        NOT NULL DEFAULT 'unknown' CHECK (task_status IN (
        'unknown', 'submitted', 'working', 'input_required', 'auth_required',
        'completed', 'failed', 'canceled', 'rejected')),
    task_status_at          timestamptz,
    task_status_message     text,
    obligation_state        text        NOT NULL DEFAULT 'held' CHECK (obligation_state IN (
        'held', 'revocation_pending_compensation', 'compensation_unconfirmed', 'escalated',
        'settled', 'released', 'compensated', 'written_off')),
    obligation_reason       text,
    cancel_requested_at     timestamptz,
    compensation_key        text,
    compensation_deadline   timestamptz,
    compensation_attempts   integer     NOT NULL DEFAULT 0,
    compensation_last_error text,
    compensation_receipt    jsonb,
    version                 bigint      NOT NULL DEFAULT 1,
    created_at              timestamptz NOT NULL,
    updated_at              timestamptz NOT NULL,
    CONSTRAINT delegations_business_operation UNIQUE (tenant, business_operation_id)
);

-- A remote org's task id names one delegation: acks and declarations find
-- their delegation by (iss, sub) = (org_id, remote_task_id).
CREATE UNIQUE INDEX delegations_remote_task ON delegations (org_id, remote_task_id)
    WHERE remote_task_id IS NOT NULL;
CREATE INDEX delegations_tenant_created ON delegations (tenant, created_at DESC, id DESC);
CREATE INDEX delegations_open ON delegations (obligation_state, created_at)
    WHERE obligation_state IN ('held', 'revocation_pending_compensation', 'compensation_unconfirmed', 'escalated');
CREATE INDEX delegations_deadline ON delegations (compensation_deadline)
    WHERE obligation_state = 'revocation_pending_compensation';

-- The budget journal: every movement of money between a budget's columns,
-- written in the same transaction as the state change that caused it.
CREATE TABLE budget_entries (
    id            bigserial   PRIMARY KEY,
    budget_id     text        NOT NULL REFERENCES budgets (id),
    delegation_id uuid        REFERENCES delegations (id),
    kind          text        NOT NULL CHECK (kind IN ('fund', 'hold', 'spend', 'return', 'write_off')),
    amount_minor  bigint      NOT NULL,
    at            timestamptz NOT NULL
);
CREATE INDEX budget_entries_budget ON budget_entries (budget_id, id);
CREATE INDEX budget_entries_delegation ON budget_entries (delegation_id) WHERE delegation_id IS NOT NULL;

-- The audit log. Append-only (the trigger below refuses UPDATE, DELETE and
-- TRUNCATE); each row's hash is sha256 over the previous row's hash in the
-- same stream and the row's own canonical content, so any edit made around
-- the trigger breaks the chain. A stream is one delegation ("delegation:<id>"),
-- one org ("org:<id>"), one budget ("budget:<id>") or the ledger itself.
CREATE TABLE events (
    seq             bigserial   PRIMARY KEY,
    stream          text        NOT NULL,
    stream_seq      integer     NOT NULL CHECK (stream_seq > 0),
    delegation_id   uuid        REFERENCES delegations (id),
    type            text        NOT NULL,
    at              timestamptz NOT NULL,
    actor           text        NOT NULL,
    obligation_from text,
    obligation_to   text,
    data            jsonb       NOT NULL,
    evidence        text,
    prev_hash       bytea       NOT NULL,
    hash            bytea       NOT NULL,
    CONSTRAINT events_stream_seq UNIQUE (stream, stream_seq)
);
CREATE INDEX events_delegation ON events (delegation_id, seq) WHERE delegation_id IS NOT NULL;
CREATE INDEX events_type ON events (type, seq);

-- +goose StatementBegin
CREATE FUNCTION events_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'events are append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER events_append_only
    BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION events_refuse_change();
CREATE TRIGGER events_no_truncate
    BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION events_refuse_change();

-- API bearer tokens. Only the SHA-256 of a token is stored.
CREATE TABLE api_tokens (
    id         uuid        PRIMARY KEY,
    name       text        NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    role       text        NOT NULL CHECK (role IN ('orchestrator', 'finance', 'oncall')),
    tenant     text,
    token_hash bytea       NOT NULL UNIQUE,
    created_at timestamptz NOT NULL,
    revoked_at timestamptz,
    CHECK ((role = 'orchestrator') = (tenant IS NOT NULL))
);

-- The jti of every accepted signed token, per org: a replay is refused in the
-- same transaction that would have applied it.
CREATE TABLE used_token_ids (
    org_id        text        NOT NULL REFERENCES remote_orgs (id),
    jti           text        NOT NULL,
    delegation_id uuid        NOT NULL REFERENCES delegations (id),
    token_sha256  bytea       NOT NULL,
    used_at       timestamptz NOT NULL,
    PRIMARY KEY (org_id, jti)
);

-- Write-offs: a named on-call human accepting the loss of a held amount.
-- Above the approval threshold a second, different on-call identity approves.
CREATE TABLE write_offs (
    id              uuid        PRIMARY KEY,
    delegation_id   uuid        NOT NULL REFERENCES delegations (id),
    amount_minor    bigint      NOT NULL CHECK (amount_minor > 0),
    currency        text        NOT NULL,
    reason          text        NOT NULL CHECK (length(btrim(reason)) > 0),
    reference       text        NOT NULL DEFAULT '',
    status          text        NOT NULL CHECK (status IN ('pending_approval', 'executed', 'void')),
    requested_by    text        NOT NULL,
    requested_by_id uuid        NOT NULL,
    approved_by     text,
    approved_by_id  uuid,
    created_at      timestamptz NOT NULL,
    executed_at     timestamptz,
    CHECK (approved_by_id IS NULL OR approved_by_id <> requested_by_id)
);
CREATE UNIQUE INDEX write_offs_one_pending ON write_offs (delegation_id) WHERE status = 'pending_approval';

-- +goose Down
DROP TABLE write_offs;
DROP TABLE used_token_ids;
DROP TABLE api_tokens;
DROP TABLE events;
DROP FUNCTION events_refuse_change();
DROP TABLE budget_entries;
DROP TABLE delegations;
DROP TABLE task_classes;
DROP TABLE remote_orgs;
DROP TABLE budgets;
