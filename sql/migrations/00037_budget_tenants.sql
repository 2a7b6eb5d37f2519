-- +goose Up

-- Budgets belong to tenants: only orchestrators of a tenant the budget
-- names may hold on it (ledger/DESIGN.md §2.3). A budget names no tenant
-- until on-call names one, so it holds for nobody.
ALTER TABLE budgets ADD COLUMN tenants text[] NOT NULL DEFAULT '{}';

-- Each existing budget keeps serving the tenants that have held on it; one
-- nobody held on holds for nobody until on-call names its tenants.
UPDATE budgets b SET tenants = held.tenants
FROM (
    SELECT budget_id, array_agg(DISTINCT tenant COLLATE "C" ORDER BY tenant COLLATE "C") AS tenants
    FROM delegations
    GROUP BY budget_id
) held
WHERE held.budget_id = b.id;

-- Changing a budget's tenants is a privileged change.
ALTER TABLE pending_changes DROP CONSTRAINT pending_changes_kind_check;
ALTER TABLE pending_changes ADD CONSTRAINT pending_changes_kind_check CHECK (kind IN (
    'principal_create', 'role_grant', 'org_update', 'task_class_update', 'write_off_threshold_update',
    'credential_create', 'oidc_link', 'task_class_policy_update', 'budget_tenants_update'));

-- Finance sees whose each budget is; the column is added at the end, so
-- every query of version 1 reads the same.
CREATE OR REPLACE VIEW reporting.budgets_v1 AS
SELECT
    b.id                AS budget_id,
    b.currency,
    b.funded_minor,
    b.available_minor,
    b.held_minor,
    b.spent_minor,
    b.written_off_minor,
    (SELECT count(*) FROM delegations d
     WHERE d.budget_id = b.id
       AND d.obligation_state IN ('held', 'revocation_pending_compensation', 'compensation_unconfirmed', 'escalated')
    )                   AS active_holds,
    b.created_at,
    b.updated_at,
    b.tenants
FROM budgets b;

COMMENT ON VIEW reporting.budgets_v1 IS
    'Budgets: funded, available, held, spent and written-off amounts, the number of active holds, and the tenants whose orchestrators may hold on each. Version 1.';

-- +goose Down
-- A view loses a column only by being made again, with its grants.
DROP VIEW reporting.budgets_v1;
CREATE VIEW reporting.budgets_v1 AS
SELECT
    b.id                AS budget_id,
    b.currency,
    b.funded_minor,
    b.available_minor,
    b.held_minor,
    b.spent_minor,
    b.written_off_minor,
    (SELECT count(*) FROM delegations d
     WHERE d.budget_id = b.id
       AND d.obligation_state IN ('held', 'revocation_pending_compensation', 'compensation_unconfirmed', 'escalated')
    )                   AS active_holds,
    b.created_at,
    b.updated_at
FROM budgets b;
COMMENT ON VIEW reporting.budgets_v1 IS
    'Budgets: funded, available, held, spent and written-off amounts, and the number of active holds. Version 1.';
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'quittance_reporting') THEN
        EXECUTE 'GRANT SELECT ON reporting.budgets_v1 TO quittance_reporting';
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'quittance_service') THEN
        EXECUTE 'GRANT SELECT ON reporting.budgets_v1 TO quittance_service';
    END IF;
END
$$;
-- +goose StatementEnd

-- Pending budget_tenants_update changes stay as they were recorded; the
-- kind is refused for rows written from then on.
ALTER TABLE pending_changes DROP CONSTRAINT pending_changes_kind_check;
ALTER TABLE pending_changes ADD CONSTRAINT pending_changes_kind_check CHECK (kind IN (
    'principal_create', 'role_grant', 'org_update', 'task_class_update', 'write_off_threshold_update',
    'credential_create', 'oidc_link', 'task_class_policy_update')) NOT VALID;

ALTER TABLE budgets DROP COLUMN tenants;
