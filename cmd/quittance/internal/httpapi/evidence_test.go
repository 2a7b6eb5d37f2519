package httpapi_test

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/ledger"
)

// rawAgent is an in-test A2A v0.3 agent speaking JSON-RPC by hand, so a
// test can make it misbehave in ways no SDK will: answer a resend with
// -32602, drop the connection after creating a task, answer a cancel with
// TaskNotFoundError. handle gets the method, the call's number (1 for the
// first call of that method) and the params, and returns a result or an
// RPC error; drop hangs up without answering.
type rawAgent struct {
	handle func(method string, call int, params json.RawMessage) (result any, rpcErr *rawRPCError, drop bool)

	// push makes the card declare push notifications.
	push bool

	mu    sync.Mutex
	calls map[string]int

	cardURL string
}

// httpStatus, returned as a result, makes the agent answer with that HTTP
// status and no JSON-RPC body.
type httpStatus int

// rawBody, returned as a result, is written as the whole HTTP response
// body (with status 200), whatever the request's JSON-RPC id was.
type rawBody []byte

type rawRPCError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (a *rawAgent) count(method string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.calls[method]
}

func startRawAgent(t *testing.T, a *rawAgent) *rawAgent {
	t.Helper()
	a.calls = map[string]int{}
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
			Params json.RawMessage `json:"params"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, "bad json", http.StatusBadRequest)
			return
		}
		a.mu.Lock()
		a.calls[req.Method]++
		n := a.calls[req.Method]
		a.mu.Unlock()
		result, rpcErr, drop := a.handle(req.Method, n, req.Params)
		if drop {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		if status, ok := result.(httpStatus); ok {
			http.Error(w, "refused", int(status))
			return
		}
		if body, ok := result.(rawBody); ok {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(body)
			return
		}
		resp := map[string]any{"jsonrpc": "2.0", "id": req.ID}
		if rpcErr != nil {
			resp["error"] = rpcErr
		} else {
			resp["result"] = result
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(resp)
	})
	mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewStaticAgentCardHandler(&a2a.AgentCard{
		Name: "Raw", Description: "misbehaves on purpose", URL: srv.URL + "/rpc",
		PreferredTransport: a2a.TransportProtocolJSONRPC, ProtocolVersion: "0.3.0", Version: "1.0.0",
		Capabilities:      a2a.AgentCapabilities{PushNotifications: a.push, Extensions: []a2a.AgentExtension{{URI: compensation.ExtensionURI}}},
		DefaultInputModes: []string{"text"}, DefaultOutputModes: []string{"text"},
		Skills: []a2a.AgentSkill{{ID: "buy", Name: "buy", Description: "buy", Tags: []string{"buy"}}},
	}))
	a.cardURL = srv.URL + a2asrv.WellKnownAgentCardPath
	return a
}

// workingTask is the v0.3 wire form of a working task.
func workingTask(id string) map[string]any {
	return map[string]any{"kind": "task", "id": id, "contextId": "ctx-" + id, "status": map[string]any{"state": "working"}}
}

// compensationResends registers an agent as org name and dispatches
// po-<name> to it. Its dispatch creates the working task <name>-1, which
// a cancel cancels; the n-th compensation request is answered with
// answers[n-1] (any result rawAgent's handle may return: an httpStatus, a
// rawBody, a malformed task) and every one after those with a compensated
// receipt. It cancels the delegation and, once it is compensated, returns
// the env, the delegation and the messageId of every compensation request
// the agent received.
func compensationResends(t *testing.T, name string, answers ...any) (*a2aEnv, httpapi.DelegationBody, []string) {
	t.Helper()
	taskID := name + "-1"
	var (
		mu     sync.Mutex
		compID []string
	)
	agent := startRawAgent(t, &rawAgent{handle: func(method string, _ int, params json.RawMessage) (any, *rawRPCError, bool) {
		switch method {
		case "message/send":
			var p struct {
				Message struct {
					MessageID string `json:"messageId"`
					Parts     []struct {
						Data map[string]any `json:"data"`
					} `json:"parts"`
				} `json:"message"`
			}
			_ = json.Unmarshal(params, &p)
			var req map[string]any
			for _, part := range p.Message.Parts {
				if r, ok := part.Data["compensationRequest"].(map[string]any); ok {
					req = r
				}
			}
			if req == nil {
				return workingTask(taskID), nil, false
			}
			mu.Lock()
			compID = append(compID, p.Message.MessageID)
			n := len(compID)
			mu.Unlock()
			if n <= len(answers) {
				return answers[n-1], nil, false
			}
			return map[string]any{
				"kind": "task", "id": "comp-1", "contextId": "ctx-" + taskID, "status": map[string]any{"state": "completed"},
				"artifacts": []any{map[string]any{
					"artifactId": compensation.ReceiptArtifactName, "name": compensation.ReceiptArtifactName,
					"parts": []any{map[string]any{"kind": "data", "data": map[string]any{
						"outcome": "compensated", "receiptId": "rcpt-1", "taskId": req["taskId"], "idempotencyKey": req["idempotencyKey"],
					}}},
				}},
			}, nil, false
		case "tasks/cancel":
			return map[string]any{"kind": "task", "id": taskID, "contextId": "ctx-" + taskID, "status": map[string]any{"state": "canceled"}}, nil, false
		}
		return nil, &rawRPCError{Code: -32601, Message: "method not found"}, false
	}})
	e := newA2AEnv(t, apitest.Worker{NoPush: true, CompensationMaxAttempts: 5})
	e.putOrg(t, name, agent.cardURL, http.StatusCreated)
	d := e.dispatch(t, "po-"+name, name)
	e.waitFor(t, d.ID, "dispatch", dispatched)
	e.must(t, http.MethodPost, "/v1/delegations/"+d.ID+"/cancel", e.orch, nil, http.StatusOK)
	got := e.waitFor(t, d.ID, "compensated", func(d httpapi.DelegationBody) bool { return d.ObligationState == "compensated" })
	mu.Lock()
	defer mu.Unlock()
	return e, got, slices.Clone(compID)
}

// waitEvent polls the delegation's events until one of typ appears.
func (e *a2aEnv) waitEvent(t *testing.T, id string, typ ledger.EventType) []ledger.EventRecord {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		events := e.events(t, id)
		if countEvents(events, typ) > 0 {
			return events
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s event: %+v", typ, events)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// listCondition returns the delegation ids GET /v1/obligations lists for a
// condition.
func (e *a2aEnv) listCondition(t *testing.T, condition string) []string {
	t.Helper()
	var page httpapi.ObligationListBody
	if err := json.Unmarshal(e.must(t, http.MethodGet, "/v1/obligations?condition="+condition, e.OncallToken, nil, http.StatusOK), &page); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, o := range page.Obligations {
		if o.DispatchUnknownAt == nil {
			t.Fatalf("listed under %s without dispatch_unknown_at: %+v", condition, o)
		}
		ids = append(ids, o.DelegationID)
	}
	return ids
}

// TestA2ADispatchResendRefusedIsUnknownNeverReleased: attempt 1 creates the
// remote task but the connection drops before the answer; the resend (same
// messageId) is refused with -32602 "duplicate messageId". That refusal
// proves nothing about attempt 1, so the hold stays active, the delegation
// is in the dispatch_unknown condition (an event, and listed), and nothing
// is rejected or released.
func TestA2ADispatchResendRefusedIsUnknownNeverReleased(t *testing.T) {
	t.Parallel()
	agent := &taskKeeper{}
	e := newA2AEnv(t, apitest.Worker{NoPush: true})
	d, events := e.unknownDispatch(t, agent, "flaky")
	if n := agent.count("message/send"); n != 2 {
		t.Fatalf("the agent got %d sends, want 2", n)
	}
	got := e.get(t, d.ID)
	if got.ObligationState != "held" || got.HoldState != "active" || got.TaskStatus == "rejected" {
		t.Fatalf("after a refused resend: %+v", got)
	}
	for _, ev := range events {
		if ev.ObligationTo != "" {
			t.Fatalf("an obligation transition after an ambiguous dispatch: %+v", ev)
		}
		if ev.Type == ledger.EventTypeDispatchUnknown && !strings.Contains(string(ev.Data), "resend_refused") {
			t.Fatalf("dispatch_unknown without its reason: %s", ev.Data)
		}
	}
	if ids := e.listCondition(t, "dispatch_unknown"); len(ids) != 1 || ids[0] != d.ID {
		t.Fatalf("condition=dispatch_unknown lists %v, want [%s]", ids, d.ID)
	}
	var budget httpapi.BudgetBody
	_ = json.Unmarshal(e.must(t, http.MethodGet, "/admin/v1/budgets/ops", e.OncallToken, nil, http.StatusOK), &budget)
	if budget.HeldMinor != 12_500 {
		t.Fatalf("budget after an ambiguous dispatch = %+v, want 12500 still held", budget)
	}
	e.CheckInvariants(t)
}

// TestA2ADispatchFirstRefusalStillRejects: the same -32602 on attempt 1,
// when nothing can have reached the agent before, is a rejection (the
// hold returns) and no dispatch_unknown is listed.
func TestA2ADispatchFirstRefusalStillRejects(t *testing.T) {
	t.Parallel()
	agent := startRawAgent(t, &rawAgent{handle: func(string, int, json.RawMessage) (any, *rawRPCError, bool) {
		return nil, &rawRPCError{Code: -32602, Message: "invalid params"}, false
	}})
	e := newA2AEnv(t, apitest.Worker{NoPush: true})
	e.putOrg(t, "picky", agent.cardURL, http.StatusCreated)
	d := e.dispatch(t, "po-rejected", "picky")
	got := e.waitFor(t, d.ID, "the rejection", func(d httpapi.DelegationBody) bool { return d.TaskStatus == "rejected" })
	if got.ObligationState != "released" || got.HoldState != "returned" {
		t.Fatalf("after a first refusal: %+v", got)
	}
	if ids := e.listCondition(t, "dispatch_unknown"); len(ids) != 0 {
		t.Fatalf("condition=dispatch_unknown lists %v, want none", ids)
	}
}

// TestA2ADispatchMessageReplyToResendNeverSettles: attempt 1 is lost, the
// resend is answered with a direct message. Only a reply to attempt 1
// settles; this one leaves the hold active in dispatch_unknown.
func TestA2ADispatchMessageReplyToResendNeverSettles(t *testing.T) {
	t.Parallel()
	agent := startRawAgent(t, &rawAgent{handle: func(method string, call int, _ json.RawMessage) (any, *rawRPCError, bool) {
		if call == 1 {
			return nil, nil, true
		}
		return map[string]any{"kind": "message", "messageId": "reply-1", "role": "agent", "parts": []any{map[string]any{"kind": "text", "text": "done"}}}, nil, false
	}})
	e := newA2AEnv(t, apitest.Worker{NoPush: true})
	e.putOrg(t, "chatty", agent.cardURL, http.StatusCreated)
	d := e.dispatch(t, "po-reply", "chatty")
	e.waitEvent(t, d.ID, ledger.EventTypeDispatchUnknown)
	got := e.get(t, d.ID)
	if got.ObligationState != "held" || got.HoldState != "active" || got.TaskStatus == "completed" {
		t.Fatalf("after a message reply to a resend: %+v", got)
	}
	e.CheckInvariants(t)
}

// TestA2ACancelTaskNotFoundKeepsHold: the agent answers CancelTask for a
// task it created with TaskNotFoundError (it purged it). That is recorded
// as remote_task_not_found and never read as canceled: the hold stays.
func TestA2ACancelTaskNotFoundKeepsHold(t *testing.T) {
	t.Parallel()
	agent := startRawAgent(t, &rawAgent{handle: func(method string, _ int, _ json.RawMessage) (any, *rawRPCError, bool) {
		switch method {
		case "message/send":
			return workingTask("purged-1"), nil, false
		case "tasks/cancel", "tasks/get":
			return nil, &rawRPCError{Code: -32001, Message: "task not found"}, false
		}
		return nil, &rawRPCError{Code: -32601, Message: "method not found"}, false
	}})
	e := newA2AEnv(t, apitest.Worker{NoPush: true})
	e.putOrg(t, "forgetful", agent.cardURL, http.StatusCreated)
	d := e.dispatch(t, "po-purged", "forgetful")
	e.waitFor(t, d.ID, "dispatch", dispatched)
	e.must(t, http.MethodPost, "/v1/delegations/"+d.ID+"/cancel", e.orch, nil, http.StatusOK)
	events := e.waitEvent(t, d.ID, ledger.EventTypeRemoteTaskNotFound)
	got := e.get(t, d.ID)
	if got.ObligationState != "held" || got.HoldState != "active" || ledger.TaskStatus(got.TaskStatus).Terminal() {
		t.Fatalf("after TaskNotFoundError on cancel: %+v", got)
	}
	if countEvents(events, ledger.EventTypeCancelFailed) != 0 {
		t.Fatalf("TaskNotFoundError recorded as cancel_failed: %+v", events)
	}
	e.CheckInvariants(t)
}

// TestA2ACompensationRedrive: compensation requests exhaust and the
// obligation is compensation_unconfirmed; a redrive by on-call (refused
// from any other state, and to anyone else) records compensation_redriven
// and sends requests again with the same idempotency key, and the ack
// they bring compensates. Budget conservation holds throughout.
func TestA2ACompensationRedrive(t *testing.T) {
	t.Parallel()
	peer := startV03Peer(t, &v03Peer{compOutcome: "failed"}, "127.0.0.1")
	e := newA2AEnv(t, apitest.Worker{CompensationMaxAttempts: 2})
	e.putOrg(t, "supplier", peer.cardURL, http.StatusCreated)
	d := e.dispatch(t, "po-redrive", "supplier")
	e.waitFor(t, d.ID, "dispatch", dispatched)
	path := "/admin/v1/delegations/" + d.ID + "/compensation/redrive"
	reason := map[string]any{"reason": "supplier fixed their compensation handler (INC-7)"}
	if status, body := e.do(t, http.MethodPost, path, e.OncallToken, reason); status != http.StatusConflict || !strings.Contains(string(body), "redrive_not_allowed") {
		t.Fatalf("redrive of a held obligation: %d %s, want 409 redrive_not_allowed", status, body)
	}
	e.must(t, http.MethodPost, "/v1/delegations/"+d.ID+"/cancel", e.orch, nil, http.StatusOK)
	e.waitFor(t, d.ID, "unconfirmed", func(d httpapi.DelegationBody) bool { return d.ObligationState == "compensation_unconfirmed" })
	if status, _ := e.do(t, http.MethodPost, path, e.orch, reason); status != http.StatusForbidden {
		t.Fatalf("redrive by an orchestrator: %d, want 403", status)
	}
	if status, _ := e.do(t, http.MethodPost, path, e.OncallToken, map[string]any{}); status < 400 || status >= 500 {
		t.Fatalf("redrive without a reason: %d, want a 4xx", status)
	}
	peer.mu.Lock()
	peer.compOutcome = "compensated"
	before := len(peer.compReqs)
	peer.mu.Unlock()
	e.must(t, http.MethodPost, path, e.OncallToken, reason, http.StatusOK)
	got := e.waitFor(t, d.ID, "compensated", func(d httpapi.DelegationBody) bool { return d.ObligationState == "compensated" })
	if got.HoldState != "returned" {
		t.Fatalf("after a redriven compensation: %+v", got)
	}
	events := e.events(t, d.ID)
	if countEvents(events, ledger.EventTypeCompensationRedriven) != 1 || countEvents(events, ledger.EventTypeCompensationAcked) != 1 {
		t.Fatalf("events = %+v", events)
	}
	peer.mu.Lock()
	reqs := append([]map[string]any(nil), peer.compReqs...)
	peer.mu.Unlock()
	if len(reqs) <= before {
		t.Fatalf("no compensation request after the redrive: %v", reqs)
	}
	for _, r := range reqs {
		if r["idempotencyKey"] != got.Compensation.IdempotencyKey {
			t.Fatalf("a request with another idempotency key: %v, want %s", r, got.Compensation.IdempotencyKey)
		}
	}
	if status, _ := e.do(t, http.MethodPost, path, e.OncallToken, reason); status != http.StatusConflict {
		t.Fatalf("redrive of a compensated obligation: %d, want 409", status)
	}
	e.CheckInvariants(t)
}

// TestA2ACompensationKeepsMessageIDAfterAmbiguousError: the first
// compensation request is answered with HTTP 400 and the second with a
// malformed reply: neither proves the remote did not process the request,
// so every resend carries the same messageId; the receipt that finally
// comes compensates.
func TestA2ACompensationKeepsMessageIDAfterAmbiguousError(t *testing.T) {
	t.Parallel()
	e, got, compID := compensationResends(t, "ambiguous",
		httpStatus(http.StatusBadRequest), map[string]any{"kind": "task", "status": "not a status"})
	if got.HoldState != "returned" {
		t.Fatalf("after compensation: %+v", got)
	}
	if len(compID) != 3 {
		t.Fatalf("compensation requests %v, want 3", compID)
	}
	for _, id := range compID {
		if id != compID[0] {
			t.Fatalf("a resend after an ambiguous error changed its messageId: %v", compID)
		}
	}
	e.CheckInvariants(t)
}
