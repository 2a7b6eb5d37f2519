package telemetry_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quittance/quittance/cmd/quittance/internal/telemetry"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/report"
)

func TestMetricsLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := telemetry.New(reg)
	m.ObserveHTTP("/v1/obligations", "GET", 200, 1)
	m.ObserveA2A("SendMessage", telemetry.A2AOutcomeOK, 1)
	m.ObserveCommitted([]ledger.Event{{Type: "task_status_changed", ObligationFrom: "held", ObligationTo: "settled"}})
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

func TestClassifyEvidence(t *testing.T) {
	for _, tc := range []struct {
		typ          ledger.EventType
		data         string
		kind, result string
	}{
		{"task_status_changed", `{}`, "task_status", "accepted"},
		{"task_status_duplicate", `{}`, "task_status", "duplicate"},
		{"task_status_stale", `{}`, "task_status", "late"},
		{"status_conflict", `{}`, "task_status", "late"},
		{"compensation_acked", `{"obligation_event":"compensation_ack","kind":"compensation-ack+jwt"}`, "ack", "accepted"},
		{"no_compensation_declared", `{"obligation_event":"declaration_verified"}`, "declaration", "accepted"},
		{"token_refused", `{"kind":"no-compensation-required+jwt"}`, "declaration", "refused"},
		{"token_refused", `{"kind":"compensation-ack+jwt"}`, "ack", "refused"},
		{"late_evidence", `{"kind":"compensation-ack+jwt","contradicts_write_off":true}`, "ack", "late"},
	} {
		kind, result, ok := telemetry.ClassifyEvidence(ledger.Event{Type: tc.typ, Data: []byte(tc.data)})
		if !ok || kind != tc.kind || result != tc.result {
			t.Errorf("%s %s: %s/%s %v, want %s/%s", tc.typ, tc.data, kind, result, ok, tc.kind, tc.result)
		}
	}
	if _, _, ok := telemetry.ClassifyEvidence(ledger.Event{Type: "delegation_created", Data: []byte(`{}`)}); ok {
		t.Error("a created delegation is not evidence")
	}
}

var traceparent = regexp.MustCompile(`^00-([0-9a-f]{32})-([0-9a-f]{16})-0[01]$`)

func TestTransportPropagatesTraceparent(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("traceparent"))
		w.WriteHeader(http.StatusBadGateway)
	}))
	defer srv.Close()
	reg := prometheus.NewRegistry()
	hc := &http.Client{Transport: telemetry.Transport(nil, telemetry.New(reg))}

	// No trace yet: a new one is started.
	resp, err := hc.Post(srv.URL, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"CancelTask","params":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// An inbound request's trace is continued.
	inbound := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	h := http.Header{"Traceparent": {inbound}}
	ctx := telemetry.ExtractTrace(context.Background(), h)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(`{"method":"message/send"}`))
	resp, err = hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	if len(got) != 2 || !traceparent.MatchString(got[0]) || !traceparent.MatchString(got[1]) {
		t.Fatalf("traceparent headers %q", got)
	}
	m := traceparent.FindStringSubmatch(got[1])
	if m[1] != "4bf92f3577b34da6a3ce929d0e0e4736" || m[2] == "00f067aa0ba902b7" {
		t.Errorf("outbound %s does not continue %s as a child span", got[1], inbound)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	observed := map[string]uint64{}
	for _, f := range families {
		if f.GetName() != "quittance_a2a_request_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			if n := m.GetHistogram().GetSampleCount(); n > 0 {
				for _, l := range m.GetLabel() {
					if l.GetName() == "method" {
						observed[l.GetValue()] += n
					}
				}
			}
		}
	}
	if len(observed) != 2 || observed["CancelTask"] != 1 || observed["message/send"] != 1 {
		t.Errorf("a2a calls observed %v, want one CancelTask and one message/send", observed)
	}
	problems, _ := testutil.GatherAndLint(reg)
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// TestCompensationRequestOutcomes counts compensation requests over A2A by
// the outcome their concluding event records, and never counts an ack that
// a remote org posted over HTTP, which answers no request of ours.
func TestCompensationRequestOutcomes(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := telemetry.New(reg)
	m.ObserveCommitted([]ledger.Event{
		{Type: "compensation_acked", Data: []byte(`{"channel":"a2a","outcome":"compensated"}`)},
		{Type: "compensation_acked", Data: []byte(`{"kind":"ack"}`)},
		{Type: "compensation_acked", Data: []byte(`{"channel":"http","kind":"ack"}`)},
		{Type: "no_compensation_declared", Data: []byte(`{"channel":"a2a_receipt","outcome":"no_effects"}`)},
		{Type: "compensation_request_failed", Data: []byte(`{"outcome":"not_supported"}`)},
		{Type: "compensation_request_failed", Data: []byte(`{"outcome":"failed"}`)},
		{Type: "compensation_retries_exhausted", Data: []byte(`{"outcome":"error"}`)},
		{Type: "compensation_request_failed", Data: []byte(`{}`)},
	})
	want := `
# HELP quittance_compensation_requests_total %s
# TYPE quittance_compensation_requests_total counter
quittance_compensation_requests_total{outcome="compensated"} 1
quittance_compensation_requests_total{outcome="error"} 2
quittance_compensation_requests_total{outcome="failed"} 1
quittance_compensation_requests_total{outcome="no_effects"} 1
quittance_compensation_requests_total{outcome="not_supported"} 1
`
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var help string
	for _, f := range families {
		if f.GetName() == "quittance_compensation_requests_total" {
			help = f.GetHelp()
		}
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(fmt.Sprintf(want, help)), "quittance_compensation_requests_total"); err != nil {
		t.Error(err)
	}
}

