package pgstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/quittance/quittance/ledger/report"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

// The feed's order and its cut are described in migration 00009 and on the
// FeedList query: events are served in (order_xid, tx_pos, pos) order, and
// only once no transaction that could still write an event before them is
// open. No writer waits for another; a reader waits for the transactions
// that were writing when an event committed.

// FeedEvents returns the events after f.AfterPosition, in the feed's order,
// that are ready to serve. When the page ends at events that are committed
// but wait for an older transaction, it arranges for the subscribers of
// FeedWake to be woken once they are ready.
func (s *Store) FeedEvents(ctx context.Context, f report.FeedQuery) (report.FeedPage, error) {
	p := dbsqlc.FeedListParams{AfterPos: f.AfterPosition, Tenant: optional(f.Tenant), MaxRows: int32(f.Limit)}
	if f.DelegationID != uuid.Nil {
		p.DelegationID = uuid.NullUUID{UUID: f.DelegationID, Valid: true}
	}
	rows, err := s.q.FeedList(ctx, p)
	if err != nil {
		return report.FeedPage{}, fmt.Errorf("read event feed: %w", err)
	}
	page := report.FeedPage{Events: make([]report.FeedEvent, 0, len(rows))}
	for _, r := range rows {
		if !r.Ready {
			s.feedListen.awaitCut(r.OrderXid.Uint64)
			page.HeldBack = true
			break
		}
		page.Events = append(page.Events, report.FeedEvent{Position: r.Pos, Event: toEvent(r.Event)})
	}
	return page, nil
}

// FeedPosition returns the feed position of event seq.
func (s *Store) FeedPosition(ctx context.Context, seq int64) (int64, error) {
	pos, err := s.q.FeedPositionOf(ctx, seq)
	if err != nil {
		return 0, notFound(err, "event", seq)
	}
	return pos, nil
}

// FeedHead returns the position of the last event ready to serve, in the
// feed's order (0 when there is none): reading after it yields only events
// not yet readable now.
func (s *Store) FeedHead(ctx context.Context) (int64, error) {
	pos, err := s.q.FeedHead(ctx)
	if err != nil {
		return 0, fmt.Errorf("read event feed head: %w", err)
	}
	return pos, nil
}

// FeedWake subscribes to wake-ups of feed readers: one LISTEN connection per
// Store, opened while anyone subscribes, fans the notifications
// (quittance_events, sent after every commit that appended events) out to
// every subscriber, and so does a commit through this Store and the cut
// passing events that waited for it. It only wakes readers; it buffers no
// events.
func (s *Store) FeedWake() (<-chan struct{}, func()) {
	return s.feedListen.subscribe()
}

// WebhookWake subscribes to wake-ups of webhook workers, as FeedWake does
// for feed readers, but only after commits that queued webhook
// deliveries (quittance_webhooks): an event no endpoint subscribes to
// wakes no worker on any replica. Deliveries that become due later
// (retries, redrives, expired leases) are found by the workers' ticks.
func (s *Store) WebhookWake() (<-chan struct{}, func()) {
	return s.webhookListen.subscribe()
}

// The channels the Store notifies and listens on.
const (
	channelEvents   = "quittance_events"
	channelWebhooks = "quittance_webhooks"
)

// notifyInterval is the least time between the starts of two of a
// Store's notifications. A NOTIFY wakes every backend that LISTENs in the
// database, whatever its channel (each replica's webhook and credential
// listeners among them), and each wakes into a transaction of its own to
// read the queue: a notification for every flush made PostgreSQL commit
// about three transactions a flush beside the flush's own with three
// replicas (cmd/quittance-bench/BENCHMARK.md). The commits of one interval
// share the notification sent when it ends, so another replica hears of a
// commit at most this late, and of the first commit after a quiet one at
// once. This replica's own subscribers are woken at every commit.
const notifyInterval = 50 * time.Millisecond

// notifier sends the notifications of a Store's commits, one at a time
// and at most one an interval; the commits that arrive meanwhile share
// the next one.
type notifier struct {
	send     func(webhooks bool) // sends one notification
	interval time.Duration

	mu       sync.Mutex
	running  bool // a goroutine is sending, or waiting out the interval
	again    bool // a commit came after it started its last notification
	webhooks bool // a commit not yet announced queued webhook deliveries
}

// eventsCommitted wakes feed readers after a commit that appended events,
// and webhook workers if it queued deliveries: this Store's subscribers
// at once, every replica's (this one's too) through NOTIFY. The
// notification is sent in a statement of its own, never in the writing
// transaction, whose commit would then take PostgreSQL's cluster-wide
// notification lock.
func (s *Store) eventsCommitted(deliveriesQueued bool) {
	s.feedListen.broadcast()
	if deliveriesQueued {
		s.webhookListen.broadcast()
	}
	s.notify.committed(deliveriesQueued)
}

