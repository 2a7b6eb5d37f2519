package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

// A2A returns the store as the A2A workers' Store: the same pool and
// transactions, with the outbox and A2A tracking statements added.
func (s *Store) A2A() delegate.Store { return a2aStore{s} }

// a2aStore adapts Store to delegate.Store.
type a2aStore struct{ *Store }

var _ delegate.Tx = (*tx)(nil)

// InTx runs fn in a transaction of the underlying Store, so retries, commit
// and after-commit hooks are the ledger's.
func (a a2aStore) InTx(ctx context.Context, fn func(delegate.Tx) error) error {
	return a.Store.InTx(ctx, func(t ledger.Tx) error { return fn(t.(*tx)) })
}

// ClaimJobs claims due jobs in one statement (FOR UPDATE SKIP LOCKED), so
// concurrent claimers on any replica never get the same job.
func (a a2aStore) ClaimJobs(ctx context.Context, now, leaseUntil time.Time, leaseToken string, limit int) ([]delegate.Job, error) {
	rows, err := a.q.A2AJobClaim(ctx, dbsqlc.A2AJobClaimParams{
		LeaseUntil: &leaseUntil, LeaseToken: &leaseToken, Now: now, MaxJobs: int32(limit),
	})
	if err != nil {
		return nil, fmt.Errorf("claim a2a jobs: %w", err)
	}
	out := make([]delegate.Job, len(rows))
	for i, r := range rows {
		out[i] = delegate.Job{
			ID: r.ID, DelegationID: r.DelegationID, Kind: ledger.OutboundKind(r.Kind), Payload: r.Payload,
			Attempt: int(r.Attempts), LeaseToken: leaseToken, CreatedAt: r.CreatedAt,
		}
	}
	return out, nil
}

func (r reader) Tracking(ctx context.Context, id uuid.UUID) (delegate.Tracking, error) {
	row, err := r.q.A2ADelegationGet(ctx, id)
	if err != nil {
		return delegate.Tracking{}, notFound(err, "a2a tracking of delegation", id)
	}
	return delegate.Tracking{
		Dispatched: row.Dispatched, PushTokenHash: row.PushTokenHash, ObservedAt: derefTime(row.ObservedAt),
		CompensationTaskID: deref(row.CompensationTaskID), CompensationRound: int(row.CompensationRound),
	}, nil
}

// DelegationsToPoll lists dispatched tasks due for a poll.
func (a a2aStore) DelegationsToPoll(ctx context.Context, cutoff, now time.Time, limit int) ([]uuid.UUID, error) {
	ids, err := a.q.A2ADelegationsToPoll(ctx, dbsqlc.A2ADelegationsToPollParams{Cutoff: &cutoff, Now: now, MaxRows: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("list delegations to poll: %w", err)
	}
	return ids, nil
}

// DelegationsToStream lists dispatched tasks that may be streamed.
func (a a2aStore) DelegationsToStream(ctx context.Context, limit int) ([]uuid.UUID, error) {
	rows, err := a.q.A2ADelegationsToStream(ctx, int32(limit))
	if err != nil {
		return nil, fmt.Errorf("list delegations to stream: %w", err)
	}
	return rows, nil
}

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
	ok, err := dbsqlc.New(conn).A2AStreamTryLock(ctx, key)
	if err != nil || !ok {
		closeConn()
		if err != nil {
			return nil, false, fmt.Errorf("try lock %s: %w", key, err)
		}
		return nil, false, nil
	}
	return closeConn, true, nil
}

