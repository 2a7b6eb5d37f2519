-- +goose Up

-- compensation_evidence: the one piece of compensation evidence (an ack or
-- a verified no-compensation declaration) accepted for a delegation, keyed
-- by the delegation's compensation idempotency key (ledger/DESIGN.md §3).
-- Evidence with the same key and the same payload is answered with the
-- original result; the same key with another payload is an
-- evidence_conflict. Evidence that arrives while the obligation is still
-- held is kept here as received and applied when the gating terminal
-- status is observed; if the task ends otherwise it becomes unused, an
-- anomaly. payload_sha256 is the sha256 of the canonical JSON of what the
-- evidence asserts (its kind and receipt id), never of the token bytes, so
-- a token re-signed with a new jti is the same payload. receipt and data
-- are json, not jsonb, so a receipt is kept byte for byte as the remote
-- sent it (jsonb would read 1e2 back as 100) and the event that applies it
-- later hashes exactly what was received.
CREATE TABLE compensation_evidence (
    delegation_id   uuid        PRIMARY KEY REFERENCES delegations (id),
    idempotency_key text        NOT NULL UNIQUE,
    kind            text        NOT NULL CHECK (kind IN ('compensation_ack', 'declaration_verified')),
    channel         text        NOT NULL CHECK (channel IN ('http', 'a2a_receipt', 'atomic_cancel')),
    payload_sha256  bytea       NOT NULL,
    status          text        NOT NULL CHECK (status IN ('received', 'applied', 'unused')),
    receipt         json        NOT NULL,
    data            json        NOT NULL,
    token           text        NOT NULL DEFAULT '',
    received_at     timestamptz NOT NULL,
    decided_at      timestamptz
);

-- Anomalies now also list evidence conflicts and early evidence that was
-- never used (same columns, so the view is replaced in place).
CREATE OR REPLACE VIEW reporting.anomalies_v1 AS
SELECT
    e.seq,
    CASE
        WHEN e.type = 'status_conflict' THEN 'status_conflict'
        WHEN e.type = 'token_refused' THEN 'refused_token'
        WHEN e.type = 'evidence_conflict' THEN 'evidence_conflict'
        WHEN e.type = 'early_evidence_unused' THEN 'unused_early_evidence'
        WHEN coalesce(e.data ->> 'contradicts_write_off', 'false') = 'true' THEN 'contradicted_write_off'
        ELSE 'late_evidence'
    END                                              AS kind,
    e.type                                           AS event_type,
    e.delegation_id,
    coalesce(d.org_id, e.data ->> 'org_id',
             CASE WHEN e.stream LIKE 'org:%' THEN substr(e.stream, 5) END) AS org_id,
    d.tenant,
    d.obligation_state,
    e.at,
    e.actor,
    e.data
FROM events e
LEFT JOIN delegations d ON d.id = e.delegation_id
WHERE e.type IN ('status_conflict', 'late_evidence', 'token_refused', 'evidence_conflict', 'early_evidence_unused');

-- +goose Down
CREATE OR REPLACE VIEW reporting.anomalies_v1 AS
SELECT
    e.seq,
    CASE
        WHEN e.type = 'status_conflict' THEN 'status_conflict'
        WHEN e.type = 'token_refused' THEN 'refused_token'
        WHEN coalesce(e.data ->> 'contradicts_write_off', 'false') = 'true' THEN 'contradicted_write_off'
        ELSE 'late_evidence'
    END                                              AS kind,
    e.type                                           AS event_type,
    e.delegation_id,
    coalesce(d.org_id, e.data ->> 'org_id',
             CASE WHEN e.stream LIKE 'org:%' THEN substr(e.stream, 5) END) AS org_id,
    d.tenant,
    d.obligation_state,
    e.at,
    e.actor,
    e.data
FROM events e
LEFT JOIN delegations d ON d.id = e.delegation_id
WHERE e.type IN ('status_conflict', 'late_evidence', 'token_refused');

DROP TABLE compensation_evidence;
