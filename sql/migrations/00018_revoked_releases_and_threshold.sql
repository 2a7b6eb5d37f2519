-- +goose Up

-- Obligations released on a declaration of an org whose identity was later
-- revoked: the declaration proves nothing once the identity is revoked
-- (ledger/DESIGN.md §3), so each is surfaced — in /v1/anomalies, the
-- reconciliation summary and reporting.revoked_identity_releases_v1 — until
-- finance acknowledges it. Rows are written by the revocation, in its
-- transaction; acknowledging fills the acknowledged_* columns once.
CREATE TABLE revoked_identity_releases (
    delegation_id       uuid        PRIMARY KEY REFERENCES delegations (id),
    org_id              text        NOT NULL REFERENCES remote_orgs (id),
    amount_minor        bigint      NOT NULL,
    currency            text        NOT NULL,
    released_at         timestamptz NOT NULL,
    identity_revoked_at timestamptz NOT NULL,
    acknowledged_at     timestamptz,
    acknowledged_by     uuid        REFERENCES principals (id),
    acknowledge_note    text,
    CHECK ((acknowledged_at IS NULL) = (acknowledged_by IS NULL))
);
CREATE INDEX revoked_identity_releases_open ON revoked_identity_releases (org_id, currency)
    WHERE acknowledged_at IS NULL;

CREATE VIEW reporting.revoked_identity_releases_v1 AS
SELECT
    r.delegation_id,
    d.tenant,
    r.org_id,
    r.amount_minor,
    r.currency,
    r.released_at,
    r.identity_revoked_at,
    o.identity_revoked_reason
FROM revoked_identity_releases r
JOIN delegations d ON d.id = r.delegation_id
JOIN remote_orgs o ON o.id = r.org_id
WHERE r.acknowledged_at IS NULL;

COMMENT ON VIEW reporting.revoked_identity_releases_v1 IS
    'Obligations released on a declaration of an org whose identity was revoked since, not yet acknowledged by finance. Version 1.';

-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'quittance_reporting') THEN
        EXECUTE 'GRANT SELECT ON reporting.revoked_identity_releases_v1 TO quittance_reporting';
    END IF;
END
$$;
-- +goose StatementEnd

-- The write-off approval threshold, once changed through an approved
-- pending change (kind write_off_threshold_update). Until the first change
-- there is no row and QUITTANCE_WRITE_OFF_APPROVAL_THRESHOLD_MINOR is the
-- threshold; from then on this row is.
CREATE TABLE write_off_threshold (
    singleton       boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    threshold_minor bigint      NOT NULL CHECK (threshold_minor >= 0),
    updated_at      timestamptz NOT NULL,
    updated_by      uuid        NOT NULL REFERENCES principals (id),
    pending_change  uuid        REFERENCES pending_changes (id)
);
ALTER TABLE pending_changes DROP CONSTRAINT pending_changes_kind_check;
ALTER TABLE pending_changes ADD CONSTRAINT pending_changes_kind_check CHECK (kind IN (
    'principal_create', 'role_grant', 'org_update', 'task_class_update', 'write_off_threshold_update'));

-- +goose Down
ALTER TABLE pending_changes DROP CONSTRAINT pending_changes_kind_check;
ALTER TABLE pending_changes ADD CONSTRAINT pending_changes_kind_check CHECK (kind IN (
    'principal_create', 'role_grant', 'org_update', 'task_class_update'));
DROP TABLE write_off_threshold;
DROP VIEW reporting.revoked_identity_releases_v1;
DROP TABLE revoked_identity_releases;
