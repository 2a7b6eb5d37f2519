package httpapi_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/cmd/quittance/internal/telemetry"
	"github.com/quittance/quittance/dashboards"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/report"
)

// reportEnv is an apitest.Env with a finance and an orchestrator token,
// two funded budgets and two orgs.
type reportEnv struct {
	*apitest.Env
	Finance string
	Orch    string
}

func newReportEnv(t *testing.T, limit httpapi.RateLimit) *reportEnv {
	t.Helper()
	e := apitest.New(t, apitest.WithRateLimit(limit))
	env := &reportEnv{Env: e}
	env.Finance = e.NewToken(t, ledger.RoleFinance, "", "finance")
	env.Orch = e.NewOrchestrator(t, "acme")
	e.PutBudget(t, "ops-eur", "EUR", 100_000_000)
	e.PutBudget(t, "ops-usd", "USD", 100_000_000)
	e.PutOrg(t, "supplier", false)
	e.PutOrg(t, "carrier", false)
	return env
}

// pending creates a delegation and cancels its task, leaving it in
// revocation_pending_compensation.
func (e *reportEnv) pending(t *testing.T, token, op, org, budget string, amount int64, currency string) httpapi.DelegationBody {
	t.Helper()
	d := e.CreateDelegation(t, token, apitest.NewCreateRequest(op, org, "procurement", budget, amount, currency))
	d = e.ReportStatus(t, token, d.ID, "TASK_STATE_CANCELED", time.Time{})
	if d.ObligationState != "revocation_pending_compensation" {
		t.Fatalf("delegation %s is %s, want revocation_pending_compensation", op, d.ObligationState)
	}
	return d
}

func TestObligationsCSV(t *testing.T) {
	t.Parallel()
	e := newReportEnv(t, httpapi.RateLimit{})
	d1 := e.pending(t, e.Orch, "op-1", "supplier", "ops-eur", 12_345, "EUR")
	req := apitest.NewCreateRequest("op-2", "carrier", "procurement", "ops-usd", 500, "USD")
	req.Remote.TaskID = `=HYPERLINK("http://x","a,b")`
	d2 := e.CreateDelegation(t, e.Orch, req)
	e.ReportStatus(t, e.Orch, d2.ID, "TASK_STATE_CANCELED", time.Time{})
	// A held delegation is not an open obligation.
	e.CreateDelegation(t, e.Orch, apitest.NewCreateRequest("op-3", "supplier", "procurement", "ops-eur", 7, "EUR"))

	r := e.Do(t, http.MethodGet, "/v1/obligations?format=csv", e.Finance, nil).Expect(t, http.StatusOK)
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/csv") {
		t.Fatalf("Content-Type %q", ct)
	}
	if !bytes.Contains(r.Body, []byte("\r\n")) {
		t.Fatal("CSV lines must end with CRLF (RFC 4180)")
	}
	records, err := csv.NewReader(bytes.NewReader(r.Body)).ReadAll()
	if err != nil {
		t.Fatalf("parse CSV: %v\n%s", err, r.Body)
	}
	wantHeader := "delegation_id,tenant,org_id,task_class,budget_id,amount_minor,currency,remote_task_id,task_status," +
		"obligation_state,obligation_reason,created_at,age_seconds,cancel_requested_at,compensation_deadline," +
		"compensation_attempts,compensation_last_error,last_evidence_type,last_evidence_at"
	if got := strings.Join(records[0], ","); got != wantHeader {
		t.Fatalf("header\n got %s\nwant %s", got, wantHeader)
	}
	if len(records) != 3 {
		t.Fatalf("%d data rows, want 2:\n%s", len(records)-1, r.Body)
	}
	byID := map[string][]string{}
	for _, rec := range records[1:] {
		byID[rec[0]] = rec
	}
	if rec := byID[d1.ID]; rec[5] != "12345" || rec[6] != "EUR" || rec[1] != "acme" || rec[9] != "revocation_pending_compensation" {
		t.Fatalf("row of %s: %q", d1.ID, rec)
	}
	// The remote task id starts with '=', so it is guarded with a quote,
	// and its comma and quotes survive RFC 4180 quoting.
	if got, want := byID[d2.ID][7], `'=HYPERLINK("http://x","a,b")`; got != want {
		t.Fatalf("guarded tenant %q, want %q", got, want)
	}
}

