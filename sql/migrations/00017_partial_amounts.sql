-- +goose Up

-- A hold is a cap, not a guess (ledger/DESIGN.md §2.3). amount_minor is the
-- hold as it stands (the orchestrator may raise or lower it while the
-- obligation is held); settled_amount_minor is what settling spent of it
-- (the rest returned), reversed_amount_minor what a compensation returned
-- of it (the rest spent as the cost of the cancellation). Each is set
-- exactly in its state, and never more than the hold. Rows that ended
-- before partial amounts existed moved their whole hold.
ALTER TABLE delegations
    ADD COLUMN settled_amount_minor  bigint,
    ADD COLUMN reversed_amount_minor bigint;
UPDATE delegations SET settled_amount_minor = amount_minor WHERE obligation_state = 'settled';
UPDATE delegations SET reversed_amount_minor = amount_minor WHERE obligation_state = 'compensated';
ALTER TABLE delegations
    ADD CONSTRAINT delegations_settled_amount CHECK (
        (obligation_state = 'settled') = (settled_amount_minor IS NOT NULL)
        AND settled_amount_minor BETWEEN 0 AND amount_minor),
    ADD CONSTRAINT delegations_reversed_amount CHECK (
        (obligation_state = 'compensated') = (reversed_amount_minor IS NOT NULL)
        AND reversed_amount_minor BETWEEN 0 AND amount_minor);

-- Where each delegation's hold went, from the budget journal: what was
-- held over its life (the first hold and every increase), spent, returned
-- (decreases, the unspent part of a settlement, the reversed part of a
-- compensation, a release) and written off, next to the amounts the
-- delegation records. For an ended delegation held_total_minor =
-- spent_minor + returned_minor + written_off_minor.
CREATE VIEW reporting.delegation_amounts_v1 AS
SELECT
    d.id                    AS delegation_id,
    d.tenant,
    d.org_id,
    d.budget_id,
    d.currency,
    d.obligation_state,
    d.amount_minor,
    d.settled_amount_minor,
    d.reversed_amount_minor,
    coalesce(j.held_total_minor, 0)::bigint   AS held_total_minor,
    coalesce(j.spent_minor, 0)::bigint        AS spent_minor,
    coalesce(j.returned_minor, 0)::bigint     AS returned_minor,
    coalesce(j.written_off_minor, 0)::bigint  AS written_off_minor,
    d.created_at,
    d.updated_at
FROM delegations d
LEFT JOIN LATERAL (
    SELECT sum(e.amount_minor) FILTER (WHERE e.kind = 'hold')      AS held_total_minor,
           sum(e.amount_minor) FILTER (WHERE e.kind = 'spend')     AS spent_minor,
           sum(e.amount_minor) FILTER (WHERE e.kind = 'return')    AS returned_minor,
           sum(e.amount_minor) FILTER (WHERE e.kind = 'write_off') AS written_off_minor
    FROM budget_entries e WHERE e.delegation_id = d.id
) j ON true;

COMMENT ON VIEW reporting.delegation_amounts_v1 IS
    'Each delegation''s hold and where it went: held, spent, returned, written off (from the budget journal), with the settled and reversed amounts. Version 1.';

-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'quittance_reporting') THEN
        EXECUTE 'GRANT SELECT ON reporting.delegation_amounts_v1 TO quittance_reporting';
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP VIEW reporting.delegation_amounts_v1;
ALTER TABLE delegations
    DROP CONSTRAINT delegations_reversed_amount,
    DROP CONSTRAINT delegations_settled_amount,
    DROP COLUMN reversed_amount_minor,
    DROP COLUMN settled_amount_minor;
