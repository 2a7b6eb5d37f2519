package pgstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/report"
	"github.com/quittance/quittance/sql/migrations"
	"github.com/quittance/quittance/sql/pgstore"
	"github.com/quittance/quittance/sql/pgtest"
)

// errRollback makes a test transaction roll back.
var errRollback = errors.New("roll back")

// feedEvent is a test event to append.
func feedEvent(stream string, delegation uuid.UUID, tag string) ledger.Event {
	return ledger.Event{
		Stream: stream, DelegationID: delegation, Type: "feed_test", At: epoch, Actor: "test",
		Data: []byte(fmt.Sprintf(`{"tag": %q}`, tag)),
	}
}

// appendWritten appends e in tx and has it written at once: a
// transaction's events are written together at its end, or before a
// statement that reads events (sql/pgstore/eventbatch.go), here the read of
// e's stream, which also gives e its Seq. So the transaction holds its
// xid and e's seq from here, as the feed's tests need.
func appendWritten(ctx context.Context, tx ledger.Tx, e ledger.Event) (ledger.Event, error) {
	e, err := tx.AppendEvent(ctx, e)
	if err != nil {
		return e, err
	}
	r, ok := tx.(interface {
		StreamEvents(context.Context, string) ([]ledger.Event, error)
	})
	if !ok {
		return e, fmt.Errorf("%T reads no stream", tx)
	}
	events, err := r.StreamEvents(ctx, e.Stream)
	if err != nil {
		return e, err
	}
	if n := len(events); n == 0 || events[n-1].StreamSeq != e.StreamSeq || !bytes.Equal(events[n-1].Hash, e.Hash) {
		return e, fmt.Errorf("stream %s does not end at the event appended (%d events)", e.Stream, n)
	}
	return events[len(events)-1], nil
}

