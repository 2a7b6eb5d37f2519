package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/pgstore"
)

// partitionRun runs operations on a coalesced store, each naming the
// business operation ids it is given as its write keys (so that its
// flush's pre-read takes their locks), and logs the order in which they
// run.
type partitionRun struct {
	t     *testing.T
	b     bundle
	mu    sync.Mutex
	ran   []string
	wg    sync.WaitGroup
	gates []func() // release every gate, once
}

// newPartitionRun is a partitionRun on b that, when the test ends (passed
// or failed), opens every gate and waits for its operations, so that
// they return their connections before the pool closes.
func newPartitionRun(t *testing.T, b bundle) *partitionRun {
	r := &partitionRun{t: t, b: b}
	t.Cleanup(func() {
		for _, release := range r.gates {
			release()
		}
		r.wg.Wait()
	})
	return r
}

// operationKeys are write keys naming the business operation ids names.
func operationKeys(names ...string) ledger.WriteKeys {
	var k ledger.WriteKeys
	for _, n := range names {
		k.Operations = append(k.Operations, ledger.OperationKey{Tenant: "partition", ID: n})
	}
	return k
}

// start runs the operation name in a goroutine: it creates the budget
// name (a write: the flush's pre-read is sent with it), logs that it ran
// and, with a gate, says so on started and waits for the gate. keys nil:
// it names no keys. Its answer arrives on the returned channel.
func (r *partitionRun) start(name string, gate chan struct{}, keys []string) (answer <-chan error, started <-chan struct{}) {
	ans, st := make(chan error, 1), make(chan struct{})
	ctx := context.Background()
	if keys != nil {
		ctx = ledger.WithWriteKeys(ctx, operationKeys(keys...))
	}
	var once sync.Once
	r.wg.Go(func() {
		ans <- r.b.store.InTx(ctx, func(tx ledger.Tx) error {
			if err := tx.InsertBudget(ctx, ledger.Budget{ID: name, Currency: "EUR", CreatedAt: epoch}); err != nil {
				return err
			}
			r.mu.Lock()
			r.ran = append(r.ran, name)
			r.mu.Unlock()
			if gate != nil {
				once.Do(func() { close(st) })
				<-gate
			}
			return nil
		})
	})
	return ans, st
}

// queue starts the operation name and waits until it is queued (both
// flushers busy), so that operations are queued in the order queue is
// called.
func (r *partitionRun) queue(name string, keys ...string) <-chan error {
	r.t.Helper()
	before := r.b.store.QueuedWrites()
	ans, _ := r.start(name, nil, keys)
	waitUntil(r.t, name+" is queued", func() bool { return r.b.store.QueuedWrites() == before+1 })
	return ans
}

// held starts the operation name, which holds its flush open until
// the returned release is called, and waits until it runs.
func (r *partitionRun) held(name string, keys ...string) (release func(), answer <-chan error) {
	r.t.Helper()
	gate := make(chan struct{})
	release = sync.OnceFunc(func() { close(gate) })
	r.gates = append(r.gates, release)
	ans, started := r.start(name, gate, keys)
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		r.t.Fatalf("%s never ran", name)
	}
	return release, ans
}

func (r *partitionRun) log() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ran)
}

// answered waits for an operation's answer, which must be nil.
func answered(t *testing.T, name string, ans <-chan error) {
	t.Helper()
	select {
	case err := <-ans:
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no answer in 10s", name)
	}
}

// TestCoalescedPartitionLeavesHeldKeys: while one flusher's flush holds
// key K, the other flusher takes, in queue order, only the operations
// naming none of the keys held or left: not those on K, nor one on K and
// N, nor, after it, one on N alone. The operations it leaves run, in the
// order they were queued, once K's flush is done. Without the partition
// the second flusher takes the queue's head, on K, and its whole flush
// waits for K's lock until the first flush commits.
func TestCoalescedPartitionLeavesHeldKeys(t *testing.T) {
	t.Parallel()
	b, log := setupCoalesced(t, pgstore.Coalescing{MaxBatch: 16, Flushers: 2})
	r := newPartitionRun(t, b)
	releaseA, a := r.held("a", "K")
	releaseX, x := r.held("x", "M")
	b1 := r.queue("b1", "K")
	c1 := r.queue("c1", "L")
	b2 := r.queue("b2", "K")
	e := r.queue("e", "K", "N")
	n1 := r.queue("n1", "N")
	c2 := r.queue("c2", "L")
	releaseX()
	answered(t, "x", x)
	answered(t, "c1", c1)
	answered(t, "c2", c2)
	if got := r.log(); !slices.Equal(got, []string{"a", "x", "c1", "c2"}) {
		t.Errorf("ran while K was held: %v, want a, x, c1, c2", got)
	}
	if n := b.store.QueuedWrites(); n != 4 {
		t.Errorf("%d operations queued while K is held, want b1, b2, e, n1", n)
	}
	releaseA()
	for name, ans := range map[string]<-chan error{"a": a, "b1": b1, "b2": b2, "e": e, "n1": n1} {
		answered(t, name, ans)
	}
	r.wg.Wait()
	if got, want := r.log(), []string{"a", "x", "c1", "c2", "b1", "b2", "e", "n1"}; !slices.Equal(got, want) {
		t.Errorf("ran in the order %v, want %v", got, want)
	}
	if sizes, _ := log.snapshot(); !slices.Equal(sizes, []int{1, 1, 2, 4}) {
		t.Errorf("flush sizes %v, want 1, 1, 2, 4", sizes)
	}
}

