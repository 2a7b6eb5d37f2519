package pgstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/pgstore"
	"github.com/quittance/quittance/sql/pgtest"
)

// heldDelegations creates n held delegations of one org on a budget that
// has room for them all.
func heldDelegations(t *testing.T, store *pgstore.Store, n int) []ledger.Delegation {
	t.Helper()
	ctx := context.Background()
	svc := ledger.NewService(ledger.Config{Store: store, Clock: fixedClock{epoch}})
	if _, _, err := svc.PutBudget(ctx, oncall, "counts", ledger.BudgetInput{Currency: "EUR", FundedMinor: 1_000_000}); err != nil {
		t.Fatal(err)
	}
	holdsFor(t, store, "counts", orch.Tenant)
	if _, _, err := svc.PutOrg(ctx, oncall, "umbrella", ledger.OrgInput{Name: "Umbrella"}); err != nil {
		t.Fatal(err)
	}
	out := make([]ledger.Delegation, n)
	for i := range out {
		d, _, err := svc.CreateDelegation(ctx, orch, ledger.CreateInput{
			BusinessOperationID: fmt.Sprintf("count-%d", i), OrgID: "umbrella", TaskClass: "procurement", BudgetID: "counts",
			Hold: ledger.Money{AmountMinor: 10, Currency: "EUR"}, Remote: ledger.RemoteTask{TaskID: fmt.Sprintf("task-count-%d", i)},
		})
		if err != nil {
			t.Fatal(err)
		}
		out[i] = d
	}
	return out
}

// countsInOneSnapshot reads, in one repeatable-read transaction (so one
// snapshot), the per-state counts MetricsSnapshot reports and the counts of
// a full count(*) GROUP BY obligation_state, every state present.
func countsInOneSnapshot(ctx context.Context, pool *pgxpool.Pool) (snapshot, full map[string]float64, err error) {
	snapshot, full = map[string]float64{}, map[string]float64{}
	for _, s := range ledger.ObligationStates {
		snapshot[string(s)], full[string(s)] = 0, 0
	}
	err = pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, pgstore.MetricsSnapshotSQL())
		if err != nil {
			return err
		}
		var metric, label string
		var value float64
		if _, err := pgx.ForEachRow(rows, []any{&metric, &label, &value}, func() error {
			if metric == "obligations" {
				snapshot[label] += value
			}
			return nil
		}); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT obligation_state, count(*)::float8 FROM delegations GROUP BY obligation_state`)
		if err != nil {
			return err
		}
		_, err = pgx.ForEachRow(rows, []any{&label, &value}, func() error {
			full[label] = value
			return nil
		})
		return err
	})
	return snapshot, full, err
}

// expectFullCounts fails unless the collector's quittance_obligations
// samples in got equal a full count of the delegations now.
func expectFullCounts(t *testing.T, when string, pool *pgxpool.Pool, got map[string]float64) {
	t.Helper()
	_, full, err := countsInOneSnapshot(context.Background(), pool)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{}
	for s, n := range full {
		want[`quittance_obligations{state="`+s+`"}`] = n
	}
	expectSamples(t, when, got, want)
}

func unfoldedDeltas(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM obligation_count_deltas`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCollectorObligationCountsExact: while several connections move
// obligations at once — through the services (settled, released, pending)
// and by hand (into compensated and written_off, and from one ended state
// to another) — and two collectors fold the ended states' deltas at every
// scrape, the counts MetricsSnapshot reports equal, in every snapshot, a
// full count of the delegations by state; and after a last fold, with no
// delta left, the scrape equals the full count too.
func TestCollectorObligationCountsExact(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := pgstore.New(pool)
	ctx := context.Background()
	const writers, each = 4, 15
	ds := heldDelegations(t, store, writers*each)
	comp := compensation.NewService(compensation.Config{Store: store.Compensation(), Clock: fixedClock{epoch}})
	report := func(d ledger.Delegation, st ledger.TaskStatus) error {
		_, err := comp.ReportTaskStatus(ctx, orch, d.ID, compensation.Observation{Status: st})
		return err
	}
	exec := func(sql string, args ...any) error {
		_, err := pool.Exec(ctx, sql, args...)
		return err
	}

	var writing, watching sync.WaitGroup
	done := make(chan struct{})
	for w := range writers {
		writing.Go(func() {
			for i, d := range ds[w*each : (w+1)*each] {
				var err error
				switch i % 5 {
				case 0:
					err = report(d, ledger.StatusCompleted) // settled
				case 1:
					err = report(d, ledger.StatusRejected) // released
				case 2:
					err = report(d, ledger.StatusCanceled) // revocation_pending_compensation
				case 3:
					if err = report(d, ledger.StatusCanceled); err == nil {
						err = exec(`UPDATE delegations SET obligation_state = 'compensated', reversed_amount_minor = amount_minor WHERE id = $1`, d.ID)
					}
				case 4:
					// Released, then moved by hand to another ended state:
					// one count down, another up.
					if err = report(d, ledger.StatusRejected); err == nil {
						err = exec(`UPDATE delegations SET obligation_state = 'written_off' WHERE id = $1`, d.ID)
					}
				}
				if err != nil {
					t.Errorf("writer %d, delegation %d: %v", w, i, err)
					return
				}
			}
		})
	}
	// Two replicas' collectors, each folding at every scrape.
	for range 2 {
		reg := prometheus.NewRegistry()
		reg.MustRegister(pgstore.NewCollector(store))
		watching.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				families, err := reg.Gather()
				if err != nil {
					t.Errorf("scrape during the writes: %v", err)
					return
				}
				for _, f := range families {
					if f.GetName() == "quittance_collector_up" && f.GetMetric()[0].GetGauge().GetValue() != 1 {
						t.Errorf("collector down during the writes")
						return
					}
				}
			}
		})
	}
	compared := 0
	watching.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			snapshot, full, err := countsInOneSnapshot(ctx, pool)
			if err != nil {
				t.Errorf("snapshot %d: %v", compared, err)
				return
			}
			for s, want := range full {
				if snapshot[s] != want {
					t.Errorf("snapshot %d: %s counted %v, a full count says %v", compared, s, snapshot[s], want)
				}
			}
			compared++
		}
	})
	writing.Wait()
	close(done)
	watching.Wait()
	if compared == 0 {
		t.Error("no snapshot was compared while the writers ran")
	}

	got := scrape(t, store, epoch)
	expectFullCounts(t, "after the writes", pool, got)
	expectSamples(t, "after the writes", got, map[string]float64{
		`quittance_obligations{state="settled"}`:                         writers * 3,
		`quittance_obligations{state="released"}`:                        writers * 3,
		`quittance_obligations{state="revocation_pending_compensation"}`: writers * 3,
		`quittance_obligations{state="compensated"}`:                     writers * 3,
		`quittance_obligations{state="written_off"}`:                     writers * 3,
		`quittance_obligations{state="held"}`:                            0,
	})
	if n := unfoldedDeltas(t, pool); n != 0 {
		t.Errorf("%d deltas left after a fold", n)
	}
	var folded float64
	if err := pool.QueryRow(ctx, `SELECT sum(n)::float8 FROM obligation_counts`).Scan(&folded); err != nil || folded != writers*each*4/5 {
		t.Errorf("folded totals %v, %v; want %d", folded, err, writers*each*4/5)
	}
	// Scraped again with nothing to fold, the counts stay.
	expectFullCounts(t, "scraped again", pool, scrape(t, store, epoch))
}

