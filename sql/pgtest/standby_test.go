package pgtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestReplicatedFailover: the standby streams synchronously (a commit on
// the primary is on the standby at once) and refuses writes (25006);
// after Failover the multi-host URL reaches the promoted standby, which
// has every committed row and takes writes.
func TestReplicatedFailover(t *testing.T) {
	t.Parallel()
	p := Replicated(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	standbyURL := withDatabase(p.Standby.URL("postgres"), p.Database)
	conn := connect(t, ctx, withDatabase(p.Primary.URL("postgres"), p.Database))
	checkSchema(t, ctx, conn)
	if _, err := conn.Exec(ctx, `CREATE TABLE failover_probe (n int); INSERT INTO failover_probe VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	var sync string
	if err := conn.QueryRow(ctx, `SELECT sync_state FROM pg_stat_replication`).Scan(&sync); err != nil || sync != "sync" {
		t.Fatalf("replication state %q (%v), want sync", sync, err)
	}
	standby := connect(t, ctx, standbyURL)
	var n int
	if err := standby.QueryRow(ctx, `SELECT count(*) FROM failover_probe`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("standby has %d rows (%v) of a committed insert, want 1", n, err)
	}
	var pgErr *pgconn.PgError
	if _, err := standby.Exec(ctx, `INSERT INTO failover_probe VALUES (2)`); !errors.As(err, &pgErr) || pgErr.Code != "25006" {
		t.Fatalf("write on the standby: %v, want SQLSTATE 25006", err)
	}

	if _, err := p.Failover(ctx); err != nil {
		t.Fatalf("failover: %v", err)
	}
	after, err := pgx.Connect(ctx, p.URL())
	if err != nil {
		t.Fatalf("connect through %s after the failover: %v", p.URL(), err)
	}
	defer after.Close(context.Background())
	if _, err := after.Exec(ctx, `INSERT INTO failover_probe VALUES (2)`); err != nil {
		t.Fatalf("write after the failover: %v", err)
	}
	if err := after.QueryRow(ctx, `SELECT count(*) FROM failover_probe`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("new primary has %d rows (%v), want 2", n, err)
	}
}