func (t *tx) EnqueueOutbound(ctx context.Context, j ledger.OutboundJob) error {
	payload := j.Payload
	if len(payload) == 0 {
		payload = []byte("{}")
	}
	if j.Kind == ledger.OutboundDispatch {
		err := t.q.A2ADelegationEnsure(ctx, dbsqlc.A2ADelegationEnsureParams{DelegationID: j.DelegationID, Dispatched: true, Now: j.At})
		if err != nil {
			return fmt.Errorf("track dispatched delegation %s: %w", j.DelegationID, err)
		}
	}
	err := t.q.A2AJobEnqueue(ctx, dbsqlc.A2AJobEnqueueParams{
		DelegationID: j.DelegationID, Kind: string(j.Kind), Payload: payload, RunAfter: j.RunAfter, Now: j.At,
	})
	if err != nil {
		return fmt.Errorf("enqueue %s for delegation %s: %w", j.Kind, j.DelegationID, err)
	}
	return nil
}

func (t *tx) FinishJob(ctx context.Context, j delegate.Job, outcome string, now time.Time) error {
	n, err := t.q.A2AJobFinish(ctx, dbsqlc.A2AJobFinishParams{Now: now, Outcome: &outcome, ID: j.ID, LeaseToken: &j.LeaseToken})
	if err != nil {
		return fmt.Errorf("finish a2a job %d: %w", j.ID, err)
	}
	if n != 1 {
		return fmt.Errorf("finish a2a job %d: %w", j.ID, delegate.ErrLeaseLost)
	}
	return nil
}

func (t *tx) RetryJob(ctx context.Context, j delegate.Job, runAfter time.Time, lastError string, now time.Time) error {
	n, err := t.q.A2AJobRetry(ctx, dbsqlc.A2AJobRetryParams{
		RunAfter: runAfter, LastError: optional(lastError), Now: now, ID: j.ID, LeaseToken: &j.LeaseToken,
	})
	if err != nil {
		return fmt.Errorf("reschedule a2a job %d: %w", j.ID, err)
	}
	if n != 1 {
		return fmt.Errorf("reschedule a2a job %d: %w", j.ID, delegate.ErrLeaseLost)
	}
	return nil
}

func (t *tx) SetPushTokenHash(ctx context.Context, id uuid.UUID, hash []byte, now time.Time) error {
	if err := t.q.A2ADelegationSetPushToken(ctx, dbsqlc.A2ADelegationSetPushTokenParams{PushTokenHash: hash, Now: now, DelegationID: id}); err != nil {
		return fmt.Errorf("store push token hash of delegation %s: %w", id, err)
	}
	return nil
}

func (t *tx) MarkObserved(ctx context.Context, id uuid.UUID, now time.Time) error {
	if err := t.q.A2ADelegationObserved(ctx, dbsqlc.A2ADelegationObservedParams{Now: now, DelegationID: id}); err != nil {
		return fmt.Errorf("mark delegation %s observed: %w", id, err)
	}
	return nil
}

func (t *tx) SetCompensationTask(ctx context.Context, id uuid.UUID, taskID string, round int, now time.Time) error {
	err := t.q.A2ADelegationSetCompensationTask(ctx, dbsqlc.A2ADelegationSetCompensationTaskParams{
		CompensationTaskID: optional(taskID), CompensationRound: int32(round), Now: now, DelegationID: id,
	})
	if err != nil {
		return fmt.Errorf("store compensation task of delegation %s: %w", id, err)
	}
	return nil
}

func (t *tx) OrgFailures(ctx context.Context, orgID string) (int, error) {
	row, err := t.q.A2AOrgBackoffGet(ctx, orgID)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("load backoff of org %s: %w", orgID, err)
	}
	return int(row.Failures), nil
}

func (t *tx) FailOrg(ctx context.Context, orgID string, retryAt time.Time, lastError string, now time.Time) error {
	if err := t.q.A2AOrgBackoffFail(ctx, dbsqlc.A2AOrgBackoffFailParams{OrgID: orgID, RetryAt: retryAt, LastError: lastError, Now: now}); err != nil {
		return fmt.Errorf("back off org %s: %w", orgID, err)
	}
	return nil
}

func (t *tx) ClearOrgFailures(ctx context.Context, orgID string) error {
	if err := t.q.A2AOrgBackoffClear(ctx, orgID); err != nil {
		return fmt.Errorf("clear backoff of org %s: %w", orgID, err)
	}
	return nil
}
