package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
)

// forgetfulAgent is an in-test A2A v0.3 agent on loopback: the first
// dispatch creates task kt-1 in the message's context, with its messageId
// in the history, and the connection drops before the answer; every resend
// is refused (-32602 duplicate messageId); it does not list tasks. It also
// holds a task of another context, theirs-rejected. tasks/get answers
// what it holds, -32001 for the rest.
type forgetfulAgent struct {
	mu    sync.Mutex
	sends int
	tasks map[string]map[string]any
	url   string
}

func startForgetfulAgent(t *testing.T) *forgetfulAgent {
	t.Helper()
	a := &forgetfulAgent{tasks: map[string]map[string]any{
		"theirs-rejected": {"kind": "task", "id": "theirs-rejected", "contextId": "ctx-someone-else", "status": map[string]any{"state": "rejected"}},
	}}
	mux := http.NewServeMux()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skipf("cannot listen on loopback: %v", err)
	}
	srv := httptest.NewUnstartedServer(mux)
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	mux.HandleFunc("/rpc", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				ID      string `json:"id"`
				Message struct {
					MessageID string `json:"messageId"`
					ContextID string `json:"contextId"`
				} `json:"message"`
			} `json:"params"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, "bad json", http.StatusBadRequest)
			return
		}
		resp := map[string]any{"jsonrpc": "2.0", "id": req.ID}
		a.mu.Lock()
		switch req.Method {
		case "message/send":
			a.sends++
			if a.sends > 1 {
				resp["error"] = map[string]any{"code": -32602, "message": "duplicate messageId"}
				break
			}
			m := req.Params.Message
			a.tasks["kt-1"] = map[string]any{"kind": "task", "id": "kt-1", "contextId": m.ContextID, "status": map[string]any{"state": "working"},
				"history": []any{map[string]any{"kind": "message", "messageId": m.MessageID, "role": "user", "contextId": m.ContextID, "taskId": "kt-1", "parts": []any{}}}}
			a.mu.Unlock()
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				conn.Close()
			}
			return
		case "tasks/get":
			if task, ok := a.tasks[req.Params.ID]; ok {
				resp["result"] = task
			} else {
				resp["error"] = map[string]any{"code": -32001, "message": "task not found"}
			}
		default:
			resp["error"] = map[string]any{"code": -32601, "message": "method not found"}
		}
		body, err := json.Marshal(resp)
		a.mu.Unlock()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})
	mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewStaticAgentCardHandler(&a2a.AgentCard{
		Name: "Forgetful", Description: "loses the first answer", URL: srv.URL + "/rpc",
		PreferredTransport: a2a.TransportProtocolJSONRPC, ProtocolVersion: "0.3.0", Version: "1.0.0",
		DefaultInputModes: []string{"text"}, DefaultOutputModes: []string{"text"},
		Skills: []a2a.AgentSkill{{ID: "buy", Name: "buy", Description: "buy", Tags: []string{"buy"}}},
	}))
	a.url = srv.URL + a2asrv.WellKnownAgentCardPath
	return a
}

// TestCLIResolveDispatchChecksTheTask: `quittance delegations
// resolve-dispatch` on a delegation whose dispatch is unknown (the agent
// lost the first answer and refused the resend). Naming a rejected task of
// another context is refused with exit 3 and a one-line
// remote_task_conflict reason, shown by `delegations show` as a
// remote_task_conflict event, the hold still held; a task the agent does
// not know is exit 3 too; the task the agent created for the dispatch is
// recorded (exit 0).
func TestCLIResolveDispatchChecksTheTask(t *testing.T) {
	t.Parallel()
	agent := startForgetfulAgent(t)
	e := startService(t, "QUITTANCE_EGRESS_ALLOW_CIDRS=127.0.0.1/32", "QUITTANCE_EGRESS_ALLOW_HTTP=true",
		"QUITTANCE_A2A_BACKOFF_BASE=100ms")
	ctx := context.Background()
	e.putBudget(t, "ops", 1_000_000, "acme")
	if s := e.api(t, http.MethodPut, "/admin/v1/orgs/supplier", e.oncall, map[string]any{"name": "Supplier"}, nil); s >= 300 {
		t.Fatalf("put org: %d", s)
	}
	// The agent endpoint, as a second on-call person would approve it.
	if err := e.exec(ctx, `UPDATE remote_orgs SET agent_card_url = $1, allowed_hosts = '{127.0.0.1}' WHERE id = 'supplier'`, agent.url); err != nil {
		t.Fatal(err)
	}
	orch := e.newToken(t, "--role", "orchestrator", "--tenant", "acme", "--name", "orch")
	var d struct {
		ID string `json:"id"`
	}
	if s := e.api(t, http.MethodPost, "/v1/delegations", orch, map[string]any{
		"business_operation_id": "po-forgetful", "org_id": "supplier", "task_class": "procurement", "budget_id": "ops",
		"hold":     map[string]any{"amount_minor": 7000, "currency": "EUR"},
		"dispatch": map[string]any{"message": map[string]any{"parts": []any{map[string]any{"text": "buy 7 pallets"}}}},
	}, &d); s != http.StatusCreated {
		t.Fatalf("create dispatched delegation: %d", s)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _, code := e.cli(t, e.oncall, "obligations", "list", "--condition", "dispatch_unknown", "-o", "json")
		if code == 0 && strings.Contains(out, d.ID) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the delegation never became dispatch_unknown: %s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}

	resolve := func(taskID string) (string, string, int) {
		t.Helper()
		return e.cli(t, e.oncall, "delegations", "resolve-dispatch", d.ID, "--task-id", taskID, "--reason", "the org named it, INC-31")
	}
	oneLine := func(s string) bool { return strings.Count(strings.TrimSpace(s), "\n") == 0 }
	if out, errOut, code := resolve("theirs-rejected"); code != exitConflict || !strings.Contains(errOut, "remote_task_conflict") || !oneLine(errOut) {
		t.Fatalf("another context's rejected task: exit %d %q %q, want 3 and one line", code, out, errOut)
	}
	if _, errOut, code := resolve("nobody-knows"); code != exitConflict || !strings.Contains(errOut, "remote_task_unknown") {
		t.Fatalf("an unknown task: exit %d %q, want 3", code, errOut)
	}
	show, _, code := e.cli(t, e.oncall, "delegations", "show", d.ID)
	if code != 0 || !strings.Contains(show, `"remote_task_conflict"`) || !strings.Contains(show, "ctx-someone-else") ||
		strings.Contains(show, `"dispatch_resolved"`) || !strings.Contains(show, `"obligation_state": "held"`) {
		t.Fatalf("show after the refusals: exit %d\n%s", code, show)
	}

	out, errOut, code := resolve("kt-1")
	if code != 0 {
		t.Fatalf("the dispatch's own task: exit %d %s %s", code, out, errOut)
	}
	var printed struct {
		Remote struct {
			TaskID    string `json:"task_id"`
			ContextID string `json:"context_id"`
		} `json:"remote"`
		ObligationState string `json:"obligation_state"`
	}
	if err := json.Unmarshal([]byte(out), &printed); err != nil || printed.Remote.TaskID != "kt-1" ||
		printed.Remote.ContextID != "quittance-context-"+d.ID || printed.ObligationState != "held" {
		t.Fatalf("resolve printed %q (%v)", out, err)
	}
}
