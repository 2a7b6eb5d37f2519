//go:build linux

package main

import (
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
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