// TestKnownSeriesFromStartUp: every counter and histogram a dashboard or
// rule reads exists at zero for every label value known in advance before
// anything happened, so increase() counts the first event.
func TestKnownSeriesFromStartUp(t *testing.T) {
	reg := prometheus.NewRegistry()
	telemetry.New(reg)
	transitions := telemetry.ObligationTransitions()
	// ledger/DESIGN.md §2.2's table: held to settled, released, compensated,
	// revocation_pending_compensation and escalated; pending to
	// compensated, released, compensation_unconfirmed, escalated and
	// written_off; unconfirmed to all of those but itself; escalated to
	// written_off.
	if len(transitions) != 5+5+4+1 {
		t.Errorf("%d transitions: %v", len(transitions), transitions)
	}
	var want strings.Builder
	for _, tr := range transitions {
		fmt.Fprintf(&want, "quittance_transitions_total{from=%q,to=%q} 0\n", tr[0], tr[1])
	}
	help := "# HELP quittance_transitions_total Obligation state transitions committed, by from and to state.\n# TYPE quittance_transitions_total counter\n"
	if err := testutil.GatherAndCompare(reg, strings.NewReader(help+want.String()), "quittance_transitions_total"); err != nil {
		t.Error(err)
	}
	for name, series := range map[string]int{
		"quittance_evidence_total":               3 * 4,
		"quittance_compensation_requests_total":  5,
		"quittance_write_offs_total":             3,
		"quittance_org_jwks_fetches_total":       3,
		"quittance_event_streams_refused_total":  2,
		"quittance_background_panics_total":      12,
		"quittance_a2a_request_duration_seconds": 13 * 5,
	} {
		if n := testutil.CollectAndCount(reg, name); n != series {
			t.Errorf("%s: %d series at start-up, want %d", name, n, series)
		}
	}
	telemetry.RegisterAlertSettings(reg, 15*time.Minute, time.Minute)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP quittance_checkpoint_interval_seconds How often this replica signs a checkpoint over the streams that moved (QUITTANCE_CHECKPOINT_INTERVAL); 0 when it signs none (QUITTANCE_CHECKPOINTS=off).
# TYPE quittance_checkpoint_interval_seconds gauge
quittance_checkpoint_interval_seconds 60
# HELP quittance_unconfirmed_alert_grace_seconds How long an obligation may stay in compensation_unconfirmed before QuittanceObligationUnconfirmed fires (QUITTANCE_UNCONFIRMED_ALERT_GRACE).
# TYPE quittance_unconfirmed_alert_grace_seconds gauge
quittance_unconfirmed_alert_grace_seconds 900
`), "quittance_unconfirmed_alert_grace_seconds", "quittance_checkpoint_interval_seconds"); err != nil {
		t.Error(err)
	}
}

// TestTokenRefused: a refused posted token counts by org and reason — a
// token that named no registered org under "unknown", so a stranger's iss
// never becomes a label — and as refused evidence of its kind.
func TestTokenRefused(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := telemetry.New(reg)
	m.TokenRefused(report.TokenRefusal{OrgID: "org-b", Reason: "token_signature_invalid", Kind: "compensation-ack+jwt"})
	m.TokenRefused(report.TokenRefusal{OrgID: "", Reason: "token_org_unknown", Kind: "no-compensation-required+jwt", ClaimedIssuer: "attacker-chosen"})
	m.TokenRefused(report.TokenRefusal{OrgID: "", Reason: "token_org_unknown", Kind: "no-compensation-required+jwt", ClaimedIssuer: "another"})
	expected := `
# HELP quittance_evidence_tokens_refused_total Signed acks and declarations refused at the public evidence endpoints, by org (a registered org's id, else "unknown") and server-side reason (the refusal code).
# TYPE quittance_evidence_tokens_refused_total counter
quittance_evidence_tokens_refused_total{org="org-b",reason="token_signature_invalid"} 1
quittance_evidence_tokens_refused_total{org="unknown",reason="token_org_unknown"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(expected), "quittance_evidence_tokens_refused_total"); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "quittance_evidence_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["result"] == telemetry.ResultRefused {
				got[labels["kind"]] = s.GetCounter().GetValue()
			}
		}
	}
	if got[telemetry.EvidenceAck] != 1 || got[telemetry.EvidenceDeclaration] != 2 || got[telemetry.EvidenceTaskStatus] != 0 {
		t.Fatalf("refused evidence by kind %v", got)
	}
}
