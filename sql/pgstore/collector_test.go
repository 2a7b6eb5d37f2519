package pgstore_test

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/audit"
	"github.com/quittance/quittance/sql/migrations"
	"github.com/quittance/quittance/sql/pgstore"
	"github.com/quittance/quittance/sql/pgtest"
)

// scrape collects the Collector once, with its clock at now, and returns
// every sample as "name{label="value",…}" → value.
func scrape(t *testing.T, store *pgstore.Store, now time.Time) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(pgstore.NewCollector(store, pgstore.WithCollectorClock(fixedClock{now})))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+`="`+l.GetValue()+`"`)
			}
			sort.Strings(labels)
			key := f.GetName()
			if len(labels) > 0 {
				key += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.GetGauge() != nil:
				out[key] = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				out[key] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// expectSamples fails for every sample in want that got lacks or has
// another value.
func expectSamples(t *testing.T, when string, got map[string]float64, want map[string]float64) {
	t.Helper()
	for k, v := range want {
		g, ok := got[k]
		switch {
		case !ok:
			t.Errorf("%s: %s is not exported", when, k)
		case g != v:
			t.Errorf("%s: %s = %v, want %v", when, k, g, v)
		}
	}
}

func unix(t time.Time) float64 { return float64(t.Unix()) }

// TestCollectorFreshDatabase: on an empty database every series a
// dashboard or alert reads exists, at zero, from the first scrape.
func TestCollectorFreshDatabase(t *testing.T) {
	t.Parallel()
	store := pgstore.New(pgtest.Pool(t))
	got := scrape(t, store, epoch)
	if got["quittance_collector_up"] != 1 {
		t.Fatalf("collector down: %v", got)
	}
	count := map[string]int{}
	for k, v := range got {
		name, _, _ := strings.Cut(k, "{")
		count[name]++
		if strings.HasPrefix(name, "quittance_outbox_") || strings.HasPrefix(name, "quittance_webhook_") ||
			strings.Contains(name, "dispatch_unknown") || strings.Contains(name, "task_not_found") ||
			strings.Contains(name, "extra_task_compensation") || strings.Contains(name, "unanchored") ||
			name == "quittance_oldest_obligation_state_entry_timestamp_seconds" {
			if v != 0 {
				t.Errorf("%s = %v on an empty database", k, v)
			}
		}
	}
	for name, want := range map[string]int{
		"quittance_oldest_obligation_state_entry_timestamp_seconds": 4, // the active states
		"quittance_outbox_jobs":                                      5 * 4, // kinds × states
		"quittance_outbox_oldest_due_timestamp_seconds":              5,
		"quittance_outbox_retried_job_max_attempts":                  5,
		"quittance_outbox_lease_expiries_total":                      5,
		"quittance_webhook_deliveries":                               2,
		"quittance_dispatch_unknown_delegations":                     1,
		"quittance_oldest_dispatch_unknown_timestamp_seconds":        1,
		"quittance_task_not_found_delegations":                       1,
		"quittance_oldest_task_not_found_timestamp_seconds":          1,
		"quittance_extra_task_compensations_open":                    1,
		"quittance_oldest_extra_task_compensation_timestamp_seconds": 1,
		"quittance_oldest_unanchored_event_timestamp_seconds":        1,
	} {
		if count[name] != want {
			t.Errorf("%s: %d series, want %d", name, count[name], want)
		}
	}
	problems, err := testutil.CollectAndLint(pgstore.NewCollector(store))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint %s: %s", p.Metric, p.Text)
	}
}

