-- +goose Up

-- A remote task id is unique per (org, tenant), not per org: one tenant
-- recording a task id can no longer make another tenant's delegation with
-- the same id impossible, nor learn that it exists. Every existing row was
-- unique per (org, remote task id), so it is unique per (org, remote task
-- id, tenant) too. Evidence for a task id held by more than one tenant is
-- matched by the compensation idempotency key the token carries
-- (compensation.Service.Submit).
DROP INDEX delegations_remote_task;
CREATE UNIQUE INDEX delegations_remote_task ON delegations (org_id, remote_task_id, tenant)
    WHERE remote_task_id IS NOT NULL;

-- Refused signed evidence (compensation acks and declarations posted to the
-- public endpoints) is counted here per (org, reason), never appended to a
-- delegation's chain: a stranger posting garbage must not grow anyone's
-- audit log. org_id is a registered org's id, or '' for a token that named
-- no registered org (or could not be read); reason is the server-side
-- refusal code, which the caller is never told. Rows are bounded by
-- (registered orgs + 1) x refusal codes.
CREATE TABLE token_refusals (
    org_id   text        NOT NULL,
    reason   text        NOT NULL CHECK (reason <> ''),
    refused  bigint      NOT NULL CHECK (refused > 0),
    first_at timestamptz NOT NULL,
    last_at  timestamptz NOT NULL,
    PRIMARY KEY (org_id, reason)
);

-- The last few refused tokens of each (org, reason), as a ring: slot is the
-- refusal's number modulo the ring size, so the table never holds more than
-- that many rows per token_refusals row. Only the token's sha256 is kept,
-- never the token.
CREATE TABLE token_refusal_samples (
    org_id         text        NOT NULL,
    reason         text        NOT NULL,
    slot           integer     NOT NULL CHECK (slot >= 0),
    kind           text        NOT NULL,
    token_sha256   bytea       NOT NULL,
    token_bytes    integer     NOT NULL,
    claimed_issuer text        NOT NULL,
    client_address text        NOT NULL,
    at             timestamptz NOT NULL,
    PRIMARY KEY (org_id, reason, slot),
    FOREIGN KEY (org_id, reason) REFERENCES token_refusals (org_id, reason)
);

-- +goose Down
DROP TABLE token_refusal_samples;
DROP TABLE token_refusals;
DROP INDEX delegations_remote_task;
CREATE UNIQUE INDEX delegations_remote_task ON delegations (org_id, remote_task_id)
    WHERE remote_task_id IS NOT NULL;
