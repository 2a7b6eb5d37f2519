package pgstore

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/report"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

// DefaultCollectorTimeout bounds the collector's query: a slow database makes
// a scrape report quittance_collector_up 0, never hang.
const DefaultCollectorTimeout = 5 * time.Second

// obligationCountFoldRows bounds how many ended-state deltas one scrape
// folds into their totals (migration 00032): enough to keep up with
// thousands of transitions a second at a 15 s scrape interval, few enough
// that the fold stays well inside the collector's timeout. A backlog left
// over is still counted exactly, and folded by the next scrapes.
const obligationCountFoldRows = 50_000

// obligationCountFoldLock is the advisory lock a fold takes, so that
// replicas scraped at once fold in turn and none waits on another.
const obligationCountFoldLock = "quittance:obligation-count-fold"

// Collector is a prometheus.Collector that reads the database at scrape
// time, with two queries, after folding the ended states' count deltas
// (foldObligationCounts). The first: the number of delegations per
// obligation state (the ended states' counts kept, not counted: migration
// 00032), the amount held per currency and the creation time of the oldest
// obligation per active state. The second, about waiting: when
// the obligation longest in each active state entered it, and the work
// queues (A2A outbox jobs by kind and state, the oldest claimable job, lease
// expiries, the attempts of the most-retried job, webhook deliveries
// pending and dead-lettered), the delegations whose dispatch is unknown and
// those whose agent no longer knows their task, and the extra remote tasks
// of completed delegations whose compensation is open. Every replica reports the same values, so
// dashboards combine them with max or min, never sum.
type Collector struct {
	store   *Store
	timeout time.Duration
	log     *slog.Logger
	now     func() time.Time
	errors  atomic.Uint64

	obligations *prometheus.Desc
	held        *prometheus.Desc
	oldest      *prometheus.Desc
	up          *prometheus.Desc
	errorsTotal *prometheus.Desc

	stateEntry           *prometheus.Desc
	outboxJobs           *prometheus.Desc
	outboxOldestDue      *prometheus.Desc
	outboxMaxAttempt     *prometheus.Desc
	outboxExpiries       *prometheus.Desc
	webhooks             *prometheus.Desc
	dispatchUnknown      *prometheus.Desc
	dispatchUnknownSince *prometheus.Desc
	taskNotFound         *prometheus.Desc
	taskNotFoundSince    *prometheus.Desc
	extraTasks           *prometheus.Desc
	extraTasksSince      *prometheus.Desc
	unanchoredSince      *prometheus.Desc
}

// outboxKinds are the kinds of A2A outbox job (the a2a_outbox kind check).
var outboxKinds = []ledger.OutboundKind{
	ledger.OutboundDispatch, ledger.OutboundCancel, ledger.OutboundCompensationRequest,
	ledger.OutboundObserve, ledger.OutboundMessage,
}

// Outbox job states, the state label of quittance_outbox_jobs.
var outboxJobStates = []string{"due", "lease_expired", "scheduled", "running"}

// Webhook delivery states, the state label of quittance_webhook_deliveries.
var webhookStates = []string{"pending", "dead"}

// CollectorOption configures a Collector.
type CollectorOption func(*Collector)

// WithCollectorTimeout sets how long one scrape may query the database.
func WithCollectorTimeout(d time.Duration) CollectorOption {
	return func(c *Collector) { c.timeout = d }
}

// WithCollectorLog sets where failed scrapes are logged.
func WithCollectorLog(log *slog.Logger) CollectorOption {
	return func(c *Collector) { c.log = log }
}

// WithCollectorClock sets the clock that decides which outbox jobs are due
// (the system clock by default): the one the A2A workers claim jobs by.
func WithCollectorClock(clock ledger.Clock) CollectorOption {
	return func(c *Collector) { c.now = clock.Now }
}

