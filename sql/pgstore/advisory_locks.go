package pgstore

import (
	"context"
	"fmt"
	"time"
)

// TryLock takes a session-level advisory lock on a connection of its own,
// held until unlock; the connection (and with it the lock) is released
// then, or when the process dies.
func (a a2aStore) TryLock(ctx context.Context, key string) (func(), bool, error) {
	conn, err := a.pool.Acquire(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("acquire connection for lock %s: %w", key, err)
	}
	q := newQueries(conn)
	ok, err := q.AdvisoryLockTry(ctx, key)
	if err != nil || !ok {
		conn.Release()
		if err != nil {
			return nil, false, fmt.Errorf("try lock %s: %w", key, err)
		}
		return nil, false, nil
	}
	unlock := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := q.AdvisoryLockRelease(ctx, key); err != nil {
			// The lock must not outlive its holder on a pooled
			// connection: close the connection instead.
			_ = conn.Conn().Close(ctx)
		}
		conn.Release()
	}
	return unlock, true, nil
}