func TestCSVFormulaGuard(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"=1+1", "'=1+1"}, {"+1", "'+1"}, {"-1", "'-1"}, {"@SUM(A1)", "'@SUM(A1)"},
		{"\tx", "'\tx"}, {"\rx", "'\rx"}, {"acme", "acme"}, {"", ""}, {"a=b", "a=b"},
	} {
		if got := httpapi.GuardCSVCell(tc.in); got != tc.want {
			t.Errorf("guard(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestObligationsCSVStreamsManyRows(t *testing.T) {
	t.Parallel()
	e := newReportEnv(t, httpapi.RateLimit{})
	const n = 1200 // more than two database pages
	ctx := context.Background()
	// Bulk-insert delegations straight into the database: the API path is
	// covered above, this test is about volume.
	_, err := e.Pool.Exec(ctx, `
		INSERT INTO delegations (id, tenant, business_operation_id, request_hash, org_id, task_class, budget_id,
		    amount_minor, currency, remote_task_id, task_status, obligation_state, created_at, updated_at)
		SELECT gen_random_uuid(), 'bulk', 'bulk-' || i, '\x00', 'supplier', 'procurement', 'ops-eur',
		    i, 'EUR', 'task-bulk-' || i, 'canceled', 'compensation_unconfirmed',
		    $1::timestamptz - make_interval(secs => i), $1::timestamptz
		FROM generate_series(1, $2::int) AS i`, apitest.Epoch, n)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, e.URL+"/v1/obligations?state=compensation_unconfirmed&tenant=bulk", nil)
	req.Header.Set("Authorization", "Bearer "+e.Finance)
	req.Header.Set("Accept", "text/csv")
	resp, err := e.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.ContentLength != -1 || len(resp.TransferEncoding) == 0 || resp.TransferEncoding[0] != "chunked" {
		t.Fatalf("export not streamed: Content-Length %d, Transfer-Encoding %v", resp.ContentLength, resp.TransferEncoding)
	}
	records, err := csv.NewReader(resp.Body).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(records) != n+1 {
		t.Fatalf("%d rows, want %d", len(records)-1, n)
	}
	// Oldest first.
	if records[1][5] != fmt.Sprint(n) || records[n][5] != "1" {
		t.Fatalf("order: first amount %s, last %s", records[1][5], records[n][5])
	}
}

type obligationList struct {
	AsOf        time.Time                `json:"as_of"`
	Obligations []httpapi.ObligationBody `json:"obligations"`
	NextCursor  string                   `json:"next_cursor"`
}

func TestObligationsJSONFilters(t *testing.T) {
	t.Parallel()
	e := newReportEnv(t, httpapi.RateLimit{})
	other := e.NewOrchestrator(t, "globex")
	old := e.pending(t, e.Orch, "old", "supplier", "ops-eur", 100, "EUR")
	e.Clock.Advance(10 * 24 * time.Hour)
	fresh := e.pending(t, e.Orch, "fresh", "carrier", "ops-eur", 200, "EUR")
	theirs := e.pending(t, other, "theirs", "supplier", "ops-usd", 300, "USD")
	held := e.CreateDelegation(t, e.Orch, apitest.NewCreateRequest("held", "supplier", "procurement", "ops-eur", 1, "EUR"))

	ids := func(query string) []string {
		var l obligationList
		e.Do(t, http.MethodGet, "/v1/obligations"+query, e.Finance, nil).Expect(t, http.StatusOK).JSON(t, &l)
		var out []string
		for _, o := range l.Obligations {
			out = append(out, o.DelegationID)
		}
		return out
	}
	check := func(query string, want ...string) {
		t.Helper()
		if got := ids(query); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: got %v, want %v", query, got, want)
		}
	}
	check("", old.ID, fresh.ID, theirs.ID)
	check("?org_id=supplier", old.ID, theirs.ID)
	check("?tenant=globex", theirs.ID)
	check("?older_than=7d", old.ID)
	check("?older_than=240h&org_id=carrier")
	check("?state=held", held.ID)
	check("?state=held,escalated&state=revocation_pending_compensation&tenant=acme", old.ID, fresh.ID, held.ID)
	check("?state=settled")
	check("?limit=2", old.ID, fresh.ID)

	var l obligationList
	e.Do(t, http.MethodGet, "/v1/obligations?limit=2", e.Finance, nil).Expect(t, http.StatusOK).JSON(t, &l)
	check("?limit=2&cursor="+l.NextCursor, theirs.ID)
	if got := l.Obligations[0].AgeSeconds; got != int64(10*24*3600) {
		t.Errorf("age of the old obligation %d, want 10 days", got)
	}

	e.Do(t, http.MethodGet, "/v1/obligations?state=bogus", e.Finance, nil).Problem(t, http.StatusUnprocessableEntity, "validation_failed")
	e.Do(t, http.MethodGet, "/v1/obligations?older_than=soon", e.Finance, nil).Problem(t, http.StatusUnprocessableEntity, "validation_failed")
	e.Do(t, http.MethodGet, "/v1/obligations", e.Orch, nil).Problem(t, http.StatusForbidden, "forbidden")
	e.Do(t, http.MethodGet, "/v1/obligations?format=csv", e.Orch, nil).Problem(t, http.StatusForbidden, "forbidden")
	e.Do(t, http.MethodGet, "/v1/obligations", "", nil).Problem(t, http.StatusUnauthorized, "unauthenticated")
}