// NewCollector returns a Collector on s's pool.
func NewCollector(s *Store, opts ...CollectorOption) *Collector {
	c := &Collector{
		store:   s,
		timeout: DefaultCollectorTimeout,
		log:     slog.New(slog.DiscardHandler),
		now:     time.Now,
		obligations: prometheus.NewDesc("quittance_obligations",
			"Delegations per obligation state, read from the database at scrape time.", []string{"state"}, nil),
		held: prometheus.NewDesc("quittance_held_minor_units",
			"Budget held by active obligations, in integer minor units of the currency, read at scrape time.", []string{"currency"}, nil),
		oldest: prometheus.NewDesc("quittance_oldest_open_obligation_created_timestamp_seconds",
			"Creation time (Unix seconds) of the oldest obligation in each active state; 0 when there is none.", []string{"state"}, nil),
		up: prometheus.NewDesc("quittance_collector_up",
			"1 if the last scrape-time database query succeeded, else 0.", nil, nil),
		errorsTotal: prometheus.NewDesc("quittance_collector_errors_total",
			"Scrape-time database queries that failed or timed out.", nil, nil),
		stateEntry: prometheus.NewDesc("quittance_oldest_obligation_state_entry_timestamp_seconds",
			"When (Unix seconds) the obligation longest in each active state entered it; 0 when none is in it.", []string{"state"}, nil),
		outboxJobs: prometheus.NewDesc("quittance_outbox_jobs",
			"Open A2A outbox jobs by kind and state: due (claimable), lease_expired (claimable again after its worker's lease ran out), scheduled (waiting to be retried) or running (leased).",
			[]string{"kind", "state"}, nil),
		outboxOldestDue: prometheus.NewDesc("quittance_outbox_oldest_due_timestamp_seconds",
			"Since when (Unix seconds) the longest-waiting claimable A2A outbox job of each kind has been claimable; 0 when none is.", []string{"kind"}, nil),
		outboxMaxAttempt: prometheus.NewDesc("quittance_outbox_retried_job_max_attempts",
			"Attempts (claims) of the most-retried open A2A outbox job of each kind, among jobs that failed at least once or lost a lease; 0 when none.",
			[]string{"kind"}, nil),
		outboxExpiries: prometheus.NewDesc("quittance_outbox_lease_expiries_total",
			"A2A outbox jobs claimed again because the previous claim's lease ran out before the job was finished or rescheduled, read from the database.",
			[]string{"kind"}, nil),
		webhooks: prometheus.NewDesc("quittance_webhook_deliveries",
			"Webhook deliveries pending (not yet delivered, retried with backoff) or dead (dead-lettered after the last attempt, until redriven).",
			[]string{"state"}, nil),
		dispatchUnknown: prometheus.NewDesc("quittance_dispatch_unknown_delegations",
			"Delegations in the dispatch_unknown condition: a dispatch attempt after one that may have reached the remote agent was refused, so nothing proves whether a remote task exists; the hold stays.",
			nil, nil),
		dispatchUnknownSince: prometheus.NewDesc("quittance_oldest_dispatch_unknown_timestamp_seconds",
			"Since when (Unix seconds) the longest-standing dispatch_unknown delegation has been in that condition; 0 when none is.", nil, nil),
		taskNotFound: prometheus.NewDesc("quittance_task_not_found_delegations",
			"Delegations with an active hold in the task_not_found condition: the remote agent answered TaskNotFoundError for the delegation's task (it may have purged it), which proves nothing of its end or effects; the hold stays.",
			nil, nil),
		taskNotFoundSince: prometheus.NewDesc("quittance_oldest_task_not_found_timestamp_seconds",
			"Since when (Unix seconds) the longest-standing task_not_found delegation with an active hold has been in that condition; 0 when none is.", nil, nil),
		extraTasks: prometheus.NewDesc("quittance_extra_task_compensations_open",
			"Extra remote tasks of completed delegations whose compensation is required and not resolved (extra_task_compensation anomalies): the agent may have committed effects twice; no receipt has proved them reversed and on-call has not written them off.",
			nil, nil),
		extraTasksSince: prometheus.NewDesc("quittance_oldest_extra_task_compensation_timestamp_seconds",
			"Since when (Unix seconds) the oldest open extra task compensation has been required; 0 when none is.", nil, nil),
		unanchoredSince: prometheus.NewDesc("quittance_oldest_unanchored_event_timestamp_seconds",
			"The time (Unix seconds) of the oldest event no signed checkpoint covers yet (the first in the feed's order after the latest checkpoint's span); 0 when every event is covered. Old, it means the ledger signs no checkpoints: it has no key, refuses to (ledger/AUDIT.md), or fails.", nil, nil),
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.obligations
	ch <- c.held
	ch <- c.oldest
	ch <- c.up
	ch <- c.errorsTotal
	ch <- c.stateEntry
	ch <- c.outboxJobs
	ch <- c.outboxOldestDue
	ch <- c.outboxMaxAttempt
	ch <- c.outboxExpiries
	ch <- c.webhooks
	ch <- c.dispatchUnknown
	ch <- c.dispatchUnknownSince
	ch <- c.taskNotFound
	ch <- c.taskNotFoundSince
	ch <- c.extraTasks
	ch <- c.extraTasksSince
	ch <- c.unanchoredSince
}

// Collect implements prometheus.Collector: it folds the count deltas, runs
// the queries and reports their results, or quittance_collector_up 0 and no
// database gauges when one of them failed. A failed fold fails the scrape
// although the counts would still be exact: deltas that are never folded
// make every later snapshot slower, and a failing scrape is alerted on.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	err := c.store.foldObligationCounts(ctx, obligationCountFoldRows)
	var rows []dbsqlc.MetricsSnapshotRow
	if err == nil {
		rows, err = c.store.reader.q.MetricsSnapshot(ctx)
	}
	var waiting []dbsqlc.MetricsWaitingRow
	if err == nil {
		waiting, err = c.store.reader.q.MetricsWaiting(ctx, c.now())
	}
	if err != nil {
		c.errors.Add(1)
		c.log.Warn("metrics collector query failed", slog.Any("error", err))
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		ch <- prometheus.MustNewConstMetric(c.errorsTotal, prometheus.CounterValue, float64(c.errors.Load()))
		return
	}
	c.collectWaiting(ch, waiting)
	counts := map[string]float64{}
	oldest := map[string]float64{}
	for _, s := range ledger.ObligationStates {
		counts[string(s)] = 0
	}
	for _, s := range report.ActiveObligationStates {
		oldest[string(s)] = 0
	}
	for _, row := range rows {
		switch row.Metric {
		case "obligations":
			counts[row.Label] = row.Value
		case "held":
			ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, row.Value, row.Label)
		case "oldest":
			oldest[row.Label] = row.Value
		}
	}
	for state, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.obligations, prometheus.GaugeValue, n, state)
	}
	for state, t := range oldest {
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, t, state)
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(c.errorsTotal, prometheus.CounterValue, float64(c.errors.Load()))
}

