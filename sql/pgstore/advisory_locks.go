package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

// TryLock takes a session-level advisory lock on a connection of its own,
// opened for it outside the pool and closed by unlock: the lock is released
// then, or when the process dies. A lock is held for as long as a task is
// streamed, so taking its connection from the pool would let a few streams
// exhaust the pool and stall every other query, the streams' own included.
func (a a2aStore) TryLock(ctx context.Context, key string) (func(), bool, error) {
	conn, err := pgx.ConnectConfig(ctx, a.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, false, fmt.Errorf("connect for lock %s: %w", key, err)
	}
	closeConn := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = conn.Close(ctx)
	}
	ok, err := dbsqlc.New(conn).AdvisoryLockTry(ctx, key)
	if err != nil || !ok {
		closeConn()
		if err != nil {
			return nil, false, fmt.Errorf("try lock %s: %w", key, err)
		}
		return nil, false, nil
	}
	return closeConn, true, nil
}