func TestObligationSummaryBuckets(t *testing.T) {
	t.Parallel()
	e := newReportEnv(t, httpapi.RateLimit{})
	e.pending(t, e.Orch, "a", "supplier", "ops-eur", 100, "EUR") // 40 days old at the end
	e.Clock.Advance(20 * 24 * time.Hour)
	e.pending(t, e.Orch, "b", "supplier", "ops-eur", 200, "EUR") // 20 days
	e.Clock.Advance(17 * 24 * time.Hour)
	e.pending(t, e.Orch, "c", "supplier", "ops-eur", 400, "EUR") // 3 days
	e.Clock.Advance(3*24*time.Hour - time.Hour)
	e.pending(t, e.Orch, "d", "supplier", "ops-eur", 800, "EUR") // 1 hour
	e.CreateDelegation(t, e.Orch, apitest.NewCreateRequest("h", "carrier", "procurement", "ops-usd", 5, "USD"))
	e.Clock.Advance(time.Hour)

	var out struct {
		AsOf time.Time                `json:"as_of"`
		Rows []httpapi.SummaryRowBody `json:"rows"`
	}
	e.Do(t, http.MethodGet, "/v1/obligations/summary", e.Finance, nil).Expect(t, http.StatusOK).JSON(t, &out)
	if !out.AsOf.Equal(e.Clock.Now()) {
		t.Errorf("as_of %s, want the clock's %s", out.AsOf, e.Clock.Now())
	}
	if len(out.Rows) != 2 {
		t.Fatalf("rows %+v", out.Rows)
	}
	held, pending := out.Rows[0], out.Rows[1]
	if held.OrgID != "carrier" || held.ObligationState != "held" || held.Count != 1 || held.AmountMinor != 5 || held.Currency != "USD" {
		t.Errorf("held row %+v", held)
	}
	if pending.Count != 4 || pending.AmountMinor != 1500 {
		t.Errorf("pending row %+v", pending)
	}
	want := map[string]httpapi.SummaryBucketBody{
		"lt_1d": {Count: 1, AmountMinor: 800}, "1d_7d": {Count: 1, AmountMinor: 400},
		"7d_30d": {Count: 1, AmountMinor: 200}, "gt_30d": {Count: 1, AmountMinor: 100},
	}
	for k, w := range want {
		if pending.AgeBuckets[k] != w {
			t.Errorf("bucket %s = %+v, want %+v", k, pending.AgeBuckets[k], w)
		}
	}
}

// TestObligationSummaryBucketBounds: an obligation exactly 1, 7 or 30 days
// old is in the bucket that starts there.
func TestObligationSummaryBucketBounds(t *testing.T) {
	t.Parallel()
	e := newReportEnv(t, httpapi.RateLimit{})
	e.pending(t, e.Orch, "a", "supplier", "ops-eur", 100, "EUR")
	var age time.Duration
	for _, step := range []struct {
		advance time.Duration
		bucket  string
	}{
		{0, "lt_1d"},
		{24 * time.Hour, "1d_7d"},
		{6 * 24 * time.Hour, "7d_30d"},
		{23 * 24 * time.Hour, "gt_30d"},
	} {
		e.Clock.Advance(step.advance)
		age += step.advance
		var out struct {
			Rows []httpapi.SummaryRowBody `json:"rows"`
		}
		e.Do(t, http.MethodGet, "/v1/obligations/summary", e.Finance, nil).Expect(t, http.StatusOK).JSON(t, &out)
		if len(out.Rows) != 1 {
			t.Fatalf("rows %+v", out.Rows)
		}
		for k, b := range out.Rows[0].AgeBuckets {
			if want := (k == step.bucket); want != (b.Count == 1) {
				t.Errorf("%s old: bucket %s = %+v, want the obligation only in %s", age, k, b, step.bucket)
			}
		}
	}
}

