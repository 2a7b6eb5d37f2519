package telemetry

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ReadMetrics are the metrics of reads from the standby (ledger/DESIGN.md
// §7): the reads that fell back to the primary and the standby's replay
// lag last measured.
type ReadMetrics struct {
	fallbacks *prometheus.CounterVec
	lag       prometheus.Gauge
}

// NewReadMetrics creates the read metrics on reg, the fallbacks of every
// reason in reasons at zero.
func NewReadMetrics(reg prometheus.Registerer, reasons []string) *ReadMetrics {
	m := &ReadMetrics{
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quittance_read_fallbacks_total",
			Help: "Reads meant for the standby (QUITTANCE_READ_DATABASE_URL) served by the primary instead, by reason: unavailable (the standby could not be reached) or error (it answered with an error).",
		}, []string{"reason"}),
		lag: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "quittance_read_replay_lag_seconds",
			Help: "The standby's replay lag when a read last asked it: how old the data of answers served from it is (0 when caught up, and without a standby).",
		}),
	}
	reg.MustRegister(m.fallbacks, m.lag)
	for _, r := range reasons {
		m.fallbacks.WithLabelValues(r)
	}
	return m
}

// Fallback counts a read the primary served for the standby.
func (m *ReadMetrics) Fallback(reason string) { m.fallbacks.WithLabelValues(reason).Inc() }

// Lag records the standby's replay lag.
func (m *ReadMetrics) Lag(d time.Duration) { m.lag.Set(d.Seconds()) }
