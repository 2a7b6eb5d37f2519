package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quittance/quittance/sql/pgtypes"
)

// readConnectTimeout bounds a connection to the read database when its URL
// sets no connect_timeout: a standby out of reach then costs a read this
// long before it falls back to the primary, not the client's whole wait.
const readConnectTimeout = 2 * time.Second

// readPoolConfig parses QUITTANCE_READ_DATABASE_URL; nil when it is unset.
func (c config) readPoolConfig() (*pgxpool.Config, error) {
	if c.ReadDatabaseURL == "" {
		return nil, nil
	}
	pc, err := poolConfig(c.ReadDatabaseURL)
	if err != nil {
		// pgx's message may quote the URL, password included.
		return nil, errors.New("QUITTANCE_READ_DATABASE_URL is not a PostgreSQL connection URL")
	}
	if pc.ConnConfig.ConnectTimeout == 0 {
		pc.ConnConfig.ConnectTimeout = readConnectTimeout
	}
	return pc, nil
}

// openReadPool connects the read pool (nil when none is configured). It
// connects lazily: a standby down at start delays nothing, its reads fall
// back to the primary until it answers.
func openReadPool(ctx context.Context, cfg config) (*pgxpool.Pool, error) {
	pc, err := cfg.readPoolConfig()
	if pc == nil || err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, usageError{fmt.Errorf("QUITTANCE_READ_DATABASE_URL: %w", err)}
	}
	return pool, nil
}

// poolConfig parses a connection URL for one of the service's pools. Its
// connections run without parallel query (max_parallel_workers_per_gather
// 0) unless the URL sets that parameter: every statement the service
// sends reads a handful of rows, or at most the active holds off their
// covering index (the summary, the scrape), and a parallel plan forks
// its workers afresh for each statement. Measured on the benchmark's
// machine at 100,000 active holds, the summary took 113–136 ms with two
// workers and 48–50 ms with none, the scrape's snapshot 84–102 ms against
// 19–26 ms (cmd/quittance-bench/BENCHMARK.md).
func poolConfig(url string) (*pgxpool.Config, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	if _, set := pc.ConnConfig.RuntimeParams[parallelWorkersParam]; !set {
		pc.ConnConfig.RuntimeParams[parallelWorkersParam] = "0"
	}
	pc.AfterConnect = pgtypes.AfterConnect
	return pc, nil
}

const parallelWorkersParam = "max_parallel_workers_per_gather"

// closeReadPool closes the read pool, if any.
func closeReadPool(pool *pgxpool.Pool) {
	if pool != nil {
		pool.Close()
	}
}
