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
-- while they wait for this one's. The array is read through a subquery
-- the planner cannot flatten (OFFSET 0), so that PostgreSQL keeps the
-- generic plan rather than planning again on every flush, as
-- DelegationsAndStreamsLockForFlush explains.
SELECT * FROM budgets
WHERE id IN (SELECT unnest(a.ids) FROM (SELECT @ids::text[] AS ids OFFSET 0) a)
ORDER BY id FOR NO KEY UPDATE;

-- name: BudgetInsert :exec
INSERT INTO budgets (id, currency, funded_minor, available_minor, created_at, updated_at)
VALUES (@id, @currency, 0, 0, @created_at, @created_at);

-- name: BudgetMoveBatch :one
-- Moves amounts between budgets' columns and journals the movements, in
-- one statement: one movement per row of the arrays, in the order they
-- were made (a transaction's, sql/pgstore/movebatch.go). An empty text
-- stands for NULL in @delegation_ids. The signs say which columns each
-- kind of movement credits (+1) and debits (-1); this table is the rule
-- (sql/pgstore's moveSigns mirrors it for the flush's funds check). The
-- journal gets one row per movement, in their order; each budget moved is
-- updated once, by the sum of its movements' signed amounts, column by
-- column, and updated_at their latest at: one new version of a hot
-- budget's row for many movements. The CHECK constraints judge that net
-- change, so a statement of several movements on one budget is sent only
-- once they have been played one by one against the budget's locked
-- amounts (sql/pgstore/coalesce.go, checkFunds); a statement of one
-- movement is judged as that movement. A movement that is refused fails
-- the statement, never matches nothing, so it can be sent with the
-- transaction's COMMIT (sql/pgstore/txconn.go) and still roll everything
-- back: an amount taken from a column that does not hold it violates that
-- column's CHECK (budgets_available_minor_check, budgets_held_minor_check,
-- ...), and a budget that does not exist fails the journal's foreign key.
-- Says how many budgets it moved and how many movements it journaled.
WITH m AS (
    SELECT generate_subscripts(@budget_ids::text[], 1) AS ord,
           unnest(@budget_ids::text[]) AS budget_id, unnest(@kinds::text[]) AS kind,
           unnest(@amounts::bigint[]) AS amount, unnest(@delegation_ids::text[]) AS delegation_id,
           unnest(@ats::timestamptz[]) AS at
), net AS (
    SELECT m.budget_id,
           sum(k.funded * m.amount)::bigint AS funded, sum(k.available * m.amount)::bigint AS available,
           sum(k.held * m.amount)::bigint AS held, sum(k.spent * m.amount)::bigint AS spent,
           sum(k.written_off * m.amount)::bigint AS written_off, max(m.at) AS at
    FROM m
    JOIN (VALUES
        --            funded available held spent written_off
        ('fund',      1,     1,         0,   0,    0),
        ('hold',      0,     -1,        1,   0,    0),
        ('spend',     0,     0,         -1,  1,    0),
        ('return',    0,     1,         -1,  0,    0),
        ('write_off', 0,     0,         -1,  0,    1)
    ) AS k (kind, funded, available, held, spent, written_off) ON k.kind = m.kind
    GROUP BY m.budget_id
), moved AS (
    UPDATE budgets b SET
        funded_minor      = b.funded_minor      + n.funded,
        available_minor   = b.available_minor   + n.available,
        held_minor        = b.held_minor        + n.held,
        spent_minor       = b.spent_minor       + n.spent,
        written_off_minor = b.written_off_minor + n.written_off,
        updated_at        = n.at
    FROM net n
    WHERE b.id = n.budget_id
    RETURNING b.id
), journal AS (
    INSERT INTO budget_entries (budget_id, delegation_id, kind, amount_minor, at)
    SELECT m.budget_id, nullif(m.delegation_id, '')::uuid, m.kind, m.amount, m.at
    FROM m
    ORDER BY m.ord
    RETURNING 1
)
SELECT (SELECT count(*) FROM moved)::integer AS budgets,
       (SELECT count(*) FROM journal)::integer AS entries;

-- name: BudgetSetTenants :execrows
-- Replaces the tenants whose orchestrators may hold on the budget.
UPDATE budgets SET tenants = @tenants::text[], updated_at = @updated_at WHERE id = @id;

-- name: BudgetNamesTenant :one
-- Whether any budget names the tenant: while none does, its orchestrators
-- learn nothing of the orgs, the A2A gateway's cards included
-- (ledger/DESIGN.md §2.3).
SELECT EXISTS (SELECT 1 FROM budgets WHERE @tenant::text = ANY (tenants))::boolean AS named;
