package pgstore

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quittance/quittance/ledger"
)

// DefaultCollectorTimeout bounds the collector's query: a slow database makes
// a scrape report quittance_collector_up 0, never hang.
const DefaultCollectorTimeout = 5 * time.Second

// Collector is a prometheus.Collector that reads the database at scrape
// time, with one query: the number of delegations per obligation state,
// the amount held per currency and the creation time of the oldest
// obligation per active state. Every replica reports the same values, so
// dashboards combine them with max or min, never sum.
type Collector struct {
	store   *Store
	timeout time.Duration
	log     *slog.Logger
	errors  atomic.Uint64

	obligations *prometheus.Desc
	held        *prometheus.Desc
	oldest      *prometheus.Desc
	up          *prometheus.Desc
	errorsTotal *prometheus.Desc
}

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

// NewCollector returns a Collector on s's pool.
func NewCollector(s *Store, opts ...CollectorOption) *Collector {
	c := &Collector{
		store:   s,
		timeout: DefaultCollectorTimeout,
		log:     slog.New(slog.DiscardHandler),
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
}

// Collect implements prometheus.Collector: it runs the query and reports
// its results, or quittance_collector_up 0 and no database gauges when the
// query failed.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	rows, err := c.store.reader.q.MetricsSnapshot(ctx)
	if err != nil {
		c.errors.Add(1)
		c.log.Warn("metrics collector query failed", slog.Any("error", err))
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		ch <- prometheus.MustNewConstMetric(c.errorsTotal, prometheus.CounterValue, float64(c.errors.Load()))
		return
	}
	counts := map[string]float64{}
	oldest := map[string]float64{}
	for _, s := range ledger.ObligationStates {
		counts[string(s)] = 0
	}
	for _, s := range ledger.ActiveObligationStates {
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