// TestCollectorObligationCountsAsServiceRole: the service role appends the
// deltas (through the trigger, as itself) and folds them.
func TestCollectorObligationCountsAsServiceRole(t *testing.T) {
	t.Parallel()
	ownerURL := pgtest.URL(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.ServiceURL(t, ownerURL))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := pgstore.New(pool)
	ds := heldDelegations(t, store, 2)
	comp := compensation.NewService(compensation.Config{Store: store.Compensation(), Clock: fixedClock{epoch}})
	for _, d := range ds {
		if _, err := comp.ReportTaskStatus(ctx, orch, d.ID, compensation.Observation{Status: ledger.StatusCompleted}); err != nil {
			t.Fatal(err)
		}
	}
	if n := unfoldedDeltas(t, pool); n != 2 {
		t.Fatalf("%d deltas, want 2", n)
	}
	got := scrape(t, store, epoch)
	if got["quittance_collector_up"] != 1 {
		t.Fatalf("collector down as the service role")
	}
	expectSamples(t, "as the service role", got, map[string]float64{`quittance_obligations{state="settled"}`: 2})
	if n := unfoldedDeltas(t, pool); n != 0 {
		t.Errorf("%d deltas left after the service role's fold", n)
	}
}

// TestEndedObligationCountsBackfill: migrating to 00032 counts the ended
// obligations a database already has, those moved before it (with no
// trigger to count them) included, once; the collector's counts equal a
// full count at once after the upgrade, and follow transitions after it.
func TestEndedObligationCountsBackfill(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := pgstore.New(pool)
	ctx := context.Background()
	ds := heldDelegations(t, store, 6)
	comp := compensation.NewService(compensation.Config{Store: store.Compensation(), Clock: fixedClock{epoch}})
	for i, st := range []ledger.TaskStatus{ledger.StatusCompleted, ledger.StatusRejected, ledger.StatusCanceled} {
		if _, err := comp.ReportTaskStatus(ctx, orch, ds[i].ID, compensation.Observation{Status: st}); err != nil {
			t.Fatal(err)
		}
	}
	migrate := migrateDownTo(t, pool, 30)
	// As the schema of 00030 held them: two more obligations end.
	for i, stmt := range map[int]string{
		3: `UPDATE delegations SET obligation_state = 'written_off' WHERE id = $1`,
		4: `UPDATE delegations SET obligation_state = 'compensated', reversed_amount_minor = amount_minor WHERE id = $1`,
	} {
		if _, err := pool.Exec(ctx, stmt, ds[i].ID); err != nil {
			t.Fatal(err)
		}
	}
	migrateUp(t, pool, migrate)
	if n := unfoldedDeltas(t, pool); n != 0 {
		t.Errorf("%d deltas right after the backfill", n)
	}
	got := scrape(t, store, epoch)
	expectFullCounts(t, "after the upgrade", pool, got)
	expectSamples(t, "after the upgrade", got, map[string]float64{
		`quittance_obligations{state="settled"}`: 1, `quittance_obligations{state="released"}`: 1,
		`quittance_obligations{state="written_off"}`: 1, `quittance_obligations{state="compensated"}`: 1,
		`quittance_obligations{state="revocation_pending_compensation"}`: 1, `quittance_obligations{state="held"}`: 1,
	})
	if _, err := comp.ReportTaskStatus(ctx, orch, ds[5].ID, compensation.Observation{Status: ledger.StatusCompleted}); err != nil {
		t.Fatal(err)
	}
	expectFullCounts(t, "after a settlement", pool, scrape(t, store, epoch))
}

