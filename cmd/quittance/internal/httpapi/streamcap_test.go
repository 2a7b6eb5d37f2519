package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/ledger"
)

// metricValue is the value of the series of name whose labels include
// labels (name=value pairs), 0 when there is none.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			case m.Gauge != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

// tryStream opens an event stream of token; for a 200 it returns the
// stream (closed at cleanup), else the response's status, Retry-After and
// problem code.
func tryStream(t *testing.T, url, token string) (stream *sseClient, status int, retryAfter, code string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode == http.StatusOK {
		return readStream(t, resp, cancel), http.StatusOK, "", ""
	}
	defer cancel()
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var p struct {
		Code string `json:"code"`
	}
	if resp.Header.Get("Content-Type") != "application/problem+json" || json.Unmarshal(body, &p) != nil {
		t.Fatalf("stream refused with %d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	return nil, resp.StatusCode, resp.Header.Get("Retry-After"), p.Code
}

// TestEventStreamCaps: one credential opening streams without end gets
// 429 too_many_streams (problem+json, Retry-After) past its principal's
// cap, counted by cap; another principal still gets its streams, up to
// the process's cap, past which every principal is refused; a closed
// stream gives its slot back.
func TestEventStreamCaps(t *testing.T) {
	t.Parallel()
	const perPrincipal, perProcess = 3, 5
	e := newOrchEnv(t, apitest.Worker{}, apitest.WithStreamCaps(perPrincipal, perProcess))
	url := e.URL + "/v1/events?stream=true"
	flooder := e.orch
	var mine []*sseClient
	for i := range perPrincipal {
		s, status, _, _ := tryStream(t, url, flooder)
		if status != http.StatusOK {
			t.Fatalf("stream %d of %d: %d", i+1, perPrincipal, status)
		}
		mine = append(mine, s)
	}
	for range 3 {
		_, status, retry, code := tryStream(t, url, flooder)
		if status != http.StatusTooManyRequests || code != "too_many_streams" || retry == "" {
			t.Fatalf("a stream past the principal's cap: %d %q, Retry-After %q", status, code, retry)
		}
	}
	if got := metricValue(t, e.Registry, "quittance_event_streams_refused_total", "limit", "principal"); got != 3 {
		t.Fatalf("refused by the principal cap: %v, want 3", got)
	}
	// Another principal, of the same tenant, is not refused for the first
	// one's streams; the per-delegation stream counts too.
	other := e.NewToken(t, ledger.RoleOrchestrator, "acme", "orchestrator-two")
	for i := range perProcess - perPrincipal {
		if _, status, _, code := tryStream(t, url, other); status != http.StatusOK {
			t.Fatalf("the other principal's stream %d: %d %s", i+1, status, code)
		}
	}
	if got := metricValue(t, e.Registry, "quittance_event_streams_open"); got != perProcess {
		t.Fatalf("open streams: %v, want %d", got, perProcess)
	}
	// The process is full: a third principal is refused.
	third := e.NewToken(t, ledger.RoleOrchestrator, "acme", "orchestrator-three")
	if _, status, retry, code := tryStream(t, url, third); status != http.StatusTooManyRequests || code != "too_many_streams" || retry == "" {
		t.Fatalf("a stream past the process cap: %d %q, Retry-After %q", status, code, retry)
	}
	if got := metricValue(t, e.Registry, "quittance_event_streams_refused_total", "limit", "process"); got != 1 {
		t.Fatalf("refused by the process cap: %v, want 1", got)
	}
	// A closed stream gives its slot back (once the server sees it go).
	mine[0].close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, status, _, _ := tryStream(t, url, third)
		if status == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slot of a closed stream never came back: %d", status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestEventStreamsShareReads: fifty streams of one scope (one tenant's
// events, of several principals) share the reads of the feed: one commit
// reaches every stream for a handful of reads, not one read per stream.
func TestEventStreamsShareReads(t *testing.T) {
	t.Parallel()
	const streams = 50
	// No poll and no heartbeat during the test: only the commit wakes.
	// A cluster of its own: the feed's cut is the cluster's, and with no
	// poll a commit held back by another test's transaction would never
	// reach the streams.
	e := newOrchEnv(t, apitest.Worker{}, apitest.WithStream(time.Hour, time.Hour), apitest.WithStreamCaps(streams, 4*streams), apitest.WithPrivateCluster())
	e.must(t, http.MethodPut, "/admin/v1/orgs/plain", e.OncallToken, map[string]any{"name": "Plain"}, http.StatusCreated)
	url := e.URL + "/v1/events?stream=true"
	tokens := []string{e.orch, e.NewToken(t, ledger.RoleOrchestrator, "acme", "reader-two"), e.NewToken(t, ledger.RoleOrchestrator, "acme", "reader-three")}
	clients := make([]*sseClient, streams)
	for i := range clients {
		clients[i] = openStream(t, url, tokens[i%len(tokens)], "")
	}
	// Every stream has read what there was (nothing of this tenant yet)
	// once the reads stop moving.
	settled := func() float64 {
		t.Helper()
		last := metricValue(t, e.Registry, "quittance_event_stream_reads_total")
		for {
			time.Sleep(300 * time.Millisecond)
			now := metricValue(t, e.Registry, "quittance_event_stream_reads_total")
			if now == last {
				return now
			}
			last = now
		}
	}
	before := settled()
	// Only a notification wakes the streams: the commit waits until the
	// service's LISTEN connection for events is up (on a loaded machine it
	// can come after the streams opened).
	deadline := time.Now().Add(30 * time.Second)
	for {
		var listening bool
		if err := e.Pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'quittance listen quittance_events')`).Scan(&listening); err != nil {
			t.Fatal(err)
		}
		if listening {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the service never listened for events")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// One commit: a delegation created.
	e.must(t, http.MethodPost, "/v1/delegations", e.orch, map[string]any{
		"business_operation_id": "op-shared", "org_id": "plain", "task_class": "read_only", "budget_id": "ops",
		"hold": map[string]any{"amount_minor": 10, "currency": "EUR"}, "remote": map[string]any{"task_id": "t-shared"},
	}, http.StatusCreated)
	for i, c := range clients {
		select {
		case ev, ok := <-c.events:
			if !ok {
				t.Fatalf("stream %d ended", i)
			}
			if ev.id == "" {
				t.Fatalf("stream %d: an event without an id: %+v", i, ev)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("stream %d never received the commit's event", i)
		}
	}
	reads := settled() - before
	if reads < 1 || reads > 10 {
		t.Fatalf("one commit with %d streams of one scope cost %v reads of the feed, want a handful (not one per stream)", streams, reads)
	}
	t.Logf("%v reads for %d streams", reads, streams)
}
