package httpapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/ledger"
)

// Holds that used to get stuck where nothing listed, polled or alerted on
// them: each now ends in a condition on-call sees.

// sendParams is the part of a v0.3 message/send the in-test agents read.
type sendParams struct {
	Message struct {
		MessageID string `json:"messageId"`
		ContextID string `json:"contextId"`
	} `json:"message"`
}

// contextTask is the v0.3 wire form of a working task in contextID whose
// history names messageID, as ListTasks returns it.
func contextTask(id, contextID, messageID string) map[string]any {
	return map[string]any{
		"kind": "task", "id": id, "contextId": contextID, "status": map[string]any{"state": "working"},
		"history": []any{map[string]any{"kind": "message", "messageId": messageID, "role": "user", "contextId": contextID, "taskId": id,
			"parts": []any{map[string]any{"kind": "text", "text": "…"}}}},
	}
}

// dispatchUnknownReason returns the reason of the delegation's
// dispatch_unknown events, in order.
func dispatchUnknownReasons(t *testing.T, events []ledger.EventRecord) []string {
	t.Helper()
	var reasons []string
	for _, ev := range events {
		if ev.Type != ledger.EventTypeDispatchUnknown {
			continue
		}
		var data struct {
			Reason string `json:"reason"`
		}
		if err := json.Unmarshal(ev.Data, &data); err != nil {
			t.Fatal(err)
		}
		reasons = append(reasons, data.Reason)
	}
	return reasons
}

// TestA2ADispatchTaskIDTakenInTenantIsUnknown: an agent answers a
// dispatch with the id of a task the same tenant recorded on another
// delegation. The reported task is not this delegation's to record, and
// nothing proves whether the agent created one for it: the delegation is
// in the dispatch_unknown condition (reason remote_task_taken) — listed,
// looked up every PollAfter, and resolved once the agent lists its own
// task in the delegation's context. The other delegation keeps its task,
// and the hold never moves.
func TestA2ADispatchTaskIDTakenInTenantIsUnknown(t *testing.T) {
	t.Parallel()
	var listOwn atomic.Bool
	var mu sync.Mutex
	var second sendParams
	agent := startRawAgent(t, &rawAgent{handle: func(method string, call int, params json.RawMessage) (any, *rawRPCError, bool) {
		switch method {
		case "message/send":
			if call == 2 {
				mu.Lock()
				_ = json.Unmarshal(params, &second)
				mu.Unlock()
			}
			return workingTask("dup-1"), nil, false // the same id for every dispatch
		case "tasks/get":
			var p struct {
				ID string `json:"id"`
			}
			_ = json.Unmarshal(params, &p)
			return workingTask(p.ID), nil, false
		case "tasks/list":
			var p struct {
				ContextID string `json:"contextId"`
			}
			_ = json.Unmarshal(params, &p)
			mu.Lock()
			defer mu.Unlock()
			if !listOwn.Load() || p.ContextID != second.Message.ContextID {
				return map[string]any{"tasks": []any{}, "nextPageToken": ""}, nil, false
			}
			return map[string]any{"tasks": []any{contextTask("own-2", p.ContextID, second.Message.MessageID)}, "nextPageToken": ""}, nil, false
		}
		return nil, &rawRPCError{Code: -32601, Message: "method not found"}, false
	}})
	e := newA2AEnv(t, apitest.Worker{NoPush: true, PollAfter: 100 * time.Millisecond})
	e.putOrg(t, "sloppy", agent.cardURL, http.StatusCreated)
	first := e.dispatch(t, "po-first", "sloppy")
	e.waitFor(t, first.ID, "the first dispatch", dispatched)
	d := e.dispatch(t, "po-second", "sloppy")
	events := e.waitEvent(t, d.ID, ledger.EventTypeDispatchUnknown)
	if countEvents(events, ledger.EventTypeRemoteTaskConflict) != 1 {
		t.Fatalf("no remote_task_conflict for the taken task id: %+v", events)
	}
	if got := dispatchUnknownReasons(t, events); len(got) != 1 || got[0] != "remote_task_taken" {
		t.Fatalf("dispatch_unknown reasons = %v, want [remote_task_taken]", got)
	}
	got := e.get(t, d.ID)
	if got.Remote.TaskID != "" || got.ObligationState != "held" || got.HoldState != "active" {
		t.Fatalf("the delegation whose reported task was taken: %+v", got)
	}
	if ids := e.listCondition(t, "dispatch_unknown"); len(ids) != 1 || ids[0] != d.ID {
		t.Fatalf("condition=dispatch_unknown lists %v, want [%s]", ids, d.ID)
	}
	if other := e.get(t, first.ID); other.Remote.TaskID != "dup-1" || other.ObligationState != "held" {
		t.Fatalf("the delegation that recorded the task first: %+v", other)
	}
	// Polled: the context is looked up again, finding nothing at first.
	deadline := time.Now().Add(10 * time.Second)
	for agent.count("tasks/list") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the dispatch_unknown delegation was not looked up again (%d lookups)", agent.count("tasks/list"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := e.get(t, d.ID); got.Remote.TaskID != "" {
		t.Fatalf("resolved by a lookup that found nothing: %+v", got)
	}
	// Resolvable: once the agent lists the delegation's own task, the
	// lookup records it.
	listOwn.Store(true)
	got = e.waitFor(t, d.ID, "the lookup's resolution", dispatched)
	if got.Remote.TaskID != "own-2" || got.ObligationState != "held" || got.HoldState != "active" {
		t.Fatalf("after the lookup found the delegation's task: %+v", got)
	}
	if ids := e.listCondition(t, "dispatch_unknown"); len(ids) != 0 {
		t.Fatalf("condition=dispatch_unknown lists %v after the resolution", ids)
	}
	var budget httpapi.BudgetBody
	_ = json.Unmarshal(e.must(t, http.MethodGet, "/admin/v1/budgets/ops", e.OncallToken, nil, http.StatusOK), &budget)
	if budget.HeldMinor != 25_000 {
		t.Fatalf("budget = %+v, want both holds (25000) held", budget)
	}
	e.CheckInvariants(t)
}

