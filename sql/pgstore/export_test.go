package pgstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

// MetricsSnapshotSQL is the statement the collector's MetricsSnapshot runs,
// for tests that run it in a snapshot of their own or explain its plan.
func MetricsSnapshotSQL() string {
	var c sqlCapture
	_, _ = dbsqlc.New(&c).MetricsSnapshot(context.Background())
	return c.sql
}

// sqlCapture is a dbsqlc.DBTX that keeps the statement it is given and
// runs nothing.
type sqlCapture struct{ sql string }

var errCaptured = errors.New("statement captured, not run")

func (c *sqlCapture) Exec(_ context.Context, sql string, _ ...any) (pgconn.CommandTag, error) {
	c.sql = sql
	return pgconn.CommandTag{}, errCaptured
}

func (c *sqlCapture) Query(_ context.Context, sql string, _ ...any) (pgx.Rows, error) {
	c.sql = sql
	return nil, errCaptured
}

func (c *sqlCapture) QueryRow(_ context.Context, sql string, _ ...any) pgx.Row {
	c.sql = sql
	return capturedRow{}
}

type capturedRow struct{}

func (capturedRow) Scan(...any) error { return errCaptured }

// QueuedWrites is how many operations wait for a flush of the write
// coalescer, so that a test can queue several before releasing the flusher.
func (s *Store) QueuedWrites() int {
	s.writes.mu.Lock()
	defer s.writes.mu.Unlock()
	return len(s.writes.queue)
}

// MayWrite is mayWrite, the coalescer's classifier of statements.
func MayWrite(sql string) bool { return classify(sql) }

// ReadsEvents is readsEvents, which decides when a transaction's buffered
// events are written before a statement.
func ReadsEvents(sql string) bool { return readsEvents(sql) }
