-- +goose Up

-- Which task classes a tenant's orchestrators may use with an org, on the
-- delegations Quittance dispatches (ledger/DESIGN.md §2.4). A class the
-- policy does not list, and every class of a tenant with no policy at the
-- org, gates as an unknown class does: effect-capable, gated on canceled
-- and failed. Setting a policy is a two-person change outside dev
-- (task_class_policy_update). No row is made for existing delegations:
-- the orchestrators' own past choices are what the policy replaces.
CREATE TABLE task_class_policies (
    org_id     text        NOT NULL REFERENCES remote_orgs (id),
    tenant     text        NOT NULL CHECK (length(tenant) BETWEEN 1 AND 200),
    classes    text[]      NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (org_id, tenant)
);

ALTER TABLE pending_changes DROP CONSTRAINT pending_changes_kind_check;
ALTER TABLE pending_changes ADD CONSTRAINT pending_changes_kind_check CHECK (kind IN (
    'principal_create', 'role_grant', 'org_update', 'task_class_update', 'write_off_threshold_update',
    'credential_create', 'oidc_link', 'task_class_policy_update'));

-- +goose Down
ALTER TABLE pending_changes DROP CONSTRAINT pending_changes_kind_check;
ALTER TABLE pending_changes ADD CONSTRAINT pending_changes_kind_check CHECK (kind IN (
    'principal_create', 'role_grant', 'org_update', 'task_class_update', 'write_off_threshold_update',
    'credential_create', 'oidc_link')) NOT VALID;
DROP TABLE task_class_policies;