// TestA2ADispatchAgentUnavailableAfterSendIsUnknown: attempt 1 reaches the
// agent, which creates the task and drops the connection; by the resend
// the agent card can no longer be fetched (the org's card URL now answers
// 404). Giving up would leave a hold on a task that exists with nothing
// watching it: the delegation is in the dispatch_unknown condition
// (reason agent_unavailable, no dispatch_failed), listed and looked up
// again every PollAfter, and resolved by that lookup once the card is
// back and the agent lists the task attempt 1 created.
func TestA2ADispatchAgentUnavailableAfterSendIsUnknown(t *testing.T) {
	t.Parallel()
	sent, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var first sendParams
	agent := startRawAgent(t, &rawAgent{handle: func(method string, call int, params json.RawMessage) (any, *rawRPCError, bool) {
		switch method {
		case "message/send":
			if call == 1 {
				mu.Lock()
				_ = json.Unmarshal(params, &first)
				mu.Unlock()
				close(sent)
				<-release
				return nil, nil, true // the task exists; the answer is lost
			}
			return workingTask("never"), nil, false
		case "tasks/list":
			mu.Lock()
			defer mu.Unlock()
			return map[string]any{"tasks": []any{contextTask("made-1", first.Message.ContextID, first.Message.MessageID)}, "nextPageToken": ""}, nil, false
		case "tasks/get":
			return workingTask("made-1"), nil, false
		}
		return nil, &rawRPCError{Code: -32601, Message: "method not found"}, false
	}})
	e := newA2AEnv(t, apitest.Worker{NoPush: true, PollAfter: 100 * time.Millisecond})
	e.putOrg(t, "vanishing", agent.cardURL, http.StatusCreated)
	d := e.dispatch(t, "po-vanishing", "vanishing")
	select {
	case <-sent:
	case <-time.After(15 * time.Second):
		t.Fatal("the dispatch never reached the agent")
	}
	gone := strings.TrimSuffix(agent.cardURL, "/.well-known/agent-card.json") + "/no-card-here"
	e.putOrg(t, "vanishing", gone, http.StatusOK)
	close(release)
	events := e.waitEvent(t, d.ID, ledger.EventTypeDispatchUnknown)
	if got := dispatchUnknownReasons(t, events); len(got) != 1 || got[0] != "agent_unavailable" {
		t.Fatalf("dispatch_unknown reasons = %v, want [agent_unavailable]", got)
	}
	if n := countEvents(events, ledger.EventTypeDispatchFailed); n != 0 {
		t.Fatalf("%d dispatch_failed events: a send that may have reached the agent was given up", n)
	}
	if n := agent.count("message/send"); n != 1 {
		t.Fatalf("the agent got %d sends, want 1 (the card was gone for the resend)", n)
	}
	got := e.get(t, d.ID)
	if got.Remote.TaskID != "" || got.ObligationState != "held" || got.HoldState != "active" {
		t.Fatalf("after the agent became unavailable: %+v", got)
	}
	if ids := e.listCondition(t, "dispatch_unknown"); len(ids) != 1 || ids[0] != d.ID {
		t.Fatalf("condition=dispatch_unknown lists %v, want [%s]", ids, d.ID)
	}
	// The card comes back: the next lookup finds the task attempt 1 made.
	e.putOrg(t, "vanishing", agent.cardURL, http.StatusOK)
	got = e.waitFor(t, d.ID, "the lookup's resolution", dispatched)
	if got.Remote.TaskID != "made-1" || got.ObligationState != "held" || got.HoldState != "active" {
		t.Fatalf("after the lookup: %+v", got)
	}
	if got.Remote.ContextID != delegate.DispatchContextID(uuid.MustParse(d.ID)) {
		t.Fatalf("resolved context = %q", got.Remote.ContextID)
	}
	e.CheckInvariants(t)
}
