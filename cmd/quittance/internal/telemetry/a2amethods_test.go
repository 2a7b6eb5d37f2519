package telemetry_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quittance/quittance/cmd/quittance/internal/telemetry"
	"github.com/quittance/quittance/delegate/a2a"
)

// TestCalledA2AMethodsStartAtZero calls every exported method of
// a2a.Client, in both protocol versions, and fetches an agent card, over
// loopback through telemetry.Transport. Every JSON-RPC method that reaches
// the wire must already have its histogram series at start-up (so rate()
// counts the first call after a replica starts) and must be counted under
// its own name, not "other". A method added to the client, or a method name
// changed in a wire encoding, fails here until the start-at-zero list has it.
func TestCalledA2AMethodsStartAtZero(t *testing.T) {
	var (
		mu   sync.Mutex
		sent []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		method := "agent_card"
		if r.Method == http.MethodPost {
			var rpc struct {
				Method string `json:"method"`
			}
			body, _ := io.ReadAll(r.Body)
			if err := json.Unmarshal(body, &rpc); err != nil || rpc.Method == "" {
				t.Errorf("request without a JSON-RPC method: %q", body)
			}
			method = rpc.Method
		}
		mu.Lock()
		sent = append(sent, method)
		mu.Unlock()
		// Every call fails: only the method name matters here.
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()

	reg := prometheus.NewRegistry()
	transport := telemetry.Transport(nil, telemetry.New(reg))
	defer transport.(interface{ CloseIdleConnections() }).CloseIdleConnections()
	hc := &http.Client{Transport: transport}
	atStartUp := a2aSeries(t, reg)

	ctx := context.Background()
	if _, err := a2a.FetchAgentCard(ctx, hc, srv.URL+"/.well-known/agent-card.json", nil); err == nil {
		t.Fatal("agent card fetch from a failing server succeeded")
	}
	ctxType := reflect.TypeOf((*context.Context)(nil)).Elem()
	for _, version := range []string{"1.0", "0.3"} {
		client := reflect.ValueOf(a2a.NewClient(hc, a2a.AgentInterface{URL: srv.URL, Binding: "JSONRPC", ProtocolVersion: version}))
		for i := range client.NumMethod() {
			name := client.Type().Method(i).Name
			m := client.Method(i)
			if m.Type().NumIn() == 0 {
				continue // an accessor (Interface), no call
			}
			args := make([]reflect.Value, m.Type().NumIn())
			for j := range args {
				if in := m.Type().In(j); in == ctxType {
					args[j] = reflect.ValueOf(ctx)
				} else {
					args[j] = reflect.Zero(in)
				}
			}
			mu.Lock()
			before := len(sent)
			mu.Unlock()
			out := m.Call(args)
			// A stream (Subscribe) sends its request when it is ranged over.
			if len(out) == 1 && out[0].Kind() == reflect.Func {
				yield := reflect.MakeFunc(out[0].Type().In(0), func([]reflect.Value) []reflect.Value {
					return []reflect.Value{reflect.ValueOf(false)}
				})
				out[0].Call([]reflect.Value{yield})
			}
			mu.Lock()
			if len(sent) != before+1 {
				t.Errorf("v%s Client.%s sent %d requests with zero arguments, want 1: teach this test to call it", version, name, len(sent)-before)
			}
			mu.Unlock()
		}
	}

	after := a2aSeries(t, reg)
	mu.Lock()
	defer mu.Unlock()
	if len(sent) < 1+2*6 {
		t.Fatalf("only %d calls reached the server: %v", len(sent), sent)
	}
	calls := map[string]uint64{}
	for _, method := range sent {
		calls[method]++
	}
	for method, n := range calls {
		if _, ok := atStartUp[method]; !ok {
			t.Errorf("quittance_a2a_request_duration_seconds{method=%q} is not exported at start-up: add it to calledA2AMethods (and a2aMethods)", method)
		}
		if after[method] != n {
			t.Errorf("method %q: %d calls sent, %d observed under its name", method, n, after[method])
		}
	}
	if after["other"] != 0 {
		t.Errorf("%d calls counted as other", after["other"])
	}
}

// a2aSeries returns the sample count of quittance_a2a_request_duration_seconds
// per method label, with every method that has a series at all.
func a2aSeries(t *testing.T, reg *prometheus.Registry) map[string]uint64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, f := range families {
		if f.GetName() != "quittance_a2a_request_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "method" {
					out[l.GetValue()] += m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return out
}

// TestRESTCallsCountedUnderTheirMethods: the calls of the HTTP+JSON binding
// are counted under the names of the JSON-RPC methods they are, tenant in
// the path or not, and none as "other".
func TestRESTCallsCountedUnderTheirMethods(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	reg := prometheus.NewRegistry()
	transport := telemetry.Transport(nil, telemetry.New(reg))
	defer transport.(interface{ CloseIdleConnections() }).CloseIdleConnections()
	hc := &http.Client{Transport: transport}
	ctx := context.Background()
	for _, tenant := range []string{"", "acme"} {
		c := a2a.NewClient(hc, a2a.AgentInterface{URL: srv.URL + "/a2a", Binding: a2a.BindingHTTPJSON, ProtocolVersion: "1.0", Tenant: tenant})
		_, _ = c.SendMessage(ctx, a2a.SendRequest{Message: a2a.Message{MessageID: "m", Role: a2a.RoleUser, Parts: []a2a.Part{{Text: "x"}}}})
		_, _ = c.GetTask(ctx, "t-1")
		_, _ = c.ListTasks(ctx, a2a.ListTasksRequest{ContextID: "c"})
		_, _ = c.CancelTask(ctx, "t-1", nil)
		_ = c.SetPushConfig(ctx, "t-1", a2a.PushConfig{URL: "https://q.example/push"})
		for range c.Subscribe(ctx, "t-1") {
		}
	}
	after := a2aSeries(t, reg)
	for _, m := range []string{"SendMessage", "GetTask", "ListTasks", "CancelTask", "CreateTaskPushNotificationConfig", "SubscribeToTask"} {
		if after[m] != 2 {
			t.Errorf("%s: %d calls observed under its name, want 2", m, after[m])
		}
	}
	if after["other"] != 0 {
		t.Errorf("%d calls counted as other", after["other"])
	}
}