func TestAnomalies(t *testing.T) {
	t.Parallel()
	e := newReportEnv(t, httpapi.RateLimit{})
	d := e.pending(t, e.Orch, "split", "supplier", "ops-eur", 100, "EUR")
	e.ReportStatus(t, e.Orch, d.ID, "TASK_STATE_COMPLETED", time.Time{}) // different terminal status: a conflict

	var out struct {
		Anomalies []httpapi.AnomalyBody `json:"anomalies"`
	}
	e.Do(t, http.MethodGet, "/v1/anomalies", e.OncallToken, nil).Expect(t, http.StatusOK).JSON(t, &out)
	if len(out.Anomalies) != 1 {
		t.Fatalf("anomalies %+v", out.Anomalies)
	}
	a := out.Anomalies[0]
	if a.Kind != "status_conflict" || a.DelegationID != d.ID || a.OrgID != "supplier" || a.Tenant != "acme" {
		t.Fatalf("anomaly %+v", a)
	}
	e.Do(t, http.MethodGet, "/v1/anomalies?kind=refused_token", e.Finance, nil).Expect(t, http.StatusOK).JSON(t, &out)
	if len(out.Anomalies) != 0 {
		t.Fatalf("refused_token filter returned %+v", out.Anomalies)
	}
	e.Do(t, http.MethodGet, "/v1/anomalies?kind=nonsense", e.Finance, nil).Problem(t, http.StatusUnprocessableEntity, "validation_failed")
}

func TestAnomalyClassification(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		typ  ledger.EventType
		data string
		want report.AnomalyKind
	}{
		{"status_conflict", `{}`, report.AnomalyStatusConflict},
		{"late_evidence", `{"contradicts_write_off": false}`, report.AnomalyLateEvidence},
		{"late_evidence", `{"contradicts_write_off": true}`, report.AnomalyContradictedWriteOff},
		{"token_refused", `{"code": "token_signature_invalid"}`, report.AnomalyRefusedToken},
	} {
		if got, ok := report.ClassifyAnomaly(tc.typ, []byte(tc.data)); !ok || got != tc.want {
			t.Errorf("%s %s: %q, want %q", tc.typ, tc.data, got, tc.want)
		}
	}
	if _, ok := report.ClassifyAnomaly("task_status_changed", []byte(`{}`)); ok {
		t.Error("a status change is not an anomaly")
	}
}

func TestRateLimit(t *testing.T) {
	t.Parallel()
	// The setup's requests use the on-call token's bucket; the finance
	// token has made none.
	e := newReportEnv(t, httpapi.RateLimit{RPS: 0.001, Burst: 20})
	fin := e.Finance
	for range 20 { // the burst
		e.Do(t, http.MethodGet, "/v1/obligations", fin, nil).Expect(t, http.StatusOK)
	}
	r := e.Do(t, http.MethodGet, "/v1/obligations", fin, nil)
	p := r.Problem(t, http.StatusTooManyRequests, "rate_limited")
	if r.Header.Get("Retry-After") == "" || p.Status != http.StatusTooManyRequests {
		t.Fatalf("429 without Retry-After: %v", r.Header)
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q", ct)
	}
	// Another credential is not affected, and probes are never limited.
	e.Do(t, http.MethodGet, "/v1/obligations", e.NewToken(t, ledger.RoleFinance, "", "finance-2"), nil).Expect(t, http.StatusOK)
	for range 5 {
		e.Do(t, http.MethodGet, "/healthz", "", nil).Expect(t, http.StatusOK)
	}
}

func TestMetricsLintAndDashboardNames(t *testing.T) {
	t.Parallel()
	e := newReportEnv(t, httpapi.RateLimit{})
	e.pending(t, e.Orch, "m", "supplier", "ops-eur", 100, "EUR")
	e.Do(t, http.MethodGet, "/v1/obligations", e.Finance, nil).Expect(t, http.StatusOK)
	// One outbound A2A call, so the A2A histogram has a series.
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer agent.Close()
	a2a := &http.Client{Transport: telemetry.Transport(nil, e.Metrics)}
	resp, err := a2a.Post(agent.URL, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"GetTask"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	problems, err := testutil.GatherAndLint(e.Registry)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint %s: %s", p.Metric, p.Text)
	}
	families, err := e.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, f := range families {
		have[f.GetName()] = true
	}
	names, err := dashboards.ReferencedMetrics()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if !have[n] {
			t.Errorf("metric %s is used by a dashboard or alert but not exported", n)
		}
	}
}