// sendNotification sends one notification of this Store's commits.
func (s *Store) sendNotification(webhooks bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// A lost notification costs latency, never an event: readers poll.
	_ = s.q.FeedNotify(ctx, webhooks)
}

// committed announces a commit: at once if no notification was started in
// the last interval, else with the next one.
func (n *notifier) committed(deliveriesQueued bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.webhooks = n.webhooks || deliveriesQueued
	if n.running {
		n.again = true
		return
	}
	n.running = true
	go n.run()
}

// run sends notifications while commits keep coming, one an interval.
func (n *notifier) run() {
	n.mu.Lock()
	for {
		webhooks := n.webhooks
		n.webhooks = false
		n.mu.Unlock()
		started := time.Now()
		n.send(webhooks)
		time.Sleep(n.interval - time.Since(started))
		n.mu.Lock()
		if !n.again {
			n.running = false
			n.mu.Unlock()
			return
		}
		n.again = false
	}
}

// listener holds a LISTEN connection of a Store, on one channel.
type listener struct {
	store   *Store
	channel string

	mu   sync.Mutex
	subs map[int]chan struct{}
	next int
	gen  *listenGen // while anyone subscribes
}

// listenGen is one period in which a listener has subscribers: its LISTEN
// goroutine and, while committed events wait for the feed's cut, the
// goroutine that watches the cut. Both end when the period does.
type listenGen struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// watching says the cut watcher runs; it wakes everyone once the cut
	// has passed cutXID. Guarded by listener.mu.
	watching bool
	cutXID   uint64
}

func newListener(s *Store, channel string) *listener {
	return &listener{store: s, channel: channel, subs: map[int]chan struct{}{}}
}

func (l *listener) subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	l.mu.Lock()
	id := l.next
	l.next++
	l.subs[id] = ch
	if l.gen == nil {
		g := &listenGen{}
		g.ctx, g.cancel = context.WithCancel(context.Background())
		l.gen = g
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			l.run(g.ctx)
		}()
	}
	l.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			l.mu.Lock()
			delete(l.subs, id)
			var ended *listenGen
			if len(l.subs) == 0 && l.gen != nil {
				ended, l.gen = l.gen, nil
				ended.cancel()
			}
			l.mu.Unlock()
			if ended != nil {
				ended.wg.Wait()
			}
		})
	}
}

func (l *listener) broadcast() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.broadcastLocked()
}

func (l *listener) broadcastLocked() {
	for _, ch := range l.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// awaitCut arranges one wake-up of every subscriber once the feed's cut has
// passed xid, that is, once the transactions that event waits for have
// ended. No notification announces that: they may end by rolling back, or
// by committing nothing. It does nothing when nobody subscribes.
func (l *listener) awaitCut(xid uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.gen
	if g == nil {
		return
	}
	if g.watching {
		g.cutXID = min(g.cutXID, xid)
		return
	}
	g.watching, g.cutXID = true, xid
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		l.watchCut(g)
	}()
}

// watchCut reads the cut, soon and then less often, until it has passed
// g.cutXID or g ends. The transactions it waits for are a ledger's: short.
func (l *listener) watchCut(g *listenGen) {
	for wait := 2 * time.Millisecond; ; wait = min(wait*2, 200*time.Millisecond) {
		select {
		case <-g.ctx.Done():
			return
		case <-time.After(wait):
		}
		cut, err := l.store.q.FeedCut(g.ctx)
		l.mu.Lock()
		if err == nil && cut.Uint64 > g.cutXID {
			g.watching = false
			l.broadcastLocked()
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
	}
}

// listenConfig is the configuration of a LISTEN connection on channel:
// the pool's, so that it reaches the same primary (a multi-host URL's
// target_session_attrs included), named "quittance listen <channel>" in
// pg_stat_activity, where on-call and the failover test see that the
// listeners came back after a failover.
func (s *Store) listenConfig(channel string) *pgx.ConnConfig {
	cfg := s.pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = "quittance listen " + channel
	return cfg
}

// run keeps a LISTEN connection open until ctx ends, reconnecting after
// failures; after each (re)connect it wakes everyone, since notifications
// sent while disconnected are lost. The wait between attempts grows while
// they fail and starts again from the shortest once one listened, so the
// first attempt after a connection is lost (a failover) comes at once, however
// many were lost before.
func (l *listener) run(ctx context.Context) {
	const first = 100 * time.Millisecond
	for wait := first; ctx.Err() == nil; wait = min(wait*2, 5*time.Second) {
		listened, err := l.listenOnce(ctx)
		if listened {
			wait = first
		}
		if err != nil && ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
		}
	}
}

// listenOnce listens on one connection until it fails; listened says it
// got as far as listening.
func (l *listener) listenOnce(ctx context.Context) (listened bool, err error) {
	conn, err := pgx.ConnectConfig(ctx, l.store.listenConfig(l.channel))
	if err != nil {
		return false, err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+l.channel); err != nil {
		return false, err
	}
	l.broadcast()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return true, err
		}
		l.broadcast()
	}
}
