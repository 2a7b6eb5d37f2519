// Package migrations holds Quittance's PostgreSQL schema as goose migrations,
// embedded in the binary, and applies them. sqlc reads the same files as its
// schema, so they are the one source of truth for the database's shape.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"log/slog"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// FS holds the migration files.
//
//go:embed *.sql
var FS embed.FS

// Up applies every pending migration. A PostgreSQL session advisory lock
// serializes concurrent callers, so several replicas may start at once.
func Up(ctx context.Context, db *sql.DB, log *slog.Logger) error {
	p, err := newProvider(db, log)
	if err != nil {
		return err
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("apply migrations: %w", err)
	}
	return nil
}

// Pending reports whether migrations remain to be applied; readiness checks
// use it so a replica never serves an older schema than its code expects.
func Pending(ctx context.Context, db *sql.DB) (bool, error) {
	p, err := newProvider(db, nil)
	if err != nil {
		return false, err
	}
	pending, err := p.HasPending(ctx)
	if err != nil {
		return false, fmt.Errorf("check pending migrations: %w", err)
	}
	return pending, nil
}

func newProvider(db *sql.DB, log *slog.Logger) (*goose.Provider, error) {
	// Replicas that start together wait for the one migrating: probed every
	// second (goose's default is every 5s, which delays a replica's start
	// by up to 10s for a migration that takes a moment), for at most five
	// minutes as by default.
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, 300))
	if err != nil {
		return nil, fmt.Errorf("create migration locker: %w", err)
	}
	opts := []goose.ProviderOption{goose.WithSessionLocker(locker)}
	if log != nil {
		opts = append(opts, goose.WithSlog(log))
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, FS, opts...)
	if err != nil {
		return nil, fmt.Errorf("create migration provider: %w", err)
	}
	return p, nil
}
