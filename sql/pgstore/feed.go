package pgstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

// FeedEvents returns events after a commit-ordered position.
func (s *Store) FeedEvents(ctx context.Context, f ledger.FeedQuery) ([]ledger.FeedEvent, error) {
	p := dbsqlc.FeedListParams{AfterPos: f.AfterPosition, Tenant: optional(f.Tenant), MaxRows: int32(f.Limit)}
	if f.DelegationID != uuid.Nil {
		p.DelegationID = uuid.NullUUID{UUID: f.DelegationID, Valid: true}
	}
	rows, err := s.q.FeedList(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("read event feed: %w", err)
	}
	out := make([]ledger.FeedEvent, len(rows))
	for i, r := range rows {
		out[i] = ledger.FeedEvent{Position: r.Pos, Event: toEvent(r.Event)}
	}
	return out, nil
}

// FeedPosition returns the commit-ordered position of event seq.
func (s *Store) FeedPosition(ctx context.Context, seq int64) (int64, error) {
	pos, err := s.q.FeedPositionOf(ctx, seq)
	if err != nil {
		return 0, notFound(err, "event", seq)
	}
	return pos, nil
}

// FeedHead returns the highest committed position.
func (s *Store) FeedHead(ctx context.Context) (int64, error) {
	pos, err := s.q.FeedHead(ctx)
	if err != nil {
		return 0, fmt.Errorf("read event feed head: %w", err)
	}
	return pos, nil
}

// FeedWake subscribes to commits of new events: one LISTEN connection per
// Store, opened while anyone subscribes, fans the notifications
// (quittance_events, sent by the position trigger at commit) out to every
// subscriber. It only wakes readers; it buffers no events.
func (s *Store) FeedWake() (<-chan struct{}, func()) {
	return s.listener().subscribe()
}

func (s *Store) listener() *listener {
	s.listenOnce.Do(func() { s.listen = &listener{store: s, subs: map[int]chan struct{}{}} })
	return s.listen
}

// listener holds the LISTEN connection of a Store.
type listener struct {
	store *Store

	mu     sync.Mutex
	subs   map[int]chan struct{}
	next   int
	cancel context.CancelFunc
	done   chan struct{}
}

func (l *listener) subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	l.mu.Lock()
	id := l.next
	l.next++
	l.subs[id] = ch
	if l.cancel == nil {
		ctx, cancel := context.WithCancel(context.Background())
		l.cancel, l.done = cancel, make(chan struct{})
		go l.run(ctx, l.done)
	}
	l.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			l.mu.Lock()
			delete(l.subs, id)
			var done chan struct{}
			if len(l.subs) == 0 && l.cancel != nil {
				l.cancel()
				l.cancel, done = nil, l.done
			}
			l.mu.Unlock()
			if done != nil {
				<-done
			}
		})
	}
}

func (l *listener) broadcast() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ch := range l.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// run keeps a LISTEN connection open until ctx ends, reconnecting after
// failures; after each (re)connect it wakes everyone, since notifications
// sent while disconnected are lost.
func (l *listener) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	for wait := 100 * time.Millisecond; ctx.Err() == nil; wait = min(wait*2, 5*time.Second) {
		if err := l.listenOnce(ctx); err != nil && ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
		}
	}
}

func (l *listener) listenOnce(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, l.store.pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN quittance_events"); err != nil {
		return err
	}
	l.broadcast()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		l.broadcast()
	}
}