// TestMetricsSnapshotReadsActiveHoldsOnly: MetricsSnapshot reads
// delegations only through a partial index over the active holds, never
// the whole table, so its cost does not grow with the ended obligations.
// Sequential scans are disabled for the plan, as a table large enough for
// the question to matter would have them priced: a count over the whole
// table would then scan a full index, which this refuses too.
func TestMetricsSnapshotReadsActiveHoldsOnly(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		// The partial indexes of delegations whose predicate names the
		// obligation state and no ended state: over active holds only.
		rows, err := tx.Query(ctx, `SELECT c.relname::text FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
			WHERE i.indrelid = 'delegations'::regclass AND i.indpred IS NOT NULL
			  AND pg_get_expr(i.indpred, i.indrelid) LIKE '%obligation_state%'
			  AND pg_get_expr(i.indpred, i.indrelid) !~ 'settled|released|compensated|written_off'`)
		if err != nil {
			return err
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		activeOnly := map[string]bool{}
		for _, n := range names {
			activeOnly[n] = true
		}
		if !activeOnly["delegations_active_cover"] {
			t.Fatalf("partial indexes over the active holds: %v, without delegations_active_cover", names)
		}
		if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off`); err != nil {
			return err
		}
		var plan []struct {
			Plan json.RawMessage `json:"Plan"`
		}
		if err := tx.QueryRow(ctx, `EXPLAIN (FORMAT JSON) `+pgstore.MetricsSnapshotSQL()).Scan(&plan); err != nil {
			return err
		}
		type node struct {
			NodeType string `json:"Node Type"`
			Relation string `json:"Relation Name"`
			Index    string `json:"Index Name"`
			Plans    []node `json:"Plans"`
		}
		var root node
		if err := json.Unmarshal(plan[0].Plan, &root); err != nil {
			return err
		}
		scans := 0
		var walk func(n node)
		walk = func(n node) {
			isDelegations := n.Relation == "delegations" ||
				(n.NodeType == "Bitmap Index Scan" && strings.HasPrefix(n.Index, "delegations"))
			if isDelegations && n.NodeType != "Bitmap Heap Scan" {
				scans++
				if !activeOnly[n.Index] {
					t.Errorf("MetricsSnapshot reads delegations by %s %s, not a partial index over the active holds", n.NodeType, n.Index)
				}
			}
			for _, c := range n.Plans {
				walk(c)
			}
		}
		walk(root)
		if scans == 0 {
			t.Errorf("no scan of delegations found in the plan %s", plan[0].Plan)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
