package dashboards

import (
	"encoding/json"
	"io/fs"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// knownMetrics are the metric names the service documents. ReferencedMetrics must stay
// inside this set; a later test compares it with the service's real registry.
var knownMetrics = []string{
	"quittance_a2a_request_duration_seconds",
	"quittance_collector_errors_total",
	"quittance_collector_up",
	"quittance_compensation_requests_total",
	"quittance_evidence_total",
	"quittance_held_minor_units",
	"quittance_http_request_duration_seconds",
	"quittance_obligations",
	"quittance_oldest_obligation_state_entry_timestamp_seconds",
	"quittance_oldest_open_obligation_created_timestamp_seconds",
	"quittance_outbox_jobs",
	"quittance_outbox_lease_expiries_total",
	"quittance_outbox_oldest_due_timestamp_seconds",
	"quittance_outbox_retried_job_max_attempts",
	"quittance_transitions_total",
	"quittance_unconfirmed_alert_grace_seconds",
	"quittance_webhook_deliveries",
	"quittance_dispatch_unknown_delegations",
	"quittance_oldest_dispatch_unknown_timestamp_seconds",
	"quittance_task_not_found_delegations",
	"quittance_oldest_task_not_found_timestamp_seconds",
	"quittance_extra_task_compensations_open",
	"quittance_oldest_unanchored_event_timestamp_seconds",
	"quittance_checkpoint_interval_seconds",
	"quittance_oldest_extra_task_compensation_timestamp_seconds",
	"quittance_write_offs_total",
	"quittance_org_jwks_fetches_total",
	"quittance_event_streams_open",
	"quittance_event_streams_refused_total",
	"quittance_event_stream_reads_total",
	"quittance_background_panics_total",
	"quittance_read_fallbacks_total",
	"quittance_read_replay_lag_seconds",
}

// provisionedDatasourceUIDs returns the uids of the datasources in the provisioning file.
func provisionedDatasourceUIDs(t *testing.T) map[string]bool {
	t.Helper()
	b, err := files.ReadFile(datasourcePath)
	if err != nil {
		t.Fatal(err)
	}
	var prov struct {
		APIVersion  int `yaml:"apiVersion"`
		Datasources []struct {
			Name string `yaml:"name"`
			UID  string `yaml:"uid"`
			Type string `yaml:"type"`
			URL  string `yaml:"url"`
		} `yaml:"datasources"`
	}
	if err := yaml.Unmarshal(b, &prov); err != nil {
		t.Fatalf("parse %s: %v", datasourcePath, err)
	}
	if prov.APIVersion != 1 {
		t.Errorf("%s: apiVersion = %d, want 1", datasourcePath, prov.APIVersion)
	}
	uids := map[string]bool{}
	for _, ds := range prov.Datasources {
		if ds.UID == "" || ds.Type != "prometheus" || ds.URL == "" {
			t.Errorf("%s: datasource %q needs a uid, type prometheus and a url", datasourcePath, ds.Name)
		}
		uids[ds.UID] = true
	}
	if len(uids) == 0 {
		t.Fatalf("%s: no datasources", datasourcePath)
	}
	return uids
}

// dashboard is the part of a Grafana dashboard the tests check.
type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
}

