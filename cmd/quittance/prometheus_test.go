package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quittance/quittance/dashboards"
	"github.com/quittance/quittance/dashboards/promtest"
)

// rulesFile is the project's alerting rules, which Prometheus loads as they are.
const rulesFile = "../../dashboards/alerts/quittance.rules.yaml"

// promJob is the scrape job of the test: deliberately not "quittance", so
// that any rule or panel that depends on the job's name shows.
const promJob = "ledger-under-test"

// promEnv is the service, a Prometheus scraping it every second with the
// project's rules, and the dashboards' queries.
type promEnv struct {
	*cliEnv
	prom    *promtest.Server
	queries []dashboards.Query
}

// expand replaces the Grafana variables of a panel query the way Grafana
// would for a five-minute view of this test's single job.
func expand(expr string) string {
	return strings.NewReplacer("$__rate_interval", "5m", "$__range", "5m", "${job}", promJob, "$job", promJob).Replace(expr)
}

// panel returns the expanded query refID of the named panel.
func (p *promEnv) panel(t *testing.T, dashboard, title, refID string) string {
	t.Helper()
	for _, q := range p.queries {
		if q.Dashboard == dashboard && q.Panel == title && q.RefID == refID {
			return expand(q.Expr)
		}
	}
	t.Fatalf("no query %s in panel %q of %s", refID, title, dashboard)
	return ""
}

// query evaluates expr now.
func (p *promEnv) query(t *testing.T, expr string) []promtest.Sample {
	t.Helper()
	samples, err := p.prom.Query(context.Background(), expr)
	if err != nil {
		t.Fatal(err)
	}
	return samples
}

