package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quittance/quittance/sql/pgtest"
)

// TestPoolsRunWithoutParallelQuery: both of the service's pools, as
// openDatabase connects them, run their statements without parallel
// workers (poolConfig), unless the URL sets the parameter itself.
func TestPoolsRunWithoutParallelQuery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.URL(t)
	workers := func(t *testing.T, pool *pgxpool.Pool) string {
		t.Helper()
		var v string
		if err := pool.QueryRow(ctx, "SHOW max_parallel_workers_per_gather").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	set := dbURL + "?max_parallel_workers_per_gather=3"
	if strings.Contains(dbURL, "?") {
		set = dbURL + "&max_parallel_workers_per_gather=3"
	}
	for _, c := range []struct {
		name, url, want string
	}{
		{"by default", dbURL, "0"},
		{"set in the URL", set, "3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := config{DatabaseURL: c.url, ReadDatabaseURL: c.url}
			pool, readPool, err := openDatabase(ctx, cfg, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			defer closeReadPool(readPool)
			if got := workers(t, pool); got != c.want {
				t.Errorf("DATABASE_URL's pool: max_parallel_workers_per_gather = %s, want %s", got, c.want)
			}
			if got := workers(t, readPool); got != c.want {
				t.Errorf("QUITTANCE_READ_DATABASE_URL's pool: max_parallel_workers_per_gather = %s, want %s", got, c.want)
			}
		})
	}
}