// TestCollectorStateEntry: the collector reports when the obligation
// longest in each state entered it — the time of the transition, not the
// delegation's creation nor its last update.
func TestCollectorStateEntry(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := pgstore.New(pool)
	ctx := context.Background()
	at := func(d time.Duration) *ledger.Service {
		return ledger.NewService(ledger.Config{Store: store, Clock: fixedClock{epoch.Add(d)}})
	}
	if _, _, err := at(0).PutBudget(ctx, oncall, "ops", ledger.BudgetInput{Currency: "EUR", FundedMinor: 10_000}); err != nil {
		t.Fatal(err)
	}
	holdsFor(t, store, "ops", orch.Tenant)
	if _, _, err := at(0).PutOrg(ctx, oncall, "globex", ledger.OrgInput{Name: "Globex"}); err != nil {
		t.Fatal(err)
	}
	create := func(op string) ledger.Delegation {
		t.Helper()
		d, _, err := at(0).CreateDelegation(ctx, orch, ledger.CreateInput{
			BusinessOperationID: op, OrgID: "globex", TaskClass: "procurement", BudgetID: "ops",
			Hold: ledger.Money{AmountMinor: 100, Currency: "EUR"}, Remote: ledger.RemoteTask{TaskID: "task-" + op},
		})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	report := func(d time.Duration, id ledger.Delegation, st ledger.TaskStatus) {
		t.Helper()
		comp := compensation.NewService(compensation.Config{Store: store.Compensation(), Clock: fixedClock{epoch.Add(d)}})
		if _, err := comp.ReportTaskStatus(ctx, orch, id.ID, compensation.Observation{Status: st}); err != nil {
			t.Fatalf("report %s: %v", st, err)
		}
	}
	working, unconfirmed, pending := create("working"), create("unconfirmed"), create("pending")
	report(2*time.Hour, working, ledger.StatusWorking) // an update that does not move the obligation
	report(time.Hour, unconfirmed, ledger.StatusCanceled)
	report(3*time.Hour, pending, ledger.StatusCanceled)

	got := scrape(t, store, epoch.Add(4*time.Hour))
	expectSamples(t, "after the cancels", got, map[string]float64{
		`quittance_oldest_obligation_state_entry_timestamp_seconds{state="held"}`:                            unix(epoch),
		`quittance_oldest_obligation_state_entry_timestamp_seconds{state="revocation_pending_compensation"}`: unix(epoch.Add(time.Hour)),
		`quittance_oldest_obligation_state_entry_timestamp_seconds{state="compensation_unconfirmed"}`:        0,
		`quittance_oldest_obligation_state_entry_timestamp_seconds{state="escalated"}`:                       0,
	})

	// The first cancel's deadline passes; the sweep moves it, and only it.
	sweptAt := epoch.Add(time.Hour + ledger.DefaultCompensationTimeout + time.Minute)
	comp := compensation.NewService(compensation.Config{Store: store.Compensation(), Clock: fixedClock{sweptAt}})
	if n, err := comp.Sweep(ctx, sweptAt); err != nil || n != 1 {
		t.Fatalf("sweep: moved %d, %v", n, err)
	}
	got = scrape(t, store, sweptAt)
	expectSamples(t, "after the sweep", got, map[string]float64{
		`quittance_oldest_obligation_state_entry_timestamp_seconds{state="revocation_pending_compensation"}`: unix(epoch.Add(3 * time.Hour)),
		`quittance_oldest_obligation_state_entry_timestamp_seconds{state="compensation_unconfirmed"}`:        unix(sweptAt),
	})
	// The creation-time gauge still says creation: the two differ by the
	// time spent held and pending.
	if c := got[`quittance_oldest_open_obligation_created_timestamp_seconds{state="compensation_unconfirmed"}`]; c != unix(epoch) {
		t.Errorf("created gauge %v, want %v", c, unix(epoch))
	}

	// Revoking the org escalates all three at once, at the revocation.
	revokedAt := sweptAt.Add(time.Hour)
	comp = compensation.NewService(compensation.Config{Store: store.Compensation(), Clock: fixedClock{revokedAt}})
	if _, _, err := comp.RevokeIdentity(ctx, oncall, "globex", "key compromise"); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	got = scrape(t, store, revokedAt)
	expectSamples(t, "after the revocation", got, map[string]float64{
		`quittance_oldest_obligation_state_entry_timestamp_seconds{state="held"}`:                     0,
		`quittance_oldest_obligation_state_entry_timestamp_seconds{state="compensation_unconfirmed"}`: 0,
		`quittance_oldest_obligation_state_entry_timestamp_seconds{state="escalated"}`:                unix(revokedAt),
	})
}

// TestCollectorWorkQueues: outbox jobs by kind and state as the clock
// moves, lease expiries counted when a job is claimed again after its
// lease ran out, the attempts of jobs that keep failing, and webhook
// deliveries pending and dead.
func TestCollectorWorkQueues(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := pgstore.New(pool)
	ctx := context.Background()
	b := bundle{pool: pool, store: store, svc: ledger.NewService(ledger.Config{Store: store, Clock: fixedClock{epoch}})}
	d := b.delegation(t, "queues")
	a2a := store.A2A()
	base := epoch.Add(24 * time.Hour)

	err := a2a.InTx(ctx, func(tx delegate.Tx) error {
		for kind, runAfter := range map[ledger.OutboundKind]time.Time{
			ledger.OutboundObserve: base, ledger.OutboundMessage: base.Add(30 * time.Second), ledger.OutboundCancel: base.Add(time.Hour),
		} {
			if err := tx.EnqueueOutbound(ctx, ledger.OutboundJob{DelegationID: d.ID, Kind: kind, RunAfter: runAfter, At: base}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	claim := func(now time.Time, token string) map[ledger.OutboundKind]delegate.Job {
		t.Helper()
		jobs, err := a2a.ClaimJobs(ctx, now, now.Add(2*time.Minute), token, 10)
		if err != nil {
			t.Fatal(err)
		}
		out := map[ledger.OutboundKind]delegate.Job{}
		for _, j := range jobs {
			out[j.Kind] = j
		}
		return out
	}
	jobs := func(kind, state string) string {
		return `quittance_outbox_jobs{kind="` + kind + `",state="` + state + `"}`
	}

	if got := claim(base, "w1"); len(got) != 1 || got[ledger.OutboundObserve].ID == 0 {
		t.Fatalf("first claim: %+v", got)
	}
	expectSamples(t, "observe running", scrape(t, store, base.Add(time.Minute)), map[string]float64{
		jobs("observe", "running"): 1, jobs("observe", "due"): 0,
		jobs("message", "due"): 1, jobs("cancel", "scheduled"): 1,
		`quittance_outbox_oldest_due_timestamp_seconds{kind="message"}`:  unix(base.Add(30 * time.Second)),
		`quittance_outbox_oldest_due_timestamp_seconds{kind="observe"}`:  0,
		`quittance_outbox_lease_expiries_total{kind="observe"}`:          0,
		`quittance_outbox_retried_job_max_attempts{kind="observe"}`:      0,
		`quittance_outbox_oldest_due_timestamp_seconds{kind="dispatch"}`: 0,
	})
	// The worker holding the observe job never finishes it: once the
	// lease has run out the job is claimable again, since its expiry.
	expectSamples(t, "lease run out", scrape(t, store, base.Add(5*time.Minute)), map[string]float64{
		jobs("observe", "running"): 0, jobs("observe", "lease_expired"): 1,
		`quittance_outbox_oldest_due_timestamp_seconds{kind="observe"}`: unix(base.Add(2 * time.Minute)),
	})

	now := base.Add(5 * time.Minute)
	second := claim(now, "w2")
	if len(second) != 2 || second[ledger.OutboundObserve].Attempt != 2 {
		t.Fatalf("second claim: %+v", second)
	}
	err = a2a.InTx(ctx, func(tx delegate.Tx) error {
		return tx.Outbox().RetryJob(ctx, second[ledger.OutboundMessage], now.Add(10*time.Minute), "remote answered 503", now)
	})
	if err != nil {
		t.Fatal(err)
	}
	expectSamples(t, "claimed again", scrape(t, store, now.Add(time.Minute)), map[string]float64{
		jobs("observe", "running"): 1, jobs("observe", "lease_expired"): 0,
		jobs("message", "scheduled"): 1, jobs("message", "due"): 0,
		`quittance_outbox_lease_expiries_total{kind="observe"}`:     1,
		`quittance_outbox_retried_job_max_attempts{kind="observe"}`: 2,
		`quittance_outbox_retried_job_max_attempts{kind="message"}`: 1,
		`quittance_outbox_lease_expiries_total{kind="message"}`:     0,
	})

	// Finishing the job ends its state and its attempts, never the count
	// of expiries: that is a counter.
	err = a2a.InTx(ctx, func(tx delegate.Tx) error {
		return tx.Outbox().FinishJob(ctx, second[ledger.OutboundObserve], "observed", now.Add(time.Minute))
	})
	if err != nil {
		t.Fatal(err)
	}
	expectSamples(t, "observe done", scrape(t, store, now.Add(2*time.Minute)), map[string]float64{
		jobs("observe", "running"):                                  0,
		`quittance_outbox_lease_expiries_total{kind="observe"}`:     1,
		`quittance_outbox_retried_job_max_attempts{kind="observe"}`: 0,
	})

	for _, stmt := range []string{
		`INSERT INTO webhook_endpoints (tenant, id, url, secret, created_at, updated_at)
		 VALUES ('acme', 'erp', 'https://erp.example/hooks', 'whsec', now(), now())`,
		`INSERT INTO webhook_deliveries (tenant, endpoint_id, event_seq, status, next_attempt_at, created_at, updated_at)
		 VALUES ('acme', 'erp', 1, 'pending', now(), now(), now()), ('acme', 'erp', 2, 'pending', now(), now(), now()),
		        ('acme', 'erp', 3, 'dead', now(), now(), now()), ('acme', 'erp', 4, 'delivered', now(), now(), now())`,
	} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	expectSamples(t, "webhooks", scrape(t, store, now), map[string]float64{
		`quittance_webhook_deliveries{state="pending"}`: 2,
		`quittance_webhook_deliveries{state="dead"}`:    1,
	})

	// Two dispatches become unknown, an hour apart; the first is then
	// resolved (a task id reported): the count follows, and the oldest
	// is the one still standing.
	other := b.delegation(t, "queues-2")
	for _, u := range []struct {
		id uuid.UUID
		at time.Time
	}{{d.ID, now}, {other.ID, now.Add(time.Hour)}} {
		if err := a2a.InTx(ctx, func(tx delegate.Tx) error {
			return tx.SetDispatchUnknown(ctx, u.id, "resend refused after an unanswered attempt", u.at)
		}); err != nil {
			t.Fatal(err)
		}
	}
	expectSamples(t, "two unknown", scrape(t, store, now.Add(2*time.Hour)), map[string]float64{
		"quittance_dispatch_unknown_delegations":              2,
		"quittance_oldest_dispatch_unknown_timestamp_seconds": unix(now),
	})
	if err := a2a.InTx(ctx, func(tx delegate.Tx) error {
		_, err := tx.ClearDispatchUnknown(ctx, d.ID)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	expectSamples(t, "one resolved", scrape(t, store, now.Add(2*time.Hour)), map[string]float64{
		"quittance_dispatch_unknown_delegations":              1,
		"quittance_oldest_dispatch_unknown_timestamp_seconds": unix(now.Add(time.Hour)),
	})

	// Both agents then answer that they no longer know the task, an hour
	// apart; the same answer again keeps the first time and is no news;
	// the first task is then returned again.
	setNotFound := func(id uuid.UUID, answer string, at time.Time) bool {
		t.Helper()
		var changed bool
		if err := a2a.InTx(ctx, func(tx delegate.Tx) (err error) {
			changed, err = tx.SetTaskNotFound(ctx, id, answer, at)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return changed
	}
	if !setNotFound(d.ID, "task not found", now) || !setNotFound(other.ID, "task not found", now.Add(time.Hour)) {
		t.Fatal("a first TaskNotFound answer was not news")
	}
	if setNotFound(d.ID, "task not found", now.Add(3*time.Hour)) {
		t.Fatal("the same TaskNotFound answer again was news")
	}
	if !setNotFound(d.ID, "task purged", now.Add(3*time.Hour)) {
		t.Fatal("a different TaskNotFound answer was not news")
	}
	expectSamples(t, "two not found", scrape(t, store, now.Add(4*time.Hour)), map[string]float64{
		"quittance_task_not_found_delegations":              2,
		"quittance_oldest_task_not_found_timestamp_seconds": unix(now),
	})
	if err := a2a.InTx(ctx, func(tx delegate.Tx) error { return tx.ClearTaskNotFound(ctx, d.ID) }); err != nil {
		t.Fatal(err)
	}
	expectSamples(t, "one found again", scrape(t, store, now.Add(4*time.Hour)), map[string]float64{
		"quittance_task_not_found_delegations":              1,
		"quittance_oldest_task_not_found_timestamp_seconds": unix(now.Add(time.Hour)),
	})
}

// TestStateEntryBackfill: migrating to 00007 dates every open obligation's
// entry into its state from its last transition event (its creation when
// it never moved), so the state-entry gauge is right at once after the
// upgrade.
func TestStateEntryBackfill(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := pgstore.New(pool)
	ctx := context.Background()
	b := bundle{pool: pool, store: store, svc: ledger.NewService(ledger.Config{Store: store, Clock: fixedClock{epoch}})}
	held := b.delegation(t, "held")
	canceled := b.delegation(t, "canceled")
	later := compensation.NewService(compensation.Config{Store: store.Compensation(), Clock: fixedClock{epoch.Add(90 * time.Minute)}})
	if _, err := later.ReportTaskStatus(ctx, orch, canceled.ID, compensation.Observation{Status: ledger.StatusCanceled}); err != nil {
		t.Fatal(err)
	}

	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	migrate, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrate.DownTo(ctx, 6); err != nil {
		t.Fatalf("down to 00006: %v", err)
	}
	if _, err := migrate.Up(ctx); err != nil {
		t.Fatalf("up: %v", err)
	}
	pool.Reset()

	for id, want := range map[string]time.Time{held.ID.String(): epoch, canceled.ID.String(): epoch.Add(90 * time.Minute)} {
		var since time.Time
		if err := pool.QueryRow(ctx, `SELECT obligation_state_since FROM delegations WHERE id = $1`, id).Scan(&since); err != nil {
			t.Fatal(err)
		}
		if !since.Equal(want) {
			t.Errorf("delegation %s: in its state since %s, want %s", id, since, want)
		}
	}
	expectSamples(t, "after the upgrade", scrape(t, store, epoch.Add(2*time.Hour)), map[string]float64{
		`quittance_oldest_obligation_state_entry_timestamp_seconds{state="held"}`:                            unix(epoch),
		`quittance_oldest_obligation_state_entry_timestamp_seconds{state="revocation_pending_compensation"}`: unix(epoch.Add(90 * time.Minute)),
	})
}

// TestCollectorExtraTaskCompensations: the collector counts the extra
// remote tasks whose compensation is required and not resolved, and since
// when the oldest of them has been required; a resolved one (a receipt or
// a write-off) leaves the count, and a task that never needed compensation
// is never in it.
func TestCollectorExtraTaskCompensations(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := pgstore.New(pool)
	ctx := context.Background()
	b := bundle{pool: pool, store: store, svc: ledger.NewService(ledger.Config{Store: store, Clock: fixedClock{epoch}})}
	d := b.delegation(t, "extra-tasks")
	now := epoch.Add(time.Hour)
	if err := store.A2A().InTx(ctx, func(tx delegate.Tx) error {
		for _, id := range []string{"extra-1", "extra-2", "not-needed"} {
			if _, err := tx.ExtraTasks().RecordRemoteTask(ctx, d.ID, delegate.RemoteTask{TaskID: id, Purpose: compensation.PurposeDispatch, FoundBy: "list_tasks"}, now); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	comp := store.Compensation()
	inTx := func(f func(tx compensation.Tx) error) {
		t.Helper()
		if err := comp.InTx(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	expectSamples(t, "none required", scrape(t, store, now), map[string]float64{
		"quittance_extra_task_compensations_open":                    0,
		"quittance_oldest_extra_task_compensation_timestamp_seconds": 0,
	})
	inTx(func(tx compensation.Tx) error {
		if err := tx.RequireExtraTaskCompensation(ctx, d.ID, "extra-1", now); err != nil {
			return err
		}
		return tx.RequireExtraTaskCompensation(ctx, d.ID, "extra-2", now.Add(time.Hour))
	})
	expectSamples(t, "two open", scrape(t, store, now.Add(2*time.Hour)), map[string]float64{
		"quittance_extra_task_compensations_open":                    2,
		"quittance_oldest_extra_task_compensation_timestamp_seconds": unix(now),
	})
	inTx(func(tx compensation.Tx) error {
		_, err := tx.ResolveExtraTaskCompensation(ctx, d.ID, "extra-1", compensation.ExtraTaskWrittenOff, now.Add(2*time.Hour))
		return err
	})
	expectSamples(t, "one written off", scrape(t, store, now.Add(2*time.Hour)), map[string]float64{
		"quittance_extra_task_compensations_open":                    1,
		"quittance_oldest_extra_task_compensation_timestamp_seconds": unix(now.Add(time.Hour)),
	})
	inTx(func(tx compensation.Tx) error {
		_, err := tx.ResolveExtraTaskCompensation(ctx, d.ID, "extra-2", compensation.ExtraTaskCompensated, now.Add(3*time.Hour))
		return err
	})
	expectSamples(t, "all resolved", scrape(t, store, now.Add(3*time.Hour)), map[string]float64{
		"quittance_extra_task_compensations_open":                    0,
		"quittance_oldest_extra_task_compensation_timestamp_seconds": 0,
	})
}

// TestCollectorUnanchoredEvents: quittance_oldest_unanchored_event_timestamp_seconds
// is the time of the oldest event no signed checkpoint covers, 0 once a
// checkpoint covers them all, and the next event's once another is
// appended — what QuittanceCheckpointsStalled watches.
func TestCollectorUnanchoredEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := pgstore.New(pgtest.PrivatePool(t))
	identity := newIdentity(t)
	cps := audit.NewCheckpoints(store, compensation.CheckpointSigner{Identity: identity}, "quittance", nil, nil)
	const metric = "quittance_oldest_unanchored_event_timestamp_seconds"
	later := epoch.Add(time.Hour)
	for _, at := range []time.Time{epoch, later} {
		svc := ledger.NewService(ledger.Config{Store: store, Clock: fixedClock{at}})
		if _, _, err := svc.PutBudget(ctx, oncall, "ops-"+at.Format("150405"), ledger.BudgetInput{Currency: "EUR", FundedMinor: 1_000}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := svc.PutBudget(ctx, oncall, "more-"+at.Format("150405"), ledger.BudgetInput{Currency: "EUR", FundedMinor: 1_000}); err != nil {
			t.Fatal(err)
		}
		expectSamples(t, "events after the latest checkpoint", scrape(t, store, later), map[string]float64{metric: unix(at)})
		if _, err := cps.Create(ctx, oncall); err != nil {
			t.Fatal(err)
		}
		expectSamples(t, "every event checkpointed", scrape(t, store, later), map[string]float64{metric: 0})
	}
}

// TestCollectorUnanchoredProbesTheFeedIndex: the scrape finds the first
// event after the latest checkpoint with one probe of the feed's index,
// the checkpoint's end its condition. As a filter, it read the whole feed
// on every scrape once checkpoints covered it, and at 30,000,000 events
// every scrape timed out (make bench).
func TestCollectorUnanchoredProbesTheFeedIndex(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := pgtest.Pool(t)
	store := pgstore.New(pool)
	svc := ledger.NewService(ledger.Config{Store: store, Clock: fixedClock{epoch}})
	if _, _, err := svc.PutBudget(ctx, oncall, "ops", ledger.BudgetInput{Currency: "EUR", FundedMinor: 1_000}); err != nil {
		t.Fatal(err)
	}
	scrape(t, store, epoch)
	statement := preparedStatement(ctx, t, pool, "MetricsWaiting")
	text := genericPlan(ctx, t, pool, statement, `now()`)
	if !strings.Contains(text, "Index Cond: (ROW(order_xid, tx_pos, pos) >") {
		t.Errorf("the first unanchored event is not found by the feed index's condition:\n%s", text)
	}
}
