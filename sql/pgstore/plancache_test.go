package pgstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/pgstore"
)

// TestWritePathKeepsGenericPlans: every statement the write path runs
// again and again is planned a few times on a connection and then runs
// its generic plan, rather than being planned anew on every flush.
// PostgreSQL plans a prepared statement for its arguments five times,
// then keeps the generic plan unless that is estimated dearer than those
// plans; a statement whose arrays' lengths the planner reads from the
// arguments stays dearer, and was planned on every flush (half a
// millisecond of PostgreSQL's CPU each time, measured on the pre-read).
func TestWritePathKeepsGenericPlans(t *testing.T) {
	t.Parallel()
	b, _ := setupCoalesced(t, pgstore.Coalescing{})
	fixtures(t, b, 1_000_000)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Enough lifecycles, in threes at once, that each connection of the
	// pool runs each statement well past five times, with arrays of one
	// element and of more.
	for i := range 30 {
		errs := make(chan error, 3)
		for j := range 3 {
			go func() { errs <- lifecycle(ctx, b, fmt.Sprintf("plan-%d-%d", i, j)) }()
		}
		for range 3 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
	conns := b.pool.AcquireAllIdle(ctx)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	if len(conns) == 0 {
		t.Fatal("no idle connection to read the prepared statements of")
	}
	checked := 0
	for _, c := range conns {
		rows, err := c.Query(ctx, `SELECT statement, custom_plans, generic_plans FROM pg_prepared_statements WHERE NOT from_sql`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var (
				statement       string
				custom, generic int64
			)
			if err := rows.Scan(&statement, &custom, &generic); err != nil {
				t.Fatal(err)
			}
			if custom+generic < 10 {
				continue
			}
			checked++
			if custom > 5 {
				t.Errorf("%s: planned for its arguments %d times, its generic plan run %d times", statementLabel(statement), custom, generic)
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	if checked < 5 {
		t.Errorf("only %d statements ran ten times or more on one connection: the run checked too little", checked)
	}
}

// lifecycle creates a delegation and reports its remote task canceled.
func lifecycle(ctx context.Context, b bundle, op string) error {
	d, _, err := b.svc.CreateDelegation(ctx, orch, creation(op, "globex", 10))
	if err != nil {
		return err
	}
	_, err = b.comp().ReportTaskStatus(ctx, orch, d.ID, compObservation(ledger.StatusCanceled, epoch.Add(time.Second)))
	return err
}

// statementLabel is a statement's sqlc name, or its first line.
func statementLabel(sql string) string {
	first, _, _ := strings.Cut(strings.TrimSpace(sql), "\n")
	return first
}
