package telemetry_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quittance/quittance/cmd/quittance/internal/telemetry"
)

// TestReadMetrics: every fallback reason has its series from start-up, at
// zero, so the alert's increase() counts the first; fallbacks and the lag
// are recorded as they come, and the metrics pass the linter.
func TestReadMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := telemetry.NewReadMetrics(reg, []string{"unavailable", "error"})
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP quittance_read_fallbacks_total Reads meant for the standby (QUITTANCE_READ_DATABASE_URL) served by the primary instead, by reason: unavailable (the standby could not be reached) or error (it answered with an error).
# TYPE quittance_read_fallbacks_total counter
quittance_read_fallbacks_total{reason="error"} 0
quittance_read_fallbacks_total{reason="unavailable"} 0
`), "quittance_read_fallbacks_total"); err != nil {
		t.Error(err)
	}
	m.Fallback("unavailable")
	m.Fallback("unavailable")
	m.Lag(1500 * time.Millisecond)
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP quittance_read_replay_lag_seconds The standby's replay lag when a read last asked it: how old the data of answers served from it is (0 when caught up, and without a standby).
# TYPE quittance_read_replay_lag_seconds gauge
quittance_read_replay_lag_seconds 1.5
# HELP quittance_read_fallbacks_total Reads meant for the standby (QUITTANCE_READ_DATABASE_URL) served by the primary instead, by reason: unavailable (the standby could not be reached) or error (it answered with an error).
# TYPE quittance_read_fallbacks_total counter
quittance_read_fallbacks_total{reason="error"} 0
quittance_read_fallbacks_total{reason="unavailable"} 2
`), "quittance_read_fallbacks_total", "quittance_read_replay_lag_seconds"); err != nil {
		t.Error(err)
	}
}
