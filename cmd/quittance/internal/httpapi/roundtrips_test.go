package httpapi_test

import (
	"strings"
	"testing"
	"time"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/ledger"
)

// roundTrips counts the round trips the service's connections make to
// PostgreSQL and keeps the statements sent (apitest.Recorder).
type roundTrips = apitest.Recorder

// tracedCompEnv is a service whose connections count their round trips,
// with a funded budget, an orchestrator and org B registered; opts change
// the rest.
func tracedCompEnv(t *testing.T, opts ...apitest.Option) (*compEnv, *roundTrips) {
	t.Helper()
	rt := &roundTrips{}
	opts = append([]apitest.Option{apitest.WithRecorder(rt), apitest.WithLedgerID(ledgerID), apitest.WithWriteOffThreshold(threshold)}, opts...)
	e := &compEnv{Env: apitest.New(t, opts...), b: compensationtest.NewEd25519Signer(t, "b-1")}
	e.orch = e.NewOrchestrator(t, "acme")
	e.PutBudget(t, budgetID, "EUR", funded)
	e.putOrg(t, orgB, e.b.JWKS())
	return e, rt
}

// TestRoundTripsPerLifecycleCall pins how many round trips to PostgreSQL
// each call of the benchmarked lifecycle (create → canceled → signed ack)
// costs: the service is bound by them (cmd/quittance-bench/BENCHMARK.md),
// and a change that adds one shows here. Each call is one transaction:
// BEGIN rides with its first statement, the writes whose only result is
// whether they matched with the statement after them or the COMMIT
// (sql/pgstore/txconn.go), and its updates of delegations and its events,
// one statement each, with the COMMIT or the first statement that may read
// them (sql/pgstore/updatebatch.go, eventbatch.go).
func TestRoundTripsPerLifecycleCall(t *testing.T) {
	t.Parallel()
	e, rt := tracedCompEnv(t)
	// The authentication cache and the statement caches warm up first.
	e.accept(t, acksPath, e.ack(t, e.pending(t, orgB, 100)), "applied")

	// Each call is measured three times and judged by its fewest: the
	// service's own background work (expiring pending changes, each
	// second) may share the pool with one of them.
	ds := make([]httpapi.DelegationBody, 3)
	for _, c := range []struct {
		call string
		max  int
		f    func(i int)
	}{
		{"create", 3, func(i int) { ds[i] = e.delegation(t, orgB, 100) }},
		{"task-status canceled", 5, func(i int) { ds[i] = e.ReportStatus(t, e.orch, ds[i].ID, "TASK_STATE_CANCELED", time.Time{}) }},
		{"signed ack", 7, func(i int) { e.acceptAnswer(t, acksPath, e.ack(t, ds[i]), "applied") }},
	} {
		var fewest []string
		for i := range ds {
			if sent := rt.During(func() { c.f(i) }); fewest == nil || len(sent) < len(fewest) {
				fewest = sent
			}
		}
		if len(fewest) > c.max {
			t.Errorf("%s: %d round trips, at most %d:\n%s", c.call, len(fewest), c.max, strings.Join(fewest, "\n"))
		} else {
			t.Logf("%s: %d round trips\n%s", c.call, len(fewest), strings.Join(fewest, "\n"))
		}
	}
}

// TestRoundTripsPerSweepBatch: the deadline sweep moves a batch of
// obligations in a number of round trips that does not grow with the
// batch: their streams' heads are read in one statement, and every update
// and event of the batch is sent with its commit (sql/pgstore/txconn.go).
func TestRoundTripsPerSweepBatch(t *testing.T) {
	t.Parallel()
	e, rt := tracedCompEnv(t)
	// The authentication cache and the statement caches warm up first.
	e.pending(t, orgB, 100)
	e.Clock.Advance(ledger.DefaultCompensationTimeout + time.Minute)
	if n := e.sweep(t); n != 1 {
		t.Fatalf("the warm-up sweep moved %d, want 1", n)
	}

	sweep := func(due int) []string {
		// The fewest of three sweeps: the service's own background work may
		// share the pool with one of them.
		var fewest []string
		for try := range 3 {
			for range due {
				e.pending(t, orgB, 100)
			}
			e.Clock.Advance(ledger.DefaultCompensationTimeout + time.Minute)
			sent := rt.During(func() {
				if n := e.sweep(t); n != due {
					t.Fatalf("sweep of %d due moved %d", due, n)
				}
			})
			if try == 0 || len(sent) < len(fewest) {
				fewest = sent
			}
		}
		return fewest
	}
	few, many := sweep(2), sweep(40)
	if len(many) > len(few) {
		t.Errorf("moving 40 obligations took %d round trips, moving 2 took %d:\n%s", len(many), len(few), strings.Join(many, "\n"))
	}
	t.Logf("a sweep batch: %d round trips\n%s", len(many), strings.Join(many, "\n"))
}
