package pgstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/quittance/quittance/sql/pgtest"
)

// TestReportingRole checks the migration-created role: it reads the
// reporting views and nothing else.
func TestReportingRole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // the test changes nothing
	if _, err := tx.Exec(ctx, "SET LOCAL ROLE quittance_reporting"); err != nil {
		t.Fatalf("set role: %v", err)
	}
	for _, view := range []string{
		"reporting.pending_obligations_v1", "reporting.obligation_summary_v1",
		"reporting.anomalies_v1", "reporting.budgets_v1",
	} {
		if _, err := tx.Exec(ctx, "SAVEPOINT s"); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SELECT * FROM "+view+" LIMIT 1"); err != nil {
			t.Errorf("quittance_reporting cannot read %s: %v", view, err)
		}
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT s"); err != nil {
			t.Fatal(err)
		}
	}
	for _, table := range []string{"delegations", "events", "budgets", "api_tokens", "used_token_ids", "write_offs"} {
		if _, err := tx.Exec(ctx, "SAVEPOINT s"); err != nil {
			t.Fatal(err)
		}
		_, err := tx.Exec(ctx, "SELECT * FROM "+table+" LIMIT 1")
		if err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("quittance_reporting reading %s: %v, want permission denied", table, err)
		}
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT s"); err != nil {
			t.Fatal(err)
		}
	}
	var canLogin bool
	if err := tx.QueryRow(ctx, "SELECT rolcanlogin FROM pg_roles WHERE rolname = 'quittance_reporting'").Scan(&canLogin); err != nil {
		t.Fatal(err)
	}
	if canLogin {
		t.Error("quittance_reporting must be NOLOGIN")
	}
}
