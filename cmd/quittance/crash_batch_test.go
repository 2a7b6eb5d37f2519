//go:build linux

package main

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/ledger/access"
	"github.com/quittance/quittance/sql/pgtest"
)

// TestCrashInsideBatch kills `quittance serve` inside a flush of the write
// coalescer that carries several creations (ledger/DESIGN.md §5, "The write
// path"), before its COMMIT is sent and once it has committed, with
// concurrent clients in flight. Afterwards every acknowledged creation is
// there, with its one hold; an unacknowledged one is there whole (its
// delegation and its hold entry) or not at all, and the batch's are all
// absent (before) or all present (after); budgets are conserved and every
// chain verifies. The retries of the unacknowledged ones, with their
// business operation ids, leave each exactly once.
func TestCrashInsideBatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		point     string
		committed bool
	}{{"batch-before-commit", false}, {"batch-after-commit", true}} {
		t.Run(tc.point, func(t *testing.T) {
			t.Parallel()
			// One flusher: no other flush runs when the batch's dies.
			e := newCrashEnv(t, "", nil, map[string]string{"QUITTANCE_WRITE_FLUSHERS": "1"})
			e.proc.stop()
			e.start(tc.point)
			// One client alone first: its flushes carry one operation, which
			// the failpoints spare, so these are acknowledged before the kill.
			var acked []string
			for i := range 8 {
				op := fmt.Sprintf("alone-%d", i)
				e.api.must(t, http.MethodPost, "/v1/delegations", e.orch, createBody(op), nil, http.StatusCreated)
				acked = append(acked, op)
			}
			together, unacked := batchClients(t, e, 8)
			acked = append(acked, together...)
			e.expectKilled()
			pool := testPool(t, e.env["DATABASE_URL"])
			for _, op := range acked {
				if n, holds := holdsOf(t, pool, op); n != 1 || holds != 1 {
					t.Errorf("acknowledged %s: %d delegations, %d holds; want 1 and 1", op, n, holds)
				}
			}
			var present, absent int
			for _, op := range unacked {
				n, holds := holdsOf(t, pool, op)
				created := createdEvents(t, pool, op)
				switch {
				case n == 0 && holds == 0 && created == 0:
					absent++
				case n == 1 && holds == 1 && created == 1:
					present++
				default:
					t.Errorf("unacknowledged %s half applied: %d delegations, %d holds, %d delegation_created events", op, n, holds, created)
				}
			}
			t.Logf("%d acknowledged; of %d unacknowledged, %d committed and %d not", len(acked), len(unacked), present, absent)
			if tc.committed && present < 2 || !tc.committed && absent < 2 {
				t.Errorf("%d unacknowledged creations committed, %d not: the kill was not inside a batch %s", present, absent, tc.point)
			}
			checkDatabase(t, pool)

			e.start("")
			for _, op := range unacked {
				res := e.api.do(t.Context(), http.MethodPost, "/v1/delegations", e.orch, createBody(op))
				if !res.ok() {
					t.Errorf("retry of %s: %d %v %s", op, res.status, res.err, res.body)
				}
			}
			for _, op := range append(acked, unacked...) {
				if n, holds := holdsOf(t, pool, op); n != 1 || holds != 1 {
					t.Errorf("after the retries, %s: %d delegations, %d holds; want 1 and 1", op, n, holds)
				}
			}
			var budget struct {
				Held int64 `json:"held_minor"`
			}
			e.api.must(t, http.MethodGet, "/admin/v1/budgets/"+faultBudget, e.oncall, nil, &budget, http.StatusOK)
			if want := int64(len(acked)+len(unacked)) * faultAmount; budget.Held != want {
				t.Errorf("budget holds %d, want %d", budget.Held, want)
			}
			checkDatabase(t, pool)
		})
	}
}

// batchClients runs clients concurrent creators against e until the
// service dies, and returns the business operation ids answered 2xx and
// those whose request got no answer.
func batchClients(t *testing.T, e *crashEnv, clients int) (acked, unacked []string) {
	t.Helper()
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for c := range clients {
		wg.Go(func() {
			for i := range 200 {
				op := fmt.Sprintf("batch-%d-%d", c, i)
				res := e.api.do(t.Context(), http.MethodPost, "/v1/delegations", e.orch, createBody(op))
				mu.Lock()
				switch {
				case res.ok():
					acked = append(acked, op)
				case res.err != nil:
					unacked = append(unacked, op)
				default:
					t.Errorf("create %s: %d %s", op, res.status, res.body)
				}
				mu.Unlock()
				if !res.ok() {
					return
				}
			}
		})
	}
	wg.Wait()
	return acked, unacked
}