func TestCollectorAndCounters(t *testing.T) {
	t.Parallel()
	e := newReportEnv(t, httpapi.RateLimit{})
	d := e.pending(t, e.Orch, "c1", "supplier", "ops-eur", 250, "EUR")
	e.CreateDelegation(t, e.Orch, apitest.NewCreateRequest("c2", "supplier", "procurement", "ops-usd", 40, "USD"))
	done := e.CreateDelegation(t, e.Orch, apitest.NewCreateRequest("c3", "supplier", "procurement", "ops-eur", 5, "EUR"))
	e.ReportStatus(t, e.Orch, done.ID, "TASK_STATE_COMPLETED", time.Time{})
	e.ReportStatus(t, e.Orch, d.ID, "TASK_STATE_COMPLETED", time.Time{}) // conflict: late task status

	expected := fmt.Sprintf(`
# HELP quittance_collector_up 1 if the last scrape-time database query succeeded, else 0.
# TYPE quittance_collector_up gauge
quittance_collector_up 1
# HELP quittance_held_minor_units Budget held by active obligations, in integer minor units of the currency, read at scrape time.
# TYPE quittance_held_minor_units gauge
quittance_held_minor_units{currency="EUR"} 250
quittance_held_minor_units{currency="USD"} 40
# HELP quittance_obligations Delegations per obligation state, read from the database at scrape time.
# TYPE quittance_obligations gauge
quittance_obligations{state="compensated"} 0
quittance_obligations{state="compensation_unconfirmed"} 0
quittance_obligations{state="escalated"} 0
quittance_obligations{state="held"} 1
quittance_obligations{state="released"} 0
quittance_obligations{state="revocation_pending_compensation"} 1
quittance_obligations{state="settled"} 1
quittance_obligations{state="written_off"} 0
# HELP quittance_oldest_open_obligation_created_timestamp_seconds Creation time (Unix seconds) of the oldest obligation in each active state; 0 when there is none.
# TYPE quittance_oldest_open_obligation_created_timestamp_seconds gauge
quittance_oldest_open_obligation_created_timestamp_seconds{state="compensation_unconfirmed"} 0
quittance_oldest_open_obligation_created_timestamp_seconds{state="escalated"} 0
quittance_oldest_open_obligation_created_timestamp_seconds{state="held"} %d
quittance_oldest_open_obligation_created_timestamp_seconds{state="revocation_pending_compensation"} %d
`, apitest.Epoch.Unix(), apitest.Epoch.Unix())
	if err := testutil.GatherAndCompare(e.Registry, strings.NewReader(expected),
		"quittance_collector_up", "quittance_held_minor_units", "quittance_obligations",
		"quittance_oldest_open_obligation_created_timestamp_seconds"); err != nil {
		t.Fatal(err)
	}

	// Every transition of the machine is exported; these two happened.
	families, _ := e.Registry.Gather()
	transitions := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "quittance_transitions_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if v := m.GetCounter().GetValue(); v != 0 {
				transitions[m.GetLabel()[0].GetValue()+"→"+m.GetLabel()[1].GetValue()] = v
			}
		}
	}
	if want := map[string]float64{"held→revocation_pending_compensation": 1, "held→settled": 1}; !maps.Equal(transitions, want) {
		t.Fatalf("transitions %v, want %v", transitions, want)
	}
	got := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "quittance_evidence_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			got[labels["kind"]+"/"+labels["result"]] = m.GetCounter().GetValue()
		}
	}
	if got["task_status/accepted"] != 2 || got["task_status/late"] != 1 {
		t.Fatalf("evidence counters %v", got)
	}

	// A database that fails makes the collector report itself down, and
	// count the error, instead of failing the scrape.
	e.Pool.Close()
	if err := testutil.GatherAndCompare(e.Registry, strings.NewReader(`
# HELP quittance_collector_errors_total Scrape-time database queries that failed or timed out.
# TYPE quittance_collector_errors_total counter
quittance_collector_errors_total 1
# HELP quittance_collector_up 1 if the last scrape-time database query succeeded, else 0.
# TYPE quittance_collector_up gauge
quittance_collector_up 0
`), "quittance_collector_up", "quittance_collector_errors_total"); err != nil {
		t.Fatal(err)
	}
}
