-- name: BudgetGetByID :one
SELECT * FROM budgets WHERE id = $1;

-- name: BudgetGetByIDForUpdate :one
SELECT * FROM budgets WHERE id = $1 FOR UPDATE;

-- name: BudgetsForUpdate :many
-- Locks budgets in id order, so two transactions that lock the same ones
-- never wait for each other in a cycle: the funds check of a flush of
-- coalesced writes (sql/pgstore/coalesce.go). NO KEY UPDATE is the lock
-- the movements' UPDATE takes: FOR UPDATE would also wait for the key
-- share locks that the foreign keys of other transactions' new
-- delegations and journal entries hold on the budget until they commit,
-- while they wait for this one's.
SELECT * FROM budgets WHERE id = ANY(@ids::text[]) ORDER BY id FOR NO KEY UPDATE;

-- name: BudgetInsert :exec
INSERT INTO budgets (id, currency, funded_minor, available_minor, created_at, updated_at)
VALUES (@id, @currency, 0, 0, @created_at, @created_at);

-- name: BudgetMove :one
-- Moves an amount between a budget's columns and journals the movement, in
-- one statement. The signs say which columns each kind of movement credits
-- (+1) and debits (-1). A movement that is refused fails the statement,
-- never matches nothing, so it can be sent with the transaction's COMMIT
-- (sql/pgstore/txconn.go) and still roll everything back: a hold larger
-- than the available amount violates budgets_available_minor_check, a
-- release larger than the held amount budgets_held_minor_check (the row is
-- locked by the UPDATE, so a budget can never be overdrawn whatever runs
-- concurrently), and a budget that does not exist fails the journal's
-- foreign key.
WITH moved AS (
    UPDATE budgets b SET
        funded_minor      = b.funded_minor      + k.funded      * @amount::bigint,
        available_minor   = b.available_minor   + k.available   * @amount::bigint,
        held_minor        = b.held_minor        + k.held        * @amount::bigint,
        spent_minor       = b.spent_minor       + k.spent       * @amount::bigint,
        written_off_minor = b.written_off_minor + k.written_off * @amount::bigint,
        updated_at        = @at
    FROM (VALUES
        --            funded available held spent written_off
        ('fund',      1,     1,         0,   0,    0),
        ('hold',      0,     -1,        1,   0,    0),
        ('spend',     0,     0,         -1,  1,    0),
        ('return',    0,     1,         -1,  0,    0),
        ('write_off', 0,     0,         -1,  0,    1)
    ) AS k (kind, funded, available, held, spent, written_off)
    WHERE b.id = @id AND k.kind = @kind::text
    RETURNING b.*
), journal AS (
    INSERT INTO budget_entries (budget_id, delegation_id, kind, amount_minor, at)
    VALUES (@id, @delegation_id, @kind::text, @amount::bigint, @at)
)
SELECT * FROM moved;

-- name: BudgetSetTenants :execrows
-- Replaces the tenants whose orchestrators may hold on the budget.
UPDATE budgets SET tenants = @tenants::text[], updated_at = @updated_at WHERE id = @id;

-- name: BudgetNamesTenant :one
-- Whether any budget names the tenant: while none does, its orchestrators
-- learn nothing of the orgs, the A2A gateway's cards included
-- (ledger/DESIGN.md §2.3).
SELECT EXISTS (SELECT 1 FROM budgets WHERE @tenant::text = ANY (tenants))::boolean AS named;