// panel is the part of a Grafana panel the tests check.
type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	Targets    []struct {
		RefID      string      `json:"refId"`
		Expr       string      `json:"expr"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

// datasource is a Grafana datasource reference.
type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// flatten returns the panels of a dashboard, rows' nested panels included.
func flatten(panels []panel) []panel {
	var out []panel
	for _, p := range panels {
		out = append(out, p)
		out = append(out, flatten(p.Panels)...)
	}
	return out
}

func TestDashboards(t *testing.T) {
	uids := provisionedDatasourceUIDs(t)
	names, err := fs.Glob(files, dashboardGlob)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"grafana/quittance-oncall.json", "grafana/quittance-finance.json"} {
		if !slices.Contains(names, want) {
			t.Errorf("dashboard %s is missing", want)
		}
	}

	dashboardUIDs := map[string]string{}
	for _, name := range names {
		t.Run(path.Base(name), func(t *testing.T) {
			b, err := files.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			if !json.Valid(b) {
				t.Fatal("not valid JSON")
			}
			var d dashboard
			if err := json.Unmarshal(b, &d); err != nil {
				t.Fatal(err)
			}
			if d.UID == "" || d.Title == "" || d.SchemaVersion == 0 {
				t.Errorf("uid %q, title %q, schemaVersion %d: all are required", d.UID, d.Title, d.SchemaVersion)
			}
			if other, ok := dashboardUIDs[d.UID]; ok {
				t.Errorf("uid %q is also used by %s", d.UID, other)
			}
			dashboardUIDs[d.UID] = name

			panels := flatten(d.Panels)
			if len(panels) == 0 {
				t.Fatal("no panels")
			}
			ids := map[int]string{}
			for _, p := range panels {
				if p.ID <= 0 {
					t.Errorf("panel %q has no id", p.Title)
				}
				if other, ok := ids[p.ID]; ok {
					t.Errorf("panel id %d is used by %q and %q", p.ID, other, p.Title)
				}
				ids[p.ID] = p.Title
				if p.Type == "row" {
					continue
				}
				if p.Datasource == nil || !uids[p.Datasource.UID] {
					t.Errorf("panel %q: datasource %+v is not a provisioned uid %v", p.Title, p.Datasource, uids)
				}
				if len(p.Targets) == 0 {
					t.Errorf("panel %q has no queries", p.Title)
				}
				refIDs := map[string]bool{}
				for _, tg := range p.Targets {
					if tg.Datasource == nil || !uids[tg.Datasource.UID] {
						t.Errorf("panel %q query %s: datasource %+v is not a provisioned uid", p.Title, tg.RefID, tg.Datasource)
					}
					if strings.TrimSpace(tg.Expr) == "" || tg.RefID == "" || refIDs[tg.RefID] {
						t.Errorf("panel %q: query %q needs an expr and a unique refId", p.Title, tg.RefID)
					}
					refIDs[tg.RefID] = true
				}
			}
		})
	}
}

// collectorSeries are the metrics whose series the scrape-time collector
// always exports while quittance_collector_up is 1 (zeros on an empty
// database; TestCollectorFreshDatabase in sql/pgstore), and none of them
// while it is 0. quittance_held_minor_units is not one: it exists per
// currency with a budget.
var collectorSeries = []string{
	"quittance_obligations",
	"quittance_oldest_open_obligation_created_timestamp_seconds",
	"quittance_oldest_obligation_state_entry_timestamp_seconds",
	"quittance_outbox_jobs",
	"quittance_outbox_oldest_due_timestamp_seconds",
	"quittance_outbox_retried_job_max_attempts",
	"quittance_outbox_lease_expiries_total",
	"quittance_webhook_deliveries",
	"quittance_dispatch_unknown_delegations",
	"quittance_oldest_dispatch_unknown_timestamp_seconds",
}

// processSeries are the metrics whose series exist in every scrape of a
// Quittance target from start-up (TestKnownSeriesFromStartUp in
// cmd/quittance/internal/telemetry, and the collector's own health).
// quittance_http_request_duration_seconds is not one: a route's series
// appear with its first request.
var processSeries = []string{
	"quittance_collector_up",
	"quittance_collector_errors_total",
	"quittance_transitions_total",
	"quittance_evidence_total",
	"quittance_compensation_requests_total",
	"quittance_write_offs_total",
	"quittance_org_jwks_fetches_total",
	"quittance_event_streams_open",
	"quittance_event_streams_refused_total",
	"quittance_event_stream_reads_total",
	"quittance_background_panics_total",
	"quittance_a2a_request_duration_seconds",
	"quittance_unconfirmed_alert_grace_seconds",
	"quittance_checkpoint_interval_seconds",
	"quittance_read_fallbacks_total",
	"quittance_read_replay_lag_seconds",
}

// comparison finds a filtering comparison in a PromQL expression whose
// label matchers were removed (`x > 0` drops series, so an empty answer
// can mean "none").
var comparison = regexp.MustCompile(`[<>]|==|!=`)

// labelMatchers are the {…} of an expression.
var labelMatchers = regexp.MustCompile(`\{[^}]*\}`)

// emptyMeans says what an empty answer of a panel whose queries are exprs
// can only mean: "target" when every query reads series that exist in
// every scrape, "collector" when some read the collector's series, and ""
// when an empty answer can also mean that nothing happened.
func emptyMeans(exprs []string) string {
	means := "target"
	for _, e := range exprs {
		if comparison.MatchString(labelMatchers.ReplaceAllString(e, "")) {
			return ""
		}
		names := metricNames(e)
		if len(names) == 0 {
			return ""
		}
		for _, name := range names {
			switch {
			case slices.Contains(collectorSeries, name):
				means = "collector"
			case !slices.Contains(processSeries, name):
				return ""
			}
		}
	}
	return means
}

// TestDashboardsNoValueTexts: a panel's noValue text says what an empty
// answer means. "No data" says nothing; and on a panel whose series always
// exist while the target is scraped (and its collector is up) an empty
// answer means exactly that one of them is down, so the text must say so,
// never "no calls yet".
func TestDashboardsNoValueTexts(t *testing.T) {
	qs, err := PanelQueries()
	if err != nil {
		t.Fatal(err)
	}
	type key struct{ dashboard, panel string }
	exprs := map[key][]string{}
	noValue := map[key]string{}
	var order []key
	for _, q := range qs {
		k := key{q.Dashboard, q.Panel}
		if _, ok := exprs[k]; !ok {
			order = append(order, k)
		}
		exprs[k] = append(exprs[k], q.Expr)
		noValue[k] = q.NoValue
	}
	checked := 0
	for _, k := range order {
		text := strings.ToLower(noValue[k])
		if text == "" {
			continue
		}
		if strings.Contains(text, "no data") {
			t.Errorf("%s, panel %q: noValue %q says no more than Grafana's No data", k.dashboard, k.panel, noValue[k])
		}
		switch means := emptyMeans(exprs[k]); means {
		case "":
		case "collector":
			checked++
			if !strings.Contains(text, "collector") || !strings.Contains(text, "down") {
				t.Errorf("%s, panel %q: noValue %q, but its series exist while the collector is up: say the target or collector is down", k.dashboard, k.panel, noValue[k])
			}
		default:
			checked++
			if !strings.Contains(text, means) || !strings.Contains(text, "down") {
				t.Errorf("%s, panel %q: noValue %q, but its series exist in every scrape: say the target is down", k.dashboard, k.panel, noValue[k])
			}
		}
	}
	if checked < 5 {
		t.Errorf("only %d panels with always-present series and a noValue: the classification is broken", checked)
	}
	for _, tc := range []struct {
		exprs []string
		want  string
	}{
		{[]string{`max by (kind, state) (quittance_outbox_jobs)`}, "collector"},
		{[]string{`sum by (method, outcome) (rate(quittance_a2a_request_duration_seconds_count[$__rate_interval]))`}, "target"},
		{[]string{`time() - min by (kind) (quittance_outbox_oldest_due_timestamp_seconds > 0)`}, ""},
		{[]string{`max by (currency) (quittance_held_minor_units)`}, ""},
		{[]string{`min by (instance) (quittance_collector_up)`, `up{job=~"$job"}`}, ""},
		{[]string{`sum(rate(quittance_http_request_duration_seconds_count{route!="/metrics"}[5m]))`}, ""},
		{[]string{`max(quittance_obligations{state!="held"})`}, "collector"},
	} {
		if got := emptyMeans(tc.exprs); got != tc.want {
			t.Errorf("emptyMeans(%q) = %q, want %q", tc.exprs, got, tc.want)
		}
	}
}

func TestRulesAnnotationsAndRunbooks(t *testing.T) {
	b, err := files.ReadFile(rulesPath)
	if err != nil {
		t.Fatal(err)
	}
	var rules ruleFile
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	alerts := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts[r.Alert] = true
			for _, key := range []string{"summary", "description", "runbook_url"} {
				if strings.TrimSpace(r.Annotations[key]) == "" {
					t.Errorf("alert %s has no %s annotation", r.Alert, key)
				}
			}
			if r.Labels["severity"] == "" {
				t.Errorf("alert %s has no severity label", r.Alert)
			}
			wantURL := "https://github.com/quittance/quittance/blob/main/dashboards/runbooks/" + r.Alert + ".md"
			if got := r.Annotations["runbook_url"]; got != wantURL {
				t.Errorf("alert %s: runbook_url = %q, want %q", r.Alert, got, wantURL)
			}
			if _, err := os.Stat(path.Join("runbooks", r.Alert+".md")); err != nil {
				t.Errorf("alert %s: runbook missing: %v", r.Alert, err)
			}
		}
	}
	for _, want := range []string{
		"QuittanceObligationUnconfirmed", "QuittanceEscalations", "QuittanceRefusedTokenSpike",
		"QuittanceCompensationRequestFailures", "QuittanceCollectorFailing", "QuittanceNoScrape",
		"QuittanceOutboxStuck", "QuittanceOutboxJobFailing", "QuittanceWebhookDeadLetters",
		"QuittanceDispatchUnknown", "QuittanceTaskNotFound", "QuittanceExtraTaskCompensationPending",
		"QuittanceCheckpointsStalled",
	} {
		if !alerts[want] {
			t.Errorf("alert %s is missing", want)
		}
	}
}

func TestReferencedMetrics(t *testing.T) {
	got, err := ReferencedMetrics()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 {
		t.Fatal("no metrics referenced")
	}
	if !slices.IsSorted(got) {
		t.Errorf("not sorted: %v", got)
	}
	if len(slices.Compact(slices.Clone(got))) != len(got) {
		t.Errorf("duplicates: %v", got)
	}
	if !slices.Contains(got, "quittance_obligations") {
		t.Errorf("quittance_obligations missing from %v", got)
	}
	for _, name := range got {
		if !slices.Contains(knownMetrics, name) {
			t.Errorf("%s is referenced but is not a documented Quittance metric", name)
		}
	}
	// Every documented metric is shown or alerted on somewhere.
	for _, name := range knownMetrics {
		if !slices.Contains(got, name) {
			t.Errorf("%s is documented but no dashboard or alert uses it", name)
		}
	}
}

func TestMetricNames(t *testing.T) {
	tests := []struct {
		expr string
		want []string
	}{
		{`up{job="quittance"} == 0 or absent(up{job="quittance"})`, nil},
		{`quittance_obligations`, []string{"quittance_obligations"}},
		{`max by (state) (quittance_obligations{state=~"held|escalated"})`, []string{"quittance_obligations"}},
		{`sum (rate(a_total[5m])) by (le, route)`, []string{"a_total"}},
		{
			`histogram_quantile(0.99, sum by (route, le) (rate(x_seconds_bucket{route!="/metrics"}[$__rate_interval])))`,
			[]string{"x_seconds"},
		},
		{`rate(x_seconds_sum[5m]) / rate(x_seconds_count[5m])`, []string{"x_seconds", "x_seconds"}},
		{`a / on (job) group_left (team) b`, []string{"a", "b"}},
		{`a > bool 0 unless ignoring(instance) c offset 1h`, []string{"a", "c"}},
		{`label_replace(a, "dst", "$1 by (x)", "src", "(.*)")`, []string{"a"}},
		{"time() - min(g{state=\"x\"} > 0) # age of b\n> 86400", []string{"g"}},
		{`sum without(instance) (a[${range}:1m])`, []string{"a"}},
		{`count_values("le", a) + topk(5, b) + 1e3 + 0x1f + Inf`, []string{"a", "b"}},
		{`a @ start() + ns:recorded:rate5m`, []string{"a", "ns:recorded:rate5m"}},
	}
	for _, tt := range tests {
		if got := metricNames(tt.expr); !slices.Equal(got, tt.want) {
			t.Errorf("metricNames(%q) = %v, want %v", tt.expr, got, tt.want)
		}
	}
}

// TestNoRuleNamesAScrapeJob: the rules work whatever the scrape job of
// Quittance is called, and so does the dashboard, which asks for it.
func TestNoRuleNamesAScrapeJob(t *testing.T) {
	exprs, err := expressions()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range exprs {
		if strings.Contains(e, `job="`) || strings.Contains(e, `job=~"quittance`) {
			t.Errorf("expression names a scrape job: %s", e)
		}
	}
}

func TestPanelQueries(t *testing.T) {
	qs, err := PanelQueries()
	if err != nil {
		t.Fatal(err)
	}
	panels := map[string]Query{}
	for _, q := range qs {
		if q.Dashboard == "" || q.Panel == "" || q.RefID == "" || strings.TrimSpace(q.Expr) == "" {
			t.Errorf("incomplete query %+v", q)
		}
		panels[q.Dashboard+"/"+q.Panel+"/"+q.RefID] = q
	}
	q, ok := panels["quittance-oncall/Longest in compensation_unconfirmed/A"]
	if !ok || !strings.Contains(q.Expr, "quittance_oldest_obligation_state_entry_timestamp_seconds") || q.NoValue != "none" {
		t.Errorf("on-call time-in-state panel: %+v", q)
	}
	if _, ok := panels["quittance-finance/Written-off obligations per hour/A"]; !ok {
		t.Errorf("finance panels missing from %d queries", len(qs))
	}
}
