package httpapi_test

import (
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/ledger"
)

// TestA2AResolveDispatchUnknown: two dispatches end dispatch_unknown (the
// agent created each task but the answer was lost, and refused the resend
// as a duplicate). On-call records the task the org names for one of them;
// the condition ends, a dispatch_resolved event says who and why, and the
// worker observes the task at once, so it is tracked from then on. The
// hold never moves. Finance may not resolve, a reason is required, the
// same task cannot be given to the other delegation, and a delegation not
// in the condition cannot be resolved.
func TestA2AResolveDispatchUnknown(t *testing.T) {
	t.Parallel()
	agent := startLostAnswerAgent(t)
	e := newA2AEnv(t, apitest.Worker{NoPush: true})
	e.putOrg(t, "flaky", agent.cardURL, http.StatusCreated)
	d := e.dispatch(t, "po-resolve", "flaky")
	other := e.dispatch(t, "po-resolve-2", "flaky")
	e.waitEvent(t, d.ID, ledger.EventTypeDispatchUnknown)
	e.waitEvent(t, other.ID, ledger.EventTypeDispatchUnknown)
	path := "/admin/v1/delegations/" + d.ID + "/dispatch/resolve"
	body := map[string]any{"task_id": "t-found", "context_id": "ctx-t-found", "reason": "Flaky's ops confirmed the task by messageId, INC-7"}

	finance := e.NewToken(t, ledger.RoleFinance, "", "finance")
	e.Do(t, http.MethodPost, path, finance, body).Problem(t, http.StatusForbidden, "")
	e.Do(t, http.MethodPost, path, e.orch, body).Problem(t, http.StatusForbidden, "")
	e.Do(t, http.MethodPost, path, e.OncallToken, map[string]any{"task_id": "t-found", "reason": ""}).Problem(t, http.StatusUnprocessableEntity, "")
	if got := e.get(t, d.ID); got.Remote.TaskID != "" {
		t.Fatalf("a refused resolution recorded a task: %+v", got)
	}

	e.must(t, http.MethodPost, path, e.OncallToken, body, http.StatusOK)
	events := e.waitEvent(t, d.ID, ledger.EventTypeDispatchResolved)
	for _, ev := range events {
		if ev.ObligationTo != "" {
			t.Fatalf("an obligation transition on resolution: %+v", ev)
		}
	}
	deadline := time.Now().Add(15 * time.Second)
	for e.get(t, d.ID).TaskStatus != "working" {
		if time.Now().After(deadline) {
			t.Fatalf("the resolved task was not observed: %+v (tasks/get calls %d)", e.get(t, d.ID), agent.count("tasks/get"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	got := e.get(t, d.ID)
	if got.Remote.TaskID != "t-found" || got.ObligationState != "held" || got.HoldState != "active" {
		t.Fatalf("after resolution: %+v", got)
	}
	if ids := e.listCondition(t, "dispatch_unknown"); len(ids) != 1 || ids[0] != other.ID {
		t.Fatalf("condition=dispatch_unknown lists %v, want only [%s]", ids, other.ID)
	}

	e.Do(t, http.MethodPost, path, e.OncallToken, body).Problem(t, http.StatusConflict, "dispatch_not_unknown")
	e.Do(t, http.MethodPost, "/admin/v1/delegations/"+other.ID+"/dispatch/resolve", e.OncallToken, body).
		Problem(t, http.StatusConflict, "remote_task_taken")
	e.CheckInvariants(t)
}

// startLostAnswerAgent serves an agent that creates the task of each
// message it is sent but whose answer to the first send is lost, refuses
// the resend as a duplicate (so the dispatch ends dispatch_unknown), and
// shows every message it was sent in each task's history.
func startLostAnswerAgent(t *testing.T) *rawAgent {
	t.Helper()
	var mu sync.Mutex
	sends := map[string]int{} // per messageId
	return startRawAgent(t, &rawAgent{handle: func(method string, _ int, params json.RawMessage) (any, *rawRPCError, bool) {
		switch method {
		case "message/send":
			var p struct {
				Message struct {
					MessageID string `json:"messageId"`
				} `json:"message"`
			}
			_ = json.Unmarshal(params, &p)
			mu.Lock()
			sends[p.Message.MessageID]++
			n := sends[p.Message.MessageID]
			mu.Unlock()
			if n == 1 {
				return nil, nil, true // the task exists at the remote; the answer is lost
			}
			return nil, &rawRPCError{Code: -32602, Message: "duplicate messageId"}, false
		case "tasks/get":
			var p struct {
				ID string `json:"id"`
			}
			_ = json.Unmarshal(params, &p)
			// The agent holds every message it was sent in the task's
			// history: it shows the task is each delegation's.
			task := workingTask(p.ID)
			var history []any
			mu.Lock()
			for id := range sends {
				history = append(history, map[string]any{"kind": "message", "messageId": id, "role": "user", "parts": []any{}})
			}
			mu.Unlock()
			task["history"] = history
			return task, nil, false
		}
		return nil, &rawRPCError{Code: -32601, Message: "method not found"}, false
	}})
}
