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

-- Changing a budget's tenants is a privileged change. Other migrations add
-- kinds of their own to the same CHECK, in whatever order they run: this
-- one adds its kind to the list in force rather than restating it.
-- +goose StatementBegin
DO $$
DECLARE
    def text;
BEGIN
    SELECT pg_get_constraintdef(oid) INTO def FROM pg_constraint
    WHERE conrelid = 'pending_changes'::regclass AND conname = 'pending_changes_kind_check';
    IF def IS NULL OR position('ARRAY[' IN def) = 0 THEN
        RAISE EXCEPTION 'pending_changes_kind_check is not a list of kinds: %', def;
    END IF;
    IF position('''budget_tenants_update''' IN def) = 0 THEN
        ALTER TABLE pending_changes DROP CONSTRAINT pending_changes_kind_check;
        EXECUTE 'ALTER TABLE pending_changes ADD CONSTRAINT pending_changes_kind_check '
            || replace(def, 'ARRAY[', 'ARRAY[''budget_tenants_update''::text, ');
    END IF;
END
$$;
-- +goose StatementEnd

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
-- +goose StatementBegin
DO $$
DECLARE
    def text;
BEGIN
    SELECT pg_get_constraintdef(oid) INTO def FROM pg_constraint
    WHERE conrelid = 'pending_changes'::regclass AND conname = 'pending_changes_kind_check';
    ALTER TABLE pending_changes DROP CONSTRAINT pending_changes_kind_check;
    EXECUTE 'ALTER TABLE pending_changes ADD CONSTRAINT pending_changes_kind_check '
        || replace(replace(def, '''budget_tenants_update''::text, ', ''), ' NOT VALID', '') || ' NOT VALID';
END
$$;
-- +goose StatementEnd

ALTER TABLE budgets DROP COLUMN tenants;