// collectWaiting reports the rows of MetricsWaiting, with a zero for every
// known label value the query returned no row for, so that every series
// exists from the first scrape.
func (c *Collector) collectWaiting(ch chan<- prometheus.Metric, rows []dbsqlc.MetricsWaitingRow) {
	entries := map[string]float64{}
	for _, s := range report.ActiveObligationStates {
		entries[string(s)] = 0
	}
	type kindState struct{ kind, state string }
	jobs := map[kindState]float64{}
	oldestDue, maxAttempts, expiries := map[string]float64{}, map[string]float64{}, map[string]float64{}
	for _, k := range outboxKinds {
		for _, s := range outboxJobStates {
			jobs[kindState{string(k), s}] = 0
		}
		oldestDue[string(k)], maxAttempts[string(k)], expiries[string(k)] = 0, 0, 0
	}
	webhooks := map[string]float64{}
	for _, s := range webhookStates {
		webhooks[s] = 0
	}
	var dispatchUnknown, dispatchUnknownSince, taskNotFound, taskNotFoundSince, extraTasks, extraTasksSince, unanchoredSince float64
	for _, row := range rows {
		switch row.Metric {
		case "state_entry":
			entries[row.Label] = row.Value
		case "outbox_jobs":
			jobs[kindState{row.Label, row.State}] = row.Value
		case "outbox_oldest_due":
			oldestDue[row.Label] = row.Value
		case "outbox_retried_max_attempts":
			maxAttempts[row.Label] = row.Value
		case "outbox_lease_expiries":
			expiries[row.Label] = row.Value
		case "webhook_deliveries":
			webhooks[row.Label] = row.Value
		case "dispatch_unknown":
			dispatchUnknown = row.Value
		case "dispatch_unknown_since":
			dispatchUnknownSince = row.Value
		case "task_not_found":
			taskNotFound = row.Value
		case "task_not_found_since":
			taskNotFoundSince = row.Value
		case "extra_task_compensation":
			extraTasks = row.Value
		case "extra_task_compensation_since":
			extraTasksSince = row.Value
		case "unanchored_since":
			unanchoredSince = row.Value
		}
	}
	for state, t := range entries {
		ch <- prometheus.MustNewConstMetric(c.stateEntry, prometheus.GaugeValue, t, state)
	}
	for ks, n := range jobs {
		ch <- prometheus.MustNewConstMetric(c.outboxJobs, prometheus.GaugeValue, n, ks.kind, ks.state)
	}
	for kind, t := range oldestDue {
		ch <- prometheus.MustNewConstMetric(c.outboxOldestDue, prometheus.GaugeValue, t, kind)
	}
	for kind, n := range maxAttempts {
		ch <- prometheus.MustNewConstMetric(c.outboxMaxAttempt, prometheus.GaugeValue, n, kind)
	}
	for kind, n := range expiries {
		ch <- prometheus.MustNewConstMetric(c.outboxExpiries, prometheus.CounterValue, n, kind)
	}
	for state, n := range webhooks {
		ch <- prometheus.MustNewConstMetric(c.webhooks, prometheus.GaugeValue, n, state)
	}
	ch <- prometheus.MustNewConstMetric(c.dispatchUnknown, prometheus.GaugeValue, dispatchUnknown)
	ch <- prometheus.MustNewConstMetric(c.dispatchUnknownSince, prometheus.GaugeValue, dispatchUnknownSince)
	ch <- prometheus.MustNewConstMetric(c.taskNotFound, prometheus.GaugeValue, taskNotFound)
	ch <- prometheus.MustNewConstMetric(c.taskNotFoundSince, prometheus.GaugeValue, taskNotFoundSince)
	ch <- prometheus.MustNewConstMetric(c.extraTasks, prometheus.GaugeValue, extraTasks)
	ch <- prometheus.MustNewConstMetric(c.extraTasksSince, prometheus.GaugeValue, extraTasksSince)
	ch <- prometheus.MustNewConstMetric(c.unanchoredSince, prometheus.GaugeValue, unanchoredSince)
}

// foldObligationCounts folds up to maxRows of the oldest ended-state count
// deltas into their totals (ObligationCountsFold), unless another replica is
// folding: then it returns at once, and that fold or the next one does it.
// The counts MetricsSnapshot reports are the same before and after a fold.
func (s *Store) foldObligationCounts(ctx context.Context, maxRows int32) error {
	// A transaction of its own (inTxAlone): its lock is tried, and must
	// end with the fold, not with a flush of other operations.
	return s.inTxAlone(ctx, func(t *tx) error {
		ok, err := t.q.AdvisoryXactLockTry(ctx, obligationCountFoldLock)
		if err != nil {
			return fmt.Errorf("lock obligation count fold: %w", err)
		}
		if !ok {
			return nil
		}
		if _, err := t.q.ObligationCountsFold(ctx, maxRows); err != nil {
			return fmt.Errorf("fold obligation counts: %w", err)
		}
		return nil
	})
}
