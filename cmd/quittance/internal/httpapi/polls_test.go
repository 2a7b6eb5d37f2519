package httpapi_test

import (
	"encoding/json"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/ledger"
)

// Polling a task that does not change, or that the agent no longer
// knows, must not grow the delegation's stream.

// waitCalls waits until the agent got at least n calls of method.
func waitCalls(t *testing.T, a *rawAgent, method string, n int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for a.count(method) < n {
		if time.Now().After(deadline) {
			t.Fatalf("the agent got %d %s calls, want at least %d", a.count(method), method, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// obligationsIn returns what GET /v1/obligations lists for a condition.
func (e *a2aEnv) obligationsIn(t *testing.T, condition string) []httpapi.ObligationBody {
	t.Helper()
	var page httpapi.ObligationListBody
	if err := json.Unmarshal(e.must(t, http.MethodGet, "/v1/obligations?condition="+condition, e.OncallToken, nil, http.StatusOK), &page); err != nil {
		t.Fatal(err)
	}
	return page.Obligations
}

// TestA2APollsWithoutFirstTimestampAreRepeats: the dispatch reply carries
// no status timestamp (the status takes Quittance's clock), and every
// tasks/get reply carries the agent's own, earlier, time for the same
// status. The same status and message is a repeat whatever its
// timestamp: no task_status_stale per poll, no event at all, and
// last_observed_at moves.
func TestA2APollsWithoutFirstTimestampAreRepeats(t *testing.T) {
	t.Parallel()
	agentTime := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339Nano)
	agent := startRawAgent(t, &rawAgent{handle: func(method string, _ int, _ json.RawMessage) (any, *rawRPCError, bool) {
		switch method {
		case "message/send":
			return workingTask("ts-1"), nil, false // no timestamp
		case "tasks/get":
			task := workingTask("ts-1")
			task["status"] = map[string]any{"state": "working", "timestamp": agentTime}
			return task, nil, false
		}
		return nil, &rawRPCError{Code: -32601, Message: "method not found"}, false
	}})
	e := newA2AEnv(t, apitest.Worker{NoPush: true, PollAfter: 30 * time.Millisecond})
	e.putOrg(t, "clocked", agent.cardURL, http.StatusCreated)
	d := e.dispatch(t, "po-clocked", "clocked")
	first := e.waitFor(t, d.ID, "dispatch", dispatched)
	waitCalls(t, agent, "tasks/get", 1)
	before := e.events(t, d.ID)
	observed := *e.get(t, d.ID).LastObservedAt
	waitCalls(t, agent, "tasks/get", 21)
	events := e.events(t, d.ID)
	if n := countEvents(events, ledger.EventTypeTaskStatusStale); n != 0 {
		t.Fatalf("%d task_status_stale events for polls of an unchanged task", n)
	}
	if len(events) != len(before) {
		t.Fatalf("twenty unchanged polls appended %d events: %+v", len(events)-len(before), events[len(before):])
	}
	got := e.get(t, d.ID)
	if got.LastObservedAt == nil || !got.LastObservedAt.After(observed) {
		t.Fatalf("last_observed_at %v did not move past %v", got.LastObservedAt, observed)
	}
	if got.TaskStatus != "working" || got.TaskStatusAt == nil || !got.TaskStatusAt.Equal(*first.TaskStatusAt) {
		t.Fatalf("status after the polls: %s at %v, want working at %v", got.TaskStatus, got.TaskStatusAt, first.TaskStatusAt)
	}
	e.CheckInvariants(t)
}

// TestA2APurgedTaskIsListedOnceNotPerPoll: the agent answers every GetTask
// for the delegation's task with TaskNotFoundError (it purged it). That
// is recorded once per distinct answer, not on every poll; the delegation
// is in the task_not_found condition (listed, with the hold active) and
// never released; a different answer is recorded again, a cancel answered
// so is recorded as its outcome, and when the agent returns the task the
// condition ends.
func TestA2APurgedTaskIsListedOnceNotPerPoll(t *testing.T) {
	t.Parallel()
	var answer atomic.Value
	answer.Store("task not found")
	agent := startRawAgent(t, &rawAgent{handle: func(method string, _ int, _ json.RawMessage) (any, *rawRPCError, bool) {
		switch method {
		case "message/send":
			return workingTask("gone-1"), nil, false
		case "tasks/get", "tasks/cancel":
			if a := answer.Load().(string); a != "" {
				return nil, &rawRPCError{Code: -32001, Message: a}, false
			}
			return workingTask("gone-1"), nil, false
		}
		return nil, &rawRPCError{Code: -32601, Message: "method not found"}, false
	}})
	e := newA2AEnv(t, apitest.Worker{NoPush: true, PollAfter: 30 * time.Millisecond})
	e.putOrg(t, "purging", agent.cardURL, http.StatusCreated)
	d := e.dispatch(t, "po-purging", "purging")
	e.waitFor(t, d.ID, "dispatch", dispatched)
	e.waitEvent(t, d.ID, ledger.EventTypeRemoteTaskNotFound)
	gets := agent.count("tasks/get")
	waitCalls(t, agent, "tasks/get", gets+10)
	events := e.events(t, d.ID)
	if n := countEvents(events, ledger.EventTypeRemoteTaskNotFound); n != 1 {
		t.Fatalf("%d remote_task_not_found events after %d polls answered alike, want 1", n, agent.count("tasks/get"))
	}
	got := e.get(t, d.ID)
	if got.ObligationState != "held" || got.HoldState != "active" || ledger.TaskStatus(got.TaskStatus).Terminal() {
		t.Fatalf("a purged task: %+v", got)
	}
	listed := e.obligationsIn(t, "task_not_found")
	if len(listed) != 1 || listed[0].DelegationID != d.ID || listed[0].TaskNotFoundAt == nil {
		t.Fatalf("condition=task_not_found lists %+v, want %s with task_not_found_at", listed, d.ID)
	}
	if other := e.obligationsIn(t, "dispatch_unknown"); len(other) != 0 {
		t.Fatalf("condition=dispatch_unknown lists %+v", other)
	}
	since := *listed[0].TaskNotFoundAt

	// A different answer is news: one more event, the condition's start kept.
	answer.Store("task purged after 30 days")
	waitCalls(t, agent, "tasks/get", agent.count("tasks/get")+5)
	if n := countEvents(e.events(t, d.ID), ledger.EventTypeRemoteTaskNotFound); n != 2 {
		t.Fatalf("%d remote_task_not_found events after a second, different answer, want 2", n)
	}
	if listed := e.obligationsIn(t, "task_not_found"); len(listed) != 1 || !listed[0].TaskNotFoundAt.Equal(since) {
		t.Fatalf("after a different answer: %+v, want task_not_found_at kept at %v", listed, since)
	}

	// A cancel answered so is recorded (it is the cancel's outcome), and
	// keeps the hold.
	e.must(t, http.MethodPost, "/v1/delegations/"+d.ID+"/cancel", e.orch, nil, http.StatusOK)
	waitCalls(t, agent, "tasks/cancel", 1)
	deadline := time.Now().Add(15 * time.Second)
	for countEvents(e.events(t, d.ID), ledger.EventTypeRemoteTaskNotFound) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the cancel answered TaskNotFoundError was not recorded: %+v", e.events(t, d.ID))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := e.get(t, d.ID); got.ObligationState != "held" || got.HoldState != "active" {
		t.Fatalf("after a cancel answered TaskNotFoundError: %+v", got)
	}

	// The agent returns the task: the condition ends.
	answer.Store("")
	deadline = time.Now().Add(15 * time.Second)
	for len(e.obligationsIn(t, "task_not_found")) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("condition=task_not_found still lists %+v after the task was returned", e.obligationsIn(t, "task_not_found"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if status, body := e.do(t, http.MethodGet, "/v1/obligations?condition=purged", e.OncallToken, nil); status != http.StatusUnprocessableEntity {
		t.Fatalf("an unknown condition: %d %s, want 422", status, body)
	}
	e.CheckInvariants(t)
}