// TestCoalescedPartitionUnkeyedRunsBeside: an operation that names no
// keys is never left: the second flusher takes it, and the operation on
// a free key after it, while the first flush holds K, leaving only the
// operation on K. (Were it to wait for every other flush, an operation
// waiting for a lock would stall every write of the replica, and two
// callers' transactions could not both be open:
// TestFeedWaitsForOlderTransactions holds one open while another
// commits.)
func TestCoalescedPartitionUnkeyedRunsBeside(t *testing.T) {
	t.Parallel()
	b, log := setupCoalesced(t, pgstore.Coalescing{MaxBatch: 16, Flushers: 2})
	r := newPartitionRun(t, b)
	releaseA, a := r.held("a", "K")
	releaseX, x := r.held("x", "M")
	b1 := r.queue("b1", "K")
	u := r.queue("u")
	c1 := r.queue("c1", "L")
	releaseX()
	answered(t, "x", x)
	answered(t, "u", u)
	answered(t, "c1", c1)
	if got := r.log(); !slices.Equal(got, []string{"a", "x", "u", "c1"}) {
		t.Errorf("ran while K was held: %v, want a, x, u, c1", got)
	}
	if n := b.store.QueuedWrites(); n != 1 {
		t.Errorf("%d operations queued while K is held, want b1", n)
	}
	releaseA()
	answered(t, "a", a)
	answered(t, "b1", b1)
	r.wg.Wait()
	if sizes, _ := log.snapshot(); !slices.Equal(sizes, []int{1, 1, 2, 1}) {
		t.Errorf("flush sizes %v, want 1, 1, 2, 1", sizes)
	}
}

// TestCoalescedPartitionRandomLoad: many callers write on a few hot keys
// (some naming two, some none), each operation holding its flush open a
// moment. Every operation is answered and applied, nothing is left
// queued, and no backend of the store ever waits for a lock of a row or a
// key: the two flushers never run flushes on a common key at once (without the
// partition, a sampler of pg_locks sees flushes waiting for each other's
// locks hundreds of times a run).
func TestCoalescedPartitionRandomLoad(t *testing.T) {
	t.Parallel()
	if seen := randomLoad(t, false); seen > 0 {
		t.Errorf("a sampler of pg_locks saw a backend of the store wait for a lock %d times", seen)
	}
}

// TestCoalescedPartitionRandomLoadCallersLeave is
// TestCoalescedPartitionRandomLoad with one caller in eight leaving
// early: withdrawn while queued (perhaps left behind a held key),
// refused once taken. Every operation is still answered, every one
// accepted applied, and nothing left queued. Lock waits are not counted:
// a transaction alone whose statement its caller's deadline cut ends its
// connection, and the backend may hold its locks a moment after.
func TestCoalescedPartitionRandomLoadCallersLeave(t *testing.T) {
	t.Parallel()
	randomLoad(t, true)
}

