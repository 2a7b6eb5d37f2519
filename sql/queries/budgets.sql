-- name: BudgetGetByID :one
SELECT * FROM budgets WHERE id = $1;

-- name: BudgetGetByIDForUpdate :one
SELECT * FROM budgets WHERE id = $1 FOR UPDATE;

-- name: BudgetInsert :exec
INSERT INTO budgets (id, currency, funded_minor, available_minor, created_at, updated_at)
VALUES (@id, @currency, 0, 0, @created_at, @created_at);

-- Each movement is one conditional UPDATE: a hold larger than the available
-- amount matches no row, so a budget can never be overdrawn, whatever runs
-- concurrently. The CHECK constraints guard the other columns.

-- name: BudgetFund :one
UPDATE budgets SET funded_minor = funded_minor + @amount, available_minor = available_minor + @amount, updated_at = @at
WHERE id = @id AND available_minor + @amount >= 0
RETURNING *;

-- name: BudgetHold :one
UPDATE budgets SET available_minor = available_minor - @amount, held_minor = held_minor + @amount, updated_at = @at
WHERE id = @id AND available_minor >= @amount
RETURNING *;

-- name: BudgetSpend :one
UPDATE budgets SET held_minor = held_minor - @amount, spent_minor = spent_minor + @amount, updated_at = @at
WHERE id = @id AND held_minor >= @amount
RETURNING *;

-- name: BudgetReturn :one
UPDATE budgets SET held_minor = held_minor - @amount, available_minor = available_minor + @amount, updated_at = @at
WHERE id = @id AND held_minor >= @amount
RETURNING *;

-- name: BudgetWriteOff :one
UPDATE budgets SET held_minor = held_minor - @amount, written_off_minor = written_off_minor + @amount, updated_at = @at
WHERE id = @id AND held_minor >= @amount
RETURNING *;

-- name: BudgetEntryInsert :exec
INSERT INTO budget_entries (budget_id, delegation_id, kind, amount_minor, at)
VALUES (@budget_id, @delegation_id, @kind, @amount_minor, @at);
