//go:build linux

package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestPatroniFailover: under Patroni the second member is the first's
// synchronous standby, and after Failover (the leader's node killed)
// Patroni promotes it, and the multi-host URL reaches it with every
// committed row.
func TestPatroniFailover(t *testing.T) {
	t.Parallel()
	p := Patroni(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn := connect(t, ctx, p.URL())
	checkSchema(t, ctx, conn)
	if _, err := conn.Exec(ctx, `CREATE TABLE failover_probe (n int); INSERT INTO failover_probe VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	var sync string
	if err := conn.QueryRow(ctx, `SELECT sync_state FROM pg_stat_replication`).Scan(&sync); err != nil || sync != "sync" {
		t.Fatalf("replication state %q (%v), want sync", sync, err)
	}
	killed, err := p.Failover(ctx)
	if err != nil {
		t.Fatalf("failover: %v", err)
	}
	t.Logf("Patroni promoted the standby %s after the kill", time.Since(killed).Round(time.Millisecond))
	after, err := pgx.Connect(ctx, p.URL())
	if err != nil {
		t.Fatalf("connect after the failover: %v", err)
	}
	defer after.Close(context.Background())
	var n int
	if _, err := after.Exec(ctx, `INSERT INTO failover_probe VALUES (2)`); err != nil {
		t.Fatalf("write after the failover: %v", err)
	}
	if err := after.QueryRow(ctx, `SELECT count(*) FROM failover_probe`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("new primary has %d rows (%v), want 2", n, err)
	}
}