// widePool opens a second pool on pool's database, with room for many
// concurrent transactions: another replica, as far as the feed can tell.
func widePool(t *testing.T, pool *pgxpool.Pool, conns int32) *pgxpool.Pool {
	t.Helper()
	cfg := pool.Config().Copy()
	cfg.MaxConns = conns
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// readAll reads the whole feed of q's scope after q.AfterPosition, page by
// page, from a store that was not used to write: what a new replica serves.
func readAll(t *testing.T, s *pgstore.Store, q report.FeedQuery) []report.FeedEvent {
	t.Helper()
	q.Limit = 50
	var out []report.FeedEvent
	for {
		page, err := s.FeedEvents(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, page.Events...)
		if len(page.Events) < q.Limit {
			return out
		}
		q.AfterPosition = page.Events[len(page.Events)-1].Position
	}
}

// readSettled is readAll once it returns at least n events, which is when
// the transactions that wrote them and every transaction open when they
// committed, on the whole (shared) server, have ended.
func readSettled(t *testing.T, s *pgstore.Store, q report.FeedQuery, n int) []report.FeedEvent {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		events := readAll(t, s, q)
		if len(events) >= n || time.Now().After(deadline) {
			return events
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func seqsOf(events []report.FeedEvent) []int64 {
	out := make([]int64, len(events))
	for i, fe := range events {
		out[i] = fe.Event.Seq
	}
	return out
}

// committedTx is a transaction a writer committed: its events in append
// order, and logical times bracketing it: began is taken when its last
// attempt began, ended after the commit returned.
type committedTx struct {
	seqs         []int64
	began, ended int64
}

// feedReader pages through the feed of one scope while writers run, the
// way an SSE client does: it resumes after the last event it saw, and every
// few pages it "reconnects" to another replica with that event's seq as
// Last-Event-ID, which the server maps back to a position.
type feedReader struct {
	name    string
	scope   report.FeedQuery
	stores  []*pgstore.Store
	seen    []report.FeedEvent
	resumes int
}

// run reads until done is closed and then until the reader has seen want
// events, for at most 30s more.
func (r *feedReader) run(ctx context.Context, done <-chan struct{}, want func() int, rng *rand.Rand) error {
	store := r.stores[0]
	q := r.scope
	var catchUp <-chan time.Time
	for page := 0; ; page++ {
		if page%5 == 4 && len(r.seen) > 0 {
			store = r.stores[rng.IntN(len(r.stores))]
			pos, err := store.FeedPosition(ctx, r.seen[len(r.seen)-1].Event.Seq)
			if err != nil {
				return fmt.Errorf("%s: resume position: %w", r.name, err)
			}
			if pos != q.AfterPosition {
				return fmt.Errorf("%s: seq %d maps to %d, the stream stood at %d", r.name, r.seen[len(r.seen)-1].Event.Seq, pos, q.AfterPosition)
			}
			r.resumes++
		}
		q.Limit = 1 + rng.IntN(8)
		page, err := store.FeedEvents(ctx, q)
		if err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
		events := page.Events
		r.seen = append(r.seen, events...)
		if n := len(events); n > 0 {
			q.AfterPosition = events[n-1].Position
			continue
		}
		select {
		case <-done:
			if len(r.seen) >= want() {
				return nil
			}
			if catchUp == nil {
				catchUp = time.After(30 * time.Second)
			}
		default:
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: saw %d events, want %d: %w", r.name, len(r.seen), want(), ctx.Err())
		case <-catchUp:
			return fmt.Errorf("%s: saw %d events, want %d, 30s after the writers ended", r.name, len(r.seen), want())
		case <-time.After(time.Duration(rng.IntN(3)) * time.Millisecond):
		}
	}
}

// TestFeedConcurrentWriters: writers on many connections commit and roll
// back transactions of varying length, appending to shared and private
// streams, while readers of three scopes page through the feed, resuming
// on other replicas by the last seq they saw. Every reader sees every
// committed event of its scope exactly once and nothing rolled back; all
// see one and the same order, which a reader started afterwards, from the
// beginning or from any event, reproduces; each stream is in stream_seq
// order; each transaction's events are adjacent; and a transaction that
// committed before another began comes first.
func TestFeedConcurrentWriters(t *testing.T) {
	t.Parallel()
	base := pgtest.PrivatePool(t)
	pool := widePool(t, base, 16)
	b := bundle{pool: pool, store: pgstore.New(pool)}
	b.svc = ledger.NewService(ledger.Config{Store: b.store, Clock: fixedClock{epoch}})
	d1, d2 := b.delegation(t, "feed-1"), b.delegation(t, "feed-2")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var before []int64
	if err := pool.QueryRow(ctx, `SELECT coalesce(array_agg(seq ORDER BY seq), '{}') FROM events`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	// Commits that take a while after their positions are assigned, as
	// with synchronous replication or a slow disk: a test-only deferred
	// trigger that fires after events_position (triggers fire by name) and
	// sometimes sleeps. This is when a reader that trusted positions alone
	// would skip an event.
	if _, err := pool.Exec(ctx, `
		CREATE FUNCTION feed_test_slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF random() < 0.3 THEN PERFORM pg_sleep(0.002 + random() * 0.01); END IF;
			RETURN NULL;
		END $$;
		CREATE CONSTRAINT TRIGGER events_position_zz_slow_commit AFTER INSERT ON events
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION feed_test_slow_commit();`); err != nil {
		t.Fatal(err)
	}

	const writers, txPerWriter = 8, 30
	shared := []struct {
		stream     string
		delegation uuid.UUID
	}{
		{"delegation:" + d1.ID.String(), d1.ID}, {"delegation:" + d2.ID.String(), d2.ID},
		{"feed:s0", uuid.Nil}, {"feed:s1", uuid.Nil}, {"feed:s2", uuid.Nil},
	}
	var (
		clock      atomic.Int64
		mu         sync.Mutex
		committed  []committedTx
		rolledBack []int64
		delegOf    = map[int64]uuid.UUID{}
	)
	done := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, writers+3)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			private := fmt.Sprintf("feed:w%d", w)
			for i := range txPerWriter {
				// Streams are locked in one order, so writers never deadlock;
				// a transaction that writes its private stream first holds an
				// xid while it waits for a shared stream's lock.
				picks := rng.Perm(len(shared))[:rng.IntN(3)]
				sort.Ints(picks)
				privateFirst := rng.IntN(2) == 0
				rollback := rng.IntN(5) == 0
				var seqs []int64
				var began int64
				err := b.store.InTx(ctx, func(tx ledger.Tx) error {
					seqs, began = seqs[:0], clock.Add(1)
					appendOne := func(stream string, deleg uuid.UUID) error {
						e, err := appendWritten(ctx, tx, feedEvent(stream, deleg, fmt.Sprintf("w%d/t%d", w, i)))
						if err == nil {
							seqs = append(seqs, e.Seq)
						}
						time.Sleep(time.Duration(rng.IntN(4)) * time.Millisecond)
						return err
					}
					if privateFirst || len(picks) == 0 {
						if err := appendOne(private, uuid.Nil); err != nil {
							return err
						}
					}
					for _, p := range picks {
						if err := appendOne(shared[p].stream, shared[p].delegation); err != nil {
							return err
						}
					}
					// Some transactions stay open a while after their last
					// append, holding back everything that commits meanwhile.
					if rng.IntN(4) == 0 {
						time.Sleep(time.Duration(5+rng.IntN(20)) * time.Millisecond)
					}
					if rollback {
						return errRollback
					}
					return nil
				})
				ended := clock.Add(1)
				mu.Lock()
				switch {
				case err == nil:
					committed = append(committed, committedTx{seqs: slices.Clone(seqs), began: began, ended: ended})
				case errors.Is(err, errRollback):
					rolledBack = append(rolledBack, seqs...)
				default:
					mu.Unlock()
					errs <- fmt.Errorf("writer %d: %w", w, err)
					return
				}
				mu.Unlock()
			}
		}()
	}

	// Readers: everything (finance), one tenant (orchestrator), one
	// delegation. Each reads from its own replicas.
	replica := func() *pgstore.Store { return pgstore.New(widePool(t, base, 4)) }
	readers := []*feedReader{
		{name: "all", stores: []*pgstore.Store{replica(), replica()}},
		{name: "tenant", scope: report.FeedQuery{Tenant: orch.Tenant}, stores: []*pgstore.Store{replica(), replica()}},
		{name: "delegation", scope: report.FeedQuery{DelegationID: d1.ID}, stores: []*pgstore.Store{replica(), replica()}},
	}
	var truth struct {
		sync.Mutex
		counts map[string]int
	}
	want := func(name string) func() int {
		return func() int {
			truth.Lock()
			defer truth.Unlock()
			return truth.counts[name]
		}
	}
	var rwg sync.WaitGroup
	for i, r := range readers {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			if err := r.run(ctx, done, want(r.name), rand.New(rand.NewPCG(uint64(100+i), 2))); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	// The writers are done: count what each scope must show.
	var all []struct {
		seq        int64
		delegation uuid.NullUUID
	}
	rows, err := pool.Query(ctx, `SELECT seq, delegation_id FROM events ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var r struct {
			seq        int64
			delegation uuid.NullUUID
		}
		if err := rows.Scan(&r.seq, &r.delegation); err != nil {
			t.Fatal(err)
		}
		all = append(all, r)
		delegOf[r.seq] = r.delegation.UUID
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	truth.Lock()
	truth.counts = map[string]int{"all": len(all)}
	for _, r := range all {
		if r.delegation.Valid {
			truth.counts["tenant"]++
		}
		if r.delegation.UUID == d1.ID {
			truth.counts["delegation"]++
		}
	}
	truth.Unlock()
	close(done)
	rwg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	// The events table is the truth: what was there before, plus every
	// committed transaction's events, and nothing rolled back.
	var wantAll []int64
	wantAll = append(wantAll, before...)
	for _, c := range committed {
		wantAll = append(wantAll, c.seqs...)
	}
	slices.Sort(wantAll)
	tableSeqs := make([]int64, len(all))
	for i, r := range all {
		tableSeqs[i] = r.seq
	}
	if !slices.Equal(tableSeqs, wantAll) {
		t.Fatalf("the events table has %d events, the writers committed %d (and %d before)", len(tableSeqs), len(wantAll)-len(before), len(before))
	}
	if len(rolledBack) == 0 || len(committed) < writers*txPerWriter/2 {
		t.Fatalf("%d transactions committed, %d events rolled back: the test exercised too little", len(committed), len(rolledBack))
	}

	// One order: a reader started now, on a fresh replica, from the start.
	fresh := replica()
	order := readAll(t, fresh, report.FeedQuery{})
	orderSeqs := seqsOf(order)
	if got := slices.Sorted(slices.Values(orderSeqs)); !slices.Equal(got, wantAll) {
		t.Fatalf("the feed from the start has %d events (%d distinct of the table's), want the table's %d", len(got), len(slices.Compact(got)), len(wantAll))
	}
	index := make(map[int64]int, len(order))
	for i, seq := range orderSeqs {
		index[seq] = i
	}
	for _, r := range readers {
		var expect []int64
		for _, seq := range orderSeqs {
			d := delegOf[seq]
			if r.scope.Tenant != "" && d == uuid.Nil || r.scope.DelegationID != uuid.Nil && d != r.scope.DelegationID {
				continue
			}
			expect = append(expect, seq)
		}
		if got := seqsOf(r.seen); !slices.Equal(got, expect) {
			t.Fatalf("reader %s saw %d events, want %d in the feed's order:\n got %v\nwant %v", r.name, len(got), len(expect), got, expect)
		}
		if r.resumes == 0 {
			t.Fatalf("reader %s never resumed", r.name)
		}
		t.Logf("reader %s: %d events, %d resumes", r.name, len(r.seen), r.resumes)
	}
	for _, seq := range rolledBack {
		if _, ok := index[seq]; ok {
			t.Fatalf("rolled back event %d is in the feed", seq)
		}
	}

	// Each stream is in chain order, 1, 2, 3, ...
	next := map[string]int32{}
	for _, fe := range order {
		if want := next[fe.Event.Stream] + 1; fe.Event.StreamSeq != want {
			t.Fatalf("stream %s: event %d (stream_seq %d) where stream_seq %d was due", fe.Event.Stream, fe.Event.Seq, fe.Event.StreamSeq, want)
		}
		next[fe.Event.Stream] = fe.Event.StreamSeq
	}
	// Each transaction's events are adjacent and in append order, and a
	// transaction that committed before another began comes first.
	for _, c := range committed {
		for k := 1; k < len(c.seqs); k++ {
			if index[c.seqs[k]] != index[c.seqs[0]]+k {
				t.Fatalf("transaction %v is not contiguous in the feed", c.seqs)
			}
		}
	}
	for _, a := range committed {
		for _, c := range committed {
			if a.ended < c.began && index[a.seqs[0]] > index[c.seqs[0]] {
				t.Fatalf("transaction %v committed before %v began, but comes after it", a.seqs, c.seqs)
			}
		}
	}

	// Resuming after any event (its seq as Last-Event-ID), on a fresh
	// replica, yields exactly the rest of the feed.
	for i := 0; i < len(order); i += 1 + i%7 {
		pos, err := fresh.FeedPosition(ctx, orderSeqs[i])
		if err != nil {
			t.Fatal(err)
		}
		if got := seqsOf(readAll(t, fresh, report.FeedQuery{AfterPosition: pos})); !slices.Equal(got, orderSeqs[i+1:]) {
			t.Fatalf("after event %d (#%d): %d events, want %d", orderSeqs[i], i, len(got), len(orderSeqs)-i-1)
		}
	}
	head, err := fresh.FeedHead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if head != order[len(order)-1].Position {
		t.Fatalf("head %d, want the last event's position %d", head, order[len(order)-1].Position)
	}
}

// TestFeedWaitsForOlderTransactions: an event that commits while a
// transaction that was already writing is open is not served before that
// transaction ends, and then at once, woken by the store, whether it rolls
// back (nothing is notified) or commits (it comes after: it committed
// later, though its seq is lower).
func TestFeedWaitsForOlderTransactions(t *testing.T) {
	for _, rollback := range []bool{true, false} {
		t.Run(fmt.Sprintf("rollback=%v", rollback), func(t *testing.T) {
			t.Parallel()
			b := privateSetup(t)
			ctx := context.Background()
			wake, stop := b.store.FeedWake()
			defer stop()

			appended, release, ended := make(chan ledger.Event, 1), make(chan struct{}), make(chan error, 1)
			var releaseOnce sync.Once
			end := func() { releaseOnce.Do(func() { close(release) }) }
			t.Cleanup(end) // before the pool closes, should the test fail
			go func() {
				ended <- b.store.InTx(ctx, func(tx ledger.Tx) error {
					e, err := appendWritten(ctx, tx, feedEvent("feed:slow", uuid.Nil, "slow"))
					if err != nil {
						return err
					}
					appended <- e
					<-release
					if rollback {
						return errRollback
					}
					return nil
				})
			}()
			slow := <-appended
			var fast ledger.Event
			if err := b.store.InTx(ctx, func(tx ledger.Tx) error {
				var err error
				fast, err = appendWritten(ctx, tx, feedEvent("feed:fast", uuid.Nil, "fast"))
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if slow.Seq >= fast.Seq {
				t.Fatalf("seqs %d, %d: the slow transaction must hold the lower seq", slow.Seq, fast.Seq)
			}

			// While the slow transaction is open, the fast event waits, and
			// "now" stands before it.
			time.Sleep(50 * time.Millisecond)
			page, err := b.store.FeedEvents(ctx, report.FeedQuery{Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			if !page.HeldBack {
				t.Errorf("the page does not say that committed events are held back")
			}
			events := page.Events
			if slices.Contains(seqsOf(events), fast.Seq) {
				t.Fatalf("event %d was served while a transaction that began writing before it committed is open", fast.Seq)
			}
			head, err := b.store.FeedHead(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var after []report.FeedEvent
			for len(wake) > 0 {
				<-wake
			}

			end()
			err = <-ended
			if rollback != errors.Is(err, errRollback) || !rollback && err != nil {
				t.Fatalf("slow transaction: %v", err)
			}
			want := []int64{fast.Seq, slow.Seq}
			if rollback {
				want = want[:1]
			}
			deadline := time.After(30 * time.Second)
			for len(after) < len(want) {
				select {
				case <-wake:
				case <-deadline:
					t.Fatalf("after the slow transaction ended, no wake-up served the events (served %v, want %v)", seqsOf(after), want)
				}
				page, err := b.store.FeedEvents(ctx, report.FeedQuery{AfterPosition: head, Limit: 100})
				if err != nil {
					t.Fatal(err)
				}
				after = page.Events
			}
			if got := seqsOf(after); !slices.Equal(got, want) {
				t.Fatalf("after the head: %v, want %v", got, want)
			}
		})
	}
}

// TestFeedPositionsSurviveTheMigration: positions assigned before 00009
// keep their numbers and their order, so a client's Last-Event-ID stays
// valid; positions assigned after it are greater and come after them; and
// 00009 rolls back and forth.
func TestFeedPositionsSurviveTheMigration(t *testing.T) {
	t.Parallel()
	pool := pgtest.PrivatePool(t)
	store := pgstore.New(pool)
	ctx := context.Background()
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	migrate, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS)
	if err != nil {
		t.Fatal(err)
	}
	appendTx := func(tags ...string) []int64 {
		t.Helper()
		var seqs []int64
		if err := store.InTx(ctx, func(tx ledger.Tx) error {
			for _, tag := range tags {
				e, err := appendWritten(ctx, tx, feedEvent("feed:"+tag[:1], uuid.Nil, tag))
				if err != nil {
					return err
				}
				seqs = append(seqs, e.Seq)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return seqs
	}
	positions := func() map[int64]int64 {
		t.Helper()
		out := map[int64]int64{}
		rows, err := pool.Query(ctx, `SELECT seq, pos FROM event_positions`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var seq, pos int64
			if err := rows.Scan(&seq, &pos); err != nil {
				t.Fatal(err)
			}
			out[seq] = pos
		}
		return out
	}

	// 00009 alone is rolled back and applied again: the migrations after it
	// stay, so the store's statements still match the schema.
	undo := func() {
		t.Helper()
		if _, err := migrate.ApplyVersion(ctx, 9, false); err != nil {
			t.Fatalf("roll back 00009: %v", err)
		}
		pool.Reset() // statements prepared against the other schema
	}
	redo := func() {
		t.Helper()
		if _, err := migrate.ApplyVersion(ctx, 9, true); err != nil {
			t.Fatalf("apply 00009: %v", err)
		}
		pool.Reset()
	}
	undo()
	var legacy []int64
	for _, tags := range [][]string{{"a1", "b1"}, {"a2"}, {"b2", "a3", "c1"}} {
		legacy = append(legacy, appendTx(tags...)...)
	}
	old := positions()
	redo()

	if got := positions(); !maps.Equal(got, old) {
		t.Fatalf("positions changed in the migration: %v, were %v", got, old)
	}
	fresh := appendTx("a4", "d1")
	feed := readSettled(t, store, report.FeedQuery{}, len(legacy)+len(fresh))
	if got, want := seqsOf(feed), append(slices.Clone(legacy), fresh...); !slices.Equal(got, want) {
		t.Fatalf("feed %v, want the old events in their order, then the new: %v", got, want)
	}
	maxOld := slices.Max(slices.Collect(maps.Values(old)))
	for _, fe := range feed[len(legacy):] {
		if fe.Position <= maxOld {
			t.Fatalf("new position %d is not above the old ones (up to %d)", fe.Position, maxOld)
		}
	}
	// A Last-Event-ID from before the migration resumes where it stood.
	for i, seq := range legacy {
		pos, err := store.FeedPosition(ctx, seq)
		if err != nil || pos != old[seq] {
			t.Fatalf("event %d: position %d (%v), was %d", seq, pos, err, old[seq])
		}
		if got := seqsOf(readAll(t, store, report.FeedQuery{AfterPosition: pos})); !slices.Equal(got, seqsOf(feed[i+1:])) {
			t.Fatalf("after old event %d: %v, want %v", seq, got, seqsOf(feed[i+1:]))
		}
	}

	// Down and up again: the feed keeps every event once, in one order.
	undo()
	redo()
	again := appendTx("a5")
	if got, want := seqsOf(readSettled(t, store, report.FeedQuery{}, len(feed)+1)), append(seqsOf(feed), again...); !slices.Equal(got, want) {
		t.Fatalf("after down and up: %v, want %v", got, want)
	}
}

// TestFeedServesACommitAtOnceOnAQuietServer: on a server where nothing
// else runs, an event is ready as soon as its transaction has committed,
// even one that committed after a younger transaction did: no event waits
// for a transaction that had not begun when it committed. The events are
// written with plain SQL, so that not even the store's notifications run.
func TestFeedServesACommitAtOnceOnAQuietServer(t *testing.T) {
	t.Parallel()
	_, dbURL := pgtest.Cluster(t)
	// Its own deadline: a statement that waits on a lock another test
	// left fails this test instead of hanging the package.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close) // after the open transactions' rollbacks below
	store := pgstore.New(pool)
	var served []int64
	check := func(what string, want ...int64) {
		t.Helper()
		served = append(served, want...)
		if got := seqsOf(readAll(t, store, report.FeedQuery{})); !slices.Equal(got, served) {
			t.Fatalf("%s: the feed has %v, want %v at once", what, got, served)
		}
	}
	begin := func(stream string) (pgx.Tx, int64) {
		t.Helper()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) }) // a no-op once committed
		var seq int64
		if err := tx.QueryRow(ctx, `INSERT INTO events (stream, stream_seq, type, at, actor, data, hashed_data, prev_hash, hash)
			VALUES ($1, 1, 'feed_test', now(), 'test', '{}', '{}', '\x00', '\x00') RETURNING seq`, stream).Scan(&seq); err != nil {
			t.Fatal(err)
		}
		return tx, seq
	}
	commit := func(tx pgx.Tx) {
		t.Helper()
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	first, seq := begin("feed:first")
	commit(first)
	check("a single commit", seq)

	// The older transaction commits after the younger one.
	older, olderSeq := begin("feed:older")
	younger, youngerSeq := begin("feed:younger")
	commit(younger)
	commit(older)
	check("the older commit after the younger", youngerSeq, olderSeq)
	last, seq := begin("feed:last")
	commit(last)
	check("one more", seq)
}

// TestWebhookWakeOnlyForQueuedDeliveries: a commit wakes the webhook
// workers of every replica only when it queued a webhook delivery; events
// that no endpoint subscribes to still wake the feed's readers, but no
// webhook worker, so replicas do not all look for deliveries after every
// commit.
func TestWebhookWakeOnlyForQueuedDeliveries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	replica := pgstore.New(widePool(t, b.pool, 2))
	hooks, stopHooks := replica.WebhookWake()
	defer stopHooks()
	feed, stopFeed := replica.FeedWake()
	defer stopFeed()
	local, stopLocal := b.store.WebhookWake()
	defer stopLocal()
	// woken says whether ch receives within the time given (0: has
	// received already).
	woken := func(ch <-chan struct{}, within time.Duration) bool {
		if within == 0 {
			select {
			case <-ch:
				return true
			default:
				return false
			}
		}
		select {
		case <-ch:
			return true
		case <-time.After(within):
			return false
		}
	}
	// Each listener wakes its subscribers once it is connected.
	for name, ch := range map[string]<-chan struct{}{"webhooks": hooks, "feed": feed, "local webhooks": local} {
		if !woken(ch, 10*time.Second) {
			t.Fatalf("the %s listener did not connect", name)
		}
	}

	d := b.delegation(t, "no-endpoint")
	if !woken(feed, 10*time.Second) {
		t.Error("a commit that appended events woke no feed reader of the other replica")
	}
	if woken(hooks, 500*time.Millisecond) || woken(local, 0) {
		t.Error("a commit that queued no webhook delivery woke the webhook workers")
	}

	if _, err := b.pool.Exec(ctx, `INSERT INTO webhook_endpoints (tenant, id, url, secret, created_at, updated_at)
		VALUES ('acme', 'erp', 'https://erp.example/hooks', 'whsec', now(), now())`); err != nil {
		t.Fatal(err)
	}
	b.report(t, d.ID, ledger.StatusWorking, epoch.Add(time.Minute))
	if !woken(local, 0) {
		t.Error("a commit that queued a delivery did not wake this replica's webhook worker")
	}
	if !woken(hooks, 10*time.Second) {
		t.Error("a commit that queued a delivery did not wake the other replica's webhook worker")
	}
	var queued int
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries`).Scan(&queued); err != nil || queued != 1 {
		t.Errorf("%d deliveries queued (%v), want 1", queued, err)
	}
}
