package pgstore

import (
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

// reader implements ledger.Reader on a pool or a transaction.
type reader struct {
	q *dbsqlc.Queries
}

// notFound turns pgx.ErrNoRows into ledger.ErrNotFound, naming what was missing.
func notFound(err error, what string, id any) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%s %v: %w", what, id, ledger.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("load %s %v: %w", what, id, interpretError(err))
	}
	return nil
}

// optional maps "" to NULL.
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// optionalTime maps the zero time to NULL.
func optionalTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func derefTime(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

// nullUUID maps the nil UUID to NULL.
func nullUUID(id uuid.UUID) uuid.NullUUID {
	return uuid.NullUUID{UUID: id, Valid: id != uuid.Nil}
}