// randomLoad runs 16 callers of 20 random operations each (some leaving
// early, with leave) on a store with two flushers, checks that every
// one is answered, every one accepted applied, and nothing left queued,
// and returns how many samples of pg_locks saw a lock waited for.
func randomLoad(t *testing.T, leave bool) int {
	b, log := setupCoalesced(t, pgstore.Coalescing{MaxBatch: 8, Flushers: 2})
	ctx, stop := context.WithCancel(context.Background())
	waits := make(chan int, 1)
	go func() { waits <- sampleLockWaits(ctx, t, b) }()
	const callers, each = 16, 20
	var wg sync.WaitGroup
	var mu sync.Mutex
	var accepted []string
	for c := range callers {
		wg.Go(func() {
			for i := range each {
				name := fmt.Sprintf("op-%d-%d", c, i)
				if randomOperation(t, b, name, leave && rand.IntN(8) == 0) {
					mu.Lock()
					accepted = append(accepted, name)
					mu.Unlock()
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("operations still unanswered after 2 minutes (%d queued)", b.store.QueuedWrites())
	}
	stop()
	seen := <-waits
	if n := b.store.QueuedWrites(); n != 0 {
		t.Errorf("%d operations left queued", n)
	}
	var n int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM budgets WHERE id = ANY($1)`, accepted).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != len(accepted) || !leave && n != callers*each {
		t.Errorf("%d budgets written of the %d operations accepted (of %d)", n, len(accepted), callers*each)
	}
	sizes, _ := log.snapshot()
	t.Logf("%d operations (%d accepted) in %d flushes; lock waits sampled: %d", callers*each, len(accepted), len(sizes), seen)
	return seen
}

// randomOperation writes the budget name naming one or two of four hot
// keys, or (one in ten) none, holding its flush open up to 2ms; with
// leaves, its caller leaves after up to 2ms (withdrawn if still queued,
// refused if taken). It reports whether it was accepted.
func randomOperation(t *testing.T, b bundle, name string, leaves bool) bool {
	hot := []string{"k1", "k2", "k3", "k4"}
	ctx := context.Background()
	if rand.IntN(10) > 0 {
		keys := []string{hot[rand.IntN(len(hot))]}
		if rand.IntN(3) == 0 {
			keys = append(keys, hot[rand.IntN(len(hot))])
		}
		ctx = ledger.WithWriteKeys(ctx, operationKeys(keys...))
	}
	if leaves {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(rand.IntN(2000))*time.Microsecond)
		defer cancel()
	}
	hold := time.Duration(rand.IntN(2000)) * time.Microsecond
	err := b.store.InTx(ctx, func(tx ledger.Tx) error {
		if err := tx.InsertBudget(ctx, ledger.Budget{ID: name, Currency: "EUR", CreatedAt: epoch}); err != nil {
			return err
		}
		time.Sleep(hold)
		return nil
	})
	if err != nil && !(leaves && errors.Is(err, context.DeadlineExceeded)) {
		t.Errorf("%s: %v", name, err)
	}
	return err == nil
}

// sampleLockWaits samples, until ctx ends, pg_locks for a lock a backend
// of b's database waits for, and returns how many samples saw one.
func sampleLockWaits(ctx context.Context, t *testing.T, b bundle) int {
	conn, err := b.pool.Acquire(context.Background())
	if err != nil {
		t.Error(err)
		return 0
	}
	defer conn.Release()
	seen := 0
	for ctx.Err() == nil {
		var waiting int
		// A table's extension lock guards no row an operation names: two
		// flushes inserting budgets as the table grows take turns at it
		// (now and then under -race, where flushes run longer).
		err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE NOT l.granted AND l.locktype <> 'extend' AND a.datname = current_database()`).Scan(&waiting)
		if err != nil {
			t.Error(err)
			return seen
		}
		if waiting > 0 {
			seen++
		}
		time.Sleep(time.Millisecond)
	}
	return seen
}

// TestCoalescedFlushBesideARunningOneWaitsForAsMany: beside a running
// flush of two operations, a second flush starts once two operations are
// queued, not for each one as it comes, or once the queue's oldest has
// waited StallAfter.
func TestCoalescedFlushBesideARunningOneWaitsForAsMany(t *testing.T) {
	t.Parallel()
	const stall = time.Second
	b, log := setupCoalesced(t, pgstore.Coalescing{MaxBatch: 16, Flushers: 2, StallAfter: stall})
	r := newPartitionRun(t, b)
	// b1 and b2 wait behind a for K, and are then taken in one flush,
	// which b1 holds open.
	releaseA, a := r.held("a", "K")
	gate := make(chan struct{})
	releaseB := sync.OnceFunc(func() { close(gate) })
	r.gates = append(r.gates, releaseB)
	before := b.store.QueuedWrites()
	b1, b1Started := r.start("b1", gate, []string{"K"})
	waitUntil(t, "b1 is queued", func() bool { return b.store.QueuedWrites() == before+1 })
	b2 := r.queue("b2", "K")
	releaseA()
	answered(t, "a", a)
	<-b1Started

	c := r.queue("c", "M")
	select {
	case err := <-c:
		t.Fatalf("c answered (%v) while one operation was queued beside a flush of two", err)
	case <-time.After(200 * time.Millisecond):
	}
	d, _ := r.start("d", nil, []string{"N"}) // taken with c at once: never seen queued
	answered(t, "c", c)
	answered(t, "d", d)

	queued := time.Now()
	e := r.queue("e", "P")
	answered(t, "e", e)
	if waited := time.Since(queued); waited < stall {
		t.Errorf("e, alone beside a flush of two, was answered after %v, before StallAfter (%v)", waited, stall)
	}
	releaseB()
	answered(t, "b1", b1)
	answered(t, "b2", b2)
	r.wg.Wait()
	if sizes, _ := log.snapshot(); !slices.Equal(sizes, []int{1, 2, 2, 1}) {
		t.Errorf("flush sizes %v, want 1, 2 (b1, b2), 2 (c, d), 1 (e)", sizes)
	}
}