// eventually retries check every 250ms until it returns "" or within runs out,
// and fails with its last complaint.
func eventually(t *testing.T, within time.Duration, what string, check func() string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		why := check()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %s", what, within, why)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// one returns the value of a query that must return exactly one sample.
func one(samples []promtest.Sample) (float64, string) {
	if len(samples) != 1 {
		return 0, fmt.Sprintf("%d samples: %v", len(samples), samples)
	}
	return samples[0].Value, ""
}

// near says whether got is want, up to the extrapolation increase() and
// rate() apply at the end of their window: the counters start at zero
// within the window, so nothing is extrapolated before the first sample,
// and at most one scrape interval after the last one — a few percent of
// this test's length, more on a loaded machine. A count therefore reads
// want or a little more, never less, and rounds to want; a ratio of two
// counts of the same target is extrapolated alike and reads want.
func near(got, want float64) bool {
	if want != math.Trunc(want) {
		return math.Abs(got-want) < 0.01
	}
	return got >= want-1e-9 && math.Round(got) == want && got < want+0.3
}

// TestPrometheusAlertsAndDashboards runs a real Prometheus against the
// service with the project's rule files, and checks what on-call and
// finance are told: on a fresh replica every panel shows a number (or says
// what its emptiness means); an obligation unconfirmed longer than the
// grace makes QuittanceObligationUnconfirmed pending with its runbook; an
// escalation makes QuittanceEscalations pending; after one escalation and
// two write-offs the dashboards' main expressions show one and two; and
// after the runbook's write-offs both alerts clear.
func TestPrometheusAlertsAndDashboards(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Prometheus scrapes the metrics listener, as the deploy files set it up.
	e := startService(t, "QUITTANCE_SWEEP_INTERVAL=1s", "QUITTANCE_UNCONFIRMED_ALERT_GRACE=2s", "QUITTANCE_RATE_LIMIT_RPS=0",
		"QUITTANCE_METRICS_ADDR=127.0.0.1:0")
	u, err := url.Parse(e.metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	ruleText, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := filepath.Abs(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	queries, err := dashboards.PanelQueries()
	if err != nil {
		t.Fatal(err)
	}
	p := &promEnv{cliEnv: e, queries: queries, prom: promtest.Start(t, promtest.Config{
		Job: promJob, Targets: []string{u.Host}, RuleFiles: []string{rules}, Interval: time.Second,
	})}

	// The target is up and scraped a few times before anything happens,
	// so every counter is seen at zero first. Every rule loaded and
	// evaluates. Only successful scrapes count (on a loaded machine a
	// scrape may time out), and the last one must have read the database.
	eventually(t, 60*time.Second, "three scrapes", func() string {
		v, why := one(p.query(t, `sum_over_time(up{job="`+promJob+`"}[1m]) >= 3 and on () up{job="`+promJob+`"} == 1`+
			` and on () quittance_collector_up{job="`+promJob+`"} == 1`))
		if why != "" {
			return why
		}
		return map[bool]string{true: "", false: fmt.Sprint(v)}[v >= 3]
	})
	eventually(t, 10*time.Second, "rules evaluated", func() string {
		rs, err := p.prom.Rules(ctx)
		if err != nil {
			return err.Error()
		}
		if want := strings.Count(string(ruleText), "\n      - alert: "); len(rs) != want {
			return fmt.Sprintf("%d rules loaded, want the file's %d", len(rs), want)
		}
		for _, r := range rs {
			if r.Health != "ok" {
				return fmt.Sprintf("rule %s: health %q %s", r.Name, r.Health, r.LastError)
			}
		}
		return ""
	})

	// A fresh replica: every panel has a value, or says what none means. A
	// panel whose empty text says the target or collector is down has a
	// value while both are up, so that text never shows wrongly. Asked
	// until a scrape that succeeded answers them all: on a loaded machine
	// one scrape may time out, and its series are then stale for a moment.
	eventually(t, 30*time.Second, "every panel answered while the target and collector are up", func() string {
		if _, why := one(p.query(t, `up{job="`+promJob+`"} == 1 and on () quittance_collector_up{job="`+promJob+`"} == 1`)); why != "" {
			return "target or collector not up: " + why
		}
		var wrong []string
		for _, q := range queries {
			samples := p.query(t, expand(q.Expr))
			switch {
			case len(samples) == 0 && q.NoValue == "":
				wrong = append(wrong, fmt.Sprintf("%s, panel %q (%s) shows No data on a fresh replica: %s", q.Dashboard, q.Panel, q.RefID, q.Expr))
			case len(samples) == 0 && strings.Contains(q.NoValue, "down"):
				wrong = append(wrong, fmt.Sprintf("%s, panel %q (%s) says %q with the target and collector up: %s", q.Dashboard, q.Panel, q.RefID, q.NoValue, q.Expr))
			}
		}
		return strings.Join(wrong, "\n")
	})
	for _, c := range []struct{ dashboard, panel, ref string }{
		{"quittance-oncall", "Escalations", "B"},
		{"quittance-finance", "Written-off obligations per hour", "A"},
	} {
		if v, why := one(p.query(t, p.panel(t, c.dashboard, c.panel, c.ref))); why != "" || v != 0 {
			t.Errorf("%q on a fresh replica: %v %s", c.panel, v, why)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// The fixtures: two orgs, a budget, a task class whose compensation
	// timeout is one second, an orchestrator.
	for _, org := range []string{"supplier", "rogue"} {
		if s := e.api(t, http.MethodPut, "/admin/v1/orgs/"+org, e.oncall, map[string]any{"name": org}, nil); s >= 300 {
			t.Fatalf("put org %s: %d", org, s)
		}
	}
	e.putBudget(t, "ops", 1_000_000, "acme")
	// A task class's timeout is a privileged change: the second on-call
	// principal approves it.
	out, errOut, code := e.cli(t, e.oncall, "task-classes", "set", "quick", "--compensation-timeout", "1s")
	if code != 0 {
		t.Fatalf("task-classes set: %s", errOut)
	}
	var set struct {
		PendingChange struct{ ID string } `json:"pending_change"`
	}
	if err := json.Unmarshal([]byte(out), &set); err != nil || set.PendingChange.ID == "" {
		t.Fatalf("task-classes set: want a pending change, got %q (%v)", out, err)
	}
	if _, errOut, code := e.cli(t, e.oncall2, "changes", "approve", set.PendingChange.ID); code != 0 {
		t.Fatalf("changes approve: %s", errOut)
	}
	orch := e.newToken(t, "--role", "orchestrator", "--tenant", "acme", "--name", "orch")
	create := func(op, org, class string) string {
		t.Helper()
		var d struct{ ID string }
		if s := e.api(t, http.MethodPost, "/v1/delegations", orch, map[string]any{
			"business_operation_id": op, "org_id": org, "task_class": class, "budget_id": "ops",
			"hold": map[string]any{"amount_minor": 1000, "currency": "EUR"}, "remote": map[string]any{"task_id": "task-" + op},
		}, &d); s != http.StatusCreated {
			t.Fatalf("create %s: %d", op, s)
		}
		return d.ID
	}
	report := func(id, state string) {
		t.Helper()
		if s := e.api(t, http.MethodPost, "/v1/delegations/"+id+"/task-status", orch, map[string]any{"state": state}, nil); s != http.StatusOK {
			t.Fatalf("report %s: %d", state, s)
		}
	}
	stateOf := func(id string) string {
		var d struct {
			ObligationState string `json:"obligation_state"`
		}
		e.api(t, http.MethodGet, "/v1/delegations/"+id, e.oncall, nil, &d)
		return d.ObligationState
	}

	// One obligation goes unconfirmed through the short timeout and the
	// sweep; one is escalated by revoking its org; one settles.
	unconfirmed := create("unconfirmed", "supplier", "quick")
	report(unconfirmed, "canceled")
	escalated := create("escalated", "rogue", "procurement")
	report(escalated, "canceled")
	report(create("settled", "supplier", "procurement"), "completed")
	eventually(t, 15*time.Second, "the sweep", func() string {
		if s := stateOf(unconfirmed); s != "compensation_unconfirmed" {
			return s
		}
		return ""
	})
	if _, errOut, code := e.cli(t, e.oncall, "orgs", "revoke", "rogue", "--reason", "key compromise"); code != 0 {
		t.Fatalf("orgs revoke: %s", errOut)
	}
	if s := stateOf(escalated); s != "escalated" {
		t.Fatalf("after the revocation: %s", s)
	}

	// The alerts: pending (their for: is a minute), with their runbooks.
	active := func(name string) (promtest.Alert, bool) {
		alerts, err := p.prom.Alerts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range alerts {
			if a.Labels["alertname"] == name {
				return a, true
			}
		}
		return promtest.Alert{}, false
	}
	for _, name := range []string{"QuittanceObligationUnconfirmed", "QuittanceEscalations"} {
		eventually(t, 20*time.Second, name, func() string {
			a, ok := active(name)
			switch {
			case !ok:
				return "not active"
			case a.State != "pending" && a.State != "firing":
				return a.State
			case a.Labels["job"] != promJob:
				return fmt.Sprintf("labels %v", a.Labels)
			case a.Annotations["runbook_url"] != "https://github.com/quittance/quittance/blob/main/dashboards/runbooks/"+name+".md":
				return "runbook_url " + a.Annotations["runbook_url"]
			case strings.Contains(a.Annotations["summary"], "{{") || a.Annotations["description"] == "":
				return fmt.Sprintf("annotations %v", a.Annotations)
			}
			return ""
		})
	}
	for _, name := range []string{"QuittanceNoScrape", "QuittanceCollectorFailing", "QuittanceOutboxStuck", "QuittanceOutboxJobFailing", "QuittanceWebhookDeadLetters"} {
		if a, ok := active(name); ok {
			t.Errorf("%s is %s: %v", name, a.State, a.Annotations)
		}
	}

	// Write both off as the runbooks say: one escalation, two write-offs.
	for _, id := range []string{unconfirmed, escalated} {
		if _, errOut, code := e.cli(t, e.oncall, "write-off", id, "--reason", "remote org confirmed PO voided by phone", "--reference", "INC-1234"); code != 0 {
			t.Fatalf("write-off %s: %s", id, errOut)
		}
	}
	// The gauge is read from the database at the scrape, the counters are
	// counted after each commit: wait for a scrape that has seen both.
	eventually(t, 10*time.Second, "the write-offs scraped", func() string {
		for _, q := range []string{
			`max(quittance_obligations{state="written_off"})`,
			`sum(quittance_write_offs_total{status="executed"})`,
			`sum(quittance_transitions_total{to="written_off"})`,
		} {
			if v, why := one(p.query(t, q)); why != "" || v != 2 {
				return fmt.Sprint(q, ": ", v, why)
			}
		}
		return ""
	})

	// The dashboards' numbers.
	for _, c := range []struct {
		dashboard, panel, ref string
		want                  float64
	}{
		{"quittance-oncall", "Escalations", "B", 1},                                          // new escalations
		{"quittance-oncall", "Escalated obligations", "A", 0},                                // written off since
		{"quittance-oncall", "Compensation unconfirmed", "A", 0},                             // written off since
		{"quittance-finance", "Written-off obligations per hour", "A", 2},                    // two write-offs
		{"quittance-finance", "Written-off share of closed obligations (24h)", "A", 2.0 / 3}, // of three closed
	} {
		v, why := one(p.query(t, p.panel(t, c.dashboard, c.panel, c.ref)))
		if why != "" || !near(v, c.want) {
			t.Errorf("%s %q: %v %s, want %v", c.dashboard, c.panel, v, why, c.want)
		}
	}
	transitions := map[string]float64{}
	for _, s := range p.query(t, p.panel(t, "quittance-oncall", "Transitions", "A")) {
		transitions[s.Labels["from"]+"→"+s.Labels["to"]] = s.Value * 300 // per-second rate over 5m
	}
	for pair, want := range map[string]float64{
		"held→revocation_pending_compensation":                     2,
		"held→settled":                                             1,
		"revocation_pending_compensation→compensation_unconfirmed": 1,
		"revocation_pending_compensation→escalated":                1,
		"compensation_unconfirmed→written_off":                     1,
		"escalated→written_off":                                    1,
		"held→released":                                            0,
	} {
		if got, ok := transitions[pair]; !ok || !near(got, want) {
			t.Errorf("Transitions %s: %v (present %v), want %v", pair, got, ok, want)
		}
	}
	statuses := map[string]float64{}
	for _, s := range p.query(t, p.panel(t, "quittance-finance", "Write-offs by status per hour", "A")) {
		statuses[s.Labels["status"]] = s.Value
	}
	if !near(statuses["executed"], 2) || statuses["pending_approval"] != 0 {
		t.Errorf("Write-offs by status per hour: %v", statuses)
	}

	// Both alerts clear.
	for _, name := range []string{"QuittanceObligationUnconfirmed", "QuittanceEscalations"} {
		eventually(t, 15*time.Second, name+" clears", func() string {
			if a, ok := active(name); ok {
				return a.State
			}
			return ""
		})
	}
	if s := p.query(t, p.panel(t, "quittance-oncall", "Longest in compensation_unconfirmed", "A")); len(s) != 0 {
		t.Errorf("the time-in-state panel still shows %v", s)
	}
}