// createdEvents is the number of delegation_created events of the
// tenant's delegations for op.
func createdEvents(t *testing.T, pool *pgxpool.Pool, op string) int {
	t.Helper()
	var n int
	err := pool.QueryRow(t.Context(), `SELECT count(*) FROM events e JOIN delegations d ON d.id = e.delegation_id
		WHERE d.tenant = $1 AND d.business_operation_id = $2 AND e.type = 'delegation_created'`, faultTenant, op).Scan(&n)
	if err != nil {
		t.Fatalf("count the creation events of %s: %v", op, err)
	}
	return n
}

// multiFlushes is the number of the service's flushes that carried more
// than one operation so far (quittance_write_batch_size: all flushes less
// those of one).
func multiFlushes(t *testing.T, api *testClient) int {
	t.Helper()
	res := api.do(t.Context(), http.MethodGet, "/metrics", "", nil)
	if !res.ok() {
		t.Fatalf("GET /metrics: %v", res)
	}
	var all, ones float64
	for line := range strings.SplitSeq(string(res.body), "\n") {
		var err error
		switch {
		case strings.HasPrefix(line, "quittance_write_batch_size_count "):
			all, err = strconv.ParseFloat(strings.Fields(line)[1], 64)
		case strings.HasPrefix(line, `quittance_write_batch_size_bucket{le="1"} `):
			ones, err = strconv.ParseFloat(strings.Fields(line)[1], 64)
		}
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
	}
	return int(all - ones)
}

// TestPostgresKilledMidBatch SIGKILLs PostgreSQL's postmaster while the
// service's write coalescer has flushes of several operations in flight
// (clients run lifecycles: creation, statuses, signed acks), then starts
// it again (crash recovery). Every request answered 2xx is in the
// database, as far as it was told; every delegation is whole (its one
// hold entry, its one delegation_created event) or absent; the clients'
// retries, unchanged (the same business operation ids, statuses and
// signed tokens), are answered with what was recorded, so no operation is
// applied twice; the invariants hold and every chain verifies.
func TestPostgresKilledMidBatch(t *testing.T) {
	t.Parallel()
	cluster, dbURL := pgtest.Cluster(t)
	// One flusher: concurrent clients' writes queue behind it, so its
	// flushes carry several operations.
	oncall := access.NewTokenSecret()
	api := newTestClient(inProcessService(t, dbURL, oncall, "QUITTANCE_WRITE_FLUSHERS=1"))
	signer := compensationtest.NewEd25519Signer(t, "supplier-key-1")
	orch, _, _ := fixtures(t, api, oncall, signer, nil)
	pool := testPool(t, dbURL)
	l := newLoad(t, api, orch, signer, "pgkill")
	stop := make(chan struct{})
	wait := l.run(12, stop)

	// Kill once flushes of several operations have run for a while, and
	// while they still do: one ran within the last 100ms.
	deadline := time.Now().Add(30 * time.Second)
	before := multiFlushes(t, api)
	for {
		time.Sleep(100 * time.Millisecond)
		now := multiFlushes(t, api)
		if now > before && now >= 20 {
			break
		}
		if time.Now().After(deadline) {
			close(stop)
			wait()
			t.Fatalf("no flush carried more than one operation within 30s (%d so far)", now)
		}
		before = now
	}
	errsBefore := l.errCount.Load()
	fault := time.Now()
	if err := cluster.Kill(); err != nil {
		close(stop)
		wait()
		t.Fatal(err)
	}
	// The killed postmaster's backends end on their own; until they have,
	// a new postmaster refuses the data directory.
	for {
		err := cluster.Restart(t.Context(), "fast")
		if err == nil {
			break
		}
		if time.Since(fault) > time.Minute {
			close(stop)
			wait()
			t.Fatalf("start PostgreSQL again after the kill: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	l.waitRecovered(t, fault, 30*time.Second)
	time.Sleep(time.Second)
	close(stop)
	wait()
	if hit := l.errCount.Load() - errsBefore; hit < 2 {
		t.Errorf("%d requests failed after the kill, want several: the kill did not hit writes in flight", hit)
	}
	l.check(t, pool)
	// None half applied: each delegation has its one hold entry and its
	// one creation event.
	rows, err := pool.Query(t.Context(), `
		SELECT d.business_operation_id,
		       (SELECT count(*) FROM budget_entries j WHERE j.delegation_id = d.id AND j.kind = 'hold'),
		       (SELECT count(*) FROM events e WHERE e.delegation_id = d.id AND e.type = 'delegation_created')
		FROM delegations d WHERE d.tenant = $1 AND d.business_operation_id LIKE 'pgkill-%'`, faultTenant)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var (
			op             string
			holds, created int
		)
		if err := rows.Scan(&op, &holds, &created); err != nil {
			t.Fatal(err)
		}
		n++
		if holds != 1 || created != 1 {
			t.Errorf("%s half applied: %d hold entries, %d delegation_created events", op, holds, created)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d delegations, each whole; %d requests failed after the kill and were retried", n, l.errCount.Load()-errsBefore)
}
