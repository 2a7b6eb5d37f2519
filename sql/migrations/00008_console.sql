-- +goose Up

-- The console: browser sessions, case handling on obligations, refused
-- write-offs, and the indexes the console's pages read through.

-- Console sessions. The browser holds a random session id in an HttpOnly
-- cookie; only its SHA-256 is stored, so a copy of this table opens no
-- session. A session signed in with an API token names the token (and is
-- refused once the token is revoked); one signed in through OpenID Connect
-- carries the principal the identity provider's claims mapped to. Any
-- replica serves any session; signing out deletes the row.
CREATE TABLE console_sessions (
    id_hash        bytea       PRIMARY KEY CHECK (length(id_hash) = 32),
    source         text        NOT NULL CHECK (source IN ('token', 'oidc')),
    token_id       uuid        REFERENCES api_tokens (id),
    principal_id   uuid        NOT NULL,
    principal_name text        NOT NULL CHECK (length(principal_name) BETWEEN 1 AND 200),
    role           text        NOT NULL CHECK (role IN ('orchestrator', 'finance', 'oncall')),
    tenant         text,
    created_at     timestamptz NOT NULL,
    expires_at     timestamptz NOT NULL,
    CHECK ((source = 'token') = (token_id IS NOT NULL)),
    CHECK (expires_at > created_at)
);
CREATE INDEX console_sessions_expiry ON console_sessions (expires_at);
CREATE INDEX console_sessions_principal ON console_sessions (principal_id, created_at);

-- Case handling on an obligation: who owns it, until when its needs-action
-- entry is snoozed, and how many notes it has. Every change is also an
-- event on the delegation's stream; this row is the current state the
-- queue filters on. Snoozing hides the entry from the needs-action queue
-- only: the hold never moves and reports still show it.
CREATE TABLE delegation_cases (
    delegation_id uuid        PRIMARY KEY REFERENCES delegations (id),
    owner         text        NOT NULL DEFAULT '' CHECK (length(owner) <= 200),
    snoozed_until timestamptz,
    notes         integer     NOT NULL DEFAULT 0 CHECK (notes >= 0),
    updated_at    timestamptz NOT NULL
);
CREATE INDEX delegation_cases_owner ON delegation_cases (owner) WHERE owner <> '';

-- A pending write-off can be rejected by a second on-call identity, with a
-- reason: the obligation stays open and the hold stays active.
ALTER TABLE write_offs DROP CONSTRAINT write_offs_status_check;
ALTER TABLE write_offs ADD CONSTRAINT write_offs_status_check
    CHECK (status IN ('pending_approval', 'executed', 'void', 'rejected'));
ALTER TABLE write_offs ADD COLUMN rejected_by text;
ALTER TABLE write_offs ADD COLUMN rejected_by_id uuid;
ALTER TABLE write_offs ADD COLUMN rejection_reason text;
ALTER TABLE write_offs ADD COLUMN rejected_at timestamptz;
ALTER TABLE write_offs ADD CONSTRAINT write_offs_rejecter
    CHECK (rejected_by_id IS NULL OR rejected_by_id <> requested_by_id);
CREATE INDEX write_offs_status_created ON write_offs (status, created_at DESC, id DESC);

-- The needs-action queue and the list of every obligation, oldest or
-- newest first, read a page straight off these indexes: the partial one
-- for the open states, the full one for every state.
CREATE INDEX delegations_open_created ON delegations (created_at, id)
    WHERE obligation_state IN ('revocation_pending_compensation', 'compensation_unconfirmed', 'escalated');
CREATE INDEX delegations_created ON delegations (created_at, id);

-- The counterparty scorecard reads how obligations left the gated states
-- (revocation_pending_compensation, compensation_unconfirmed, escalated)
-- over a period: only those transitions are indexed, by time.
CREATE INDEX events_gated_exits ON events (at)
    WHERE obligation_from IN ('revocation_pending_compensation', 'compensation_unconfirmed', 'escalated');
CREATE INDEX events_gated_entries ON events (delegation_id)
    WHERE obligation_to = 'revocation_pending_compensation';

-- +goose Down
DROP INDEX delegations_created;
DROP INDEX delegations_open_created;
DROP INDEX events_gated_entries;
DROP INDEX events_gated_exits;
DROP INDEX write_offs_status_created;
ALTER TABLE write_offs DROP CONSTRAINT write_offs_rejecter;
ALTER TABLE write_offs DROP COLUMN rejected_at;
ALTER TABLE write_offs DROP COLUMN rejection_reason;
ALTER TABLE write_offs DROP COLUMN rejected_by_id;
ALTER TABLE write_offs DROP COLUMN rejected_by;
UPDATE write_offs SET status = 'void' WHERE status = 'rejected';
ALTER TABLE write_offs DROP CONSTRAINT write_offs_status_check;
ALTER TABLE write_offs ADD CONSTRAINT write_offs_status_check
    CHECK (status IN ('pending_approval', 'executed', 'void'));
DROP TABLE delegation_cases;
DROP TABLE console_sessions;
