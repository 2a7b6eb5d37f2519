package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/pgtest"
)

// TestPipelinedRefusedReadIsItsOperations: three operations naming no
// common row wait for statements sent in one round trip, and PostgreSQL
// refuses the middle one's. That operation is answered with what it
// returned, as it would have been alone (its own words around
// PostgreSQL's error), not with the error of the round trip its
// neighbours shared; its neighbours run again without it and are applied.
func TestPipelinedRefusedReadIsItsOperations(t *testing.T) {
	t.Parallel()
	s := New(pgtest.Pool(t), WithCoalescing(Coalescing{MaxBatch: 16, Flushers: 1}))
	ctx := context.Background()
	read := func(name, sql string) func(*tx) error {
		return func(t *tx) error {
			var n int
			if err := t.conn.QueryRow(ctx, sql, 0).Scan(&n); err != nil {
				return fmt.Errorf("operation %s: %w", name, err)
			}
			return insertBudget(name)(t)
		}
	}
	keys := make([]ledger.WriteKeys, 3)
	for i := range keys {
		keys[i] = ledger.WriteKeys{Operations: []ledger.OperationKey{{Tenant: "t", ID: fmt.Sprintf("op-%d", i)}}}
	}
	errs := flushTogetherKeyed(t, s, keys,
		read("a", `SELECT $1::int`),
		read("b", `SELECT 1 / $1::int`),
		read("c", `SELECT $1::int`),
	)
	var pgErr *pgconn.PgError
	if !errors.As(errs[1], &pgErr) || pgErr.Code != "22012" || !strings.HasPrefix(errs[1].Error(), "operation b: ") {
		t.Errorf("the refused operation was answered %v, want its own error around PostgreSQL's division by zero", errs[1])
	}
	for _, i := range []int{0, 2} {
		if errs[i] != nil {
			t.Errorf("neighbour %d: %v", i, errs[i])
		}
	}
	if n := budgetsExist(t, s, "a", "b", "c"); n != 2 {
		t.Errorf("%d budgets exist, want the neighbours' 2", n)
	}
}
