package httpapi_test

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/ledger"
)

// plant gives k a task of its own that no Quittance dispatch created: in
// contextID, with messageID in its history (none when ""), in state.
func (k *taskKeeper) plant(id, contextID, messageID, state string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	task := map[string]any{"kind": "task", "id": id, "contextId": contextID, "status": map[string]any{"state": state}}
	if messageID != "" {
		task["history"] = []any{map[string]any{"kind": "message", "messageId": messageID, "role": "user", "contextId": contextID, "taskId": id,
			"parts": []any{map[string]any{"kind": "text", "text": "someone else's order"}}}}
	}
	k.tasks[id] = task
}

// setState changes the state of k's task id, as its agent moves it on.
func (k *taskKeeper) setState(id, state string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.tasks[id]["status"] = map[string]any{"state": state}
}

// dropHistory makes k's task id come back without its history.
func (k *taskKeeper) dropHistory(id string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.tasks[id], "history")
}

// stillUnknown fails the test unless d is still in the dispatch_unknown
// condition with its hold active and ops's money where it was (before).
func (e *a2aEnv) stillUnknown(t *testing.T, id string, before httpapi.BudgetBody) {
	t.Helper()
	got := e.get(t, id)
	if got.Remote.TaskID != "" || got.ObligationState != "held" || got.HoldState != "active" {
		t.Fatalf("a refused resolution changed the delegation: %+v", got)
	}
	if !slices.Contains(e.listCondition(t, "dispatch_unknown"), id) {
		t.Fatal("a refused resolution took the delegation out of dispatch_unknown")
	}
	if b := e.Budget(t, "ops"); b.AvailableMinor != before.AvailableMinor || b.HeldMinor != before.HeldMinor || b.SpentMinor != before.SpentMinor {
		t.Fatalf("a refused resolution moved money: %+v, before %+v", b, before)
	}
}

// TestA2AResolveDispatchNamesTheDelegationsOwnTask: an agent that does not
// list tasks drops the first dispatch (its task exists) and refuses the
// resend, so the delegation is dispatch_unknown. The agent also holds
// tasks of other contexts, one rejected and one completed. On-call naming
// either is refused (409 remote_task_conflict) after Quittance asked the
// agent: a remote_task_conflict event records it, the budget does not
// move, the condition stays. A task the agent does not know, an agent
// that cannot be asked and a context id the agent does not show are
// refused too, recording nothing. The delegation's own task (its history
// holds the dispatch messageId) is accepted; when it then ends rejected,
// the hold is not released: a person named the task, so its end is gated
// (revocation_pending_compensation, compensation asked of the org).
func TestA2AResolveDispatchNamesTheDelegationsOwnTask(t *testing.T) {
	t.Parallel()
	k := &taskKeeper{compWorking: true}
	e := newA2AEnv(t, apitest.Worker{NoPush: true, PollAfter: 100 * time.Millisecond})
	d, _ := e.unknownDispatch(t, k, "nolist")
	k.plant("theirs-rejected", "ctx-someone-else", "msg-someone-else-1", "rejected")
	k.plant("theirs-completed", "ctx-someone-else", "msg-someone-else-2", "completed")
	before := e.Budget(t, "ops")
	path := "/admin/v1/delegations/" + d.ID + "/dispatch/resolve"
	resolve := func(taskID string) *apitest.Response {
		return e.Do(t, http.MethodPost, path, e.OncallToken, map[string]any{"task_id": taskID, "reason": "the org named it, INC-11"})
	}
	conflicts := func() []map[string]any {
		return eventsData(t, e.events(t, d.ID), ledger.EventTypeRemoteTaskConflict)
	}

	for i, taskID := range []string{"theirs-rejected", "theirs-completed"} {
		resolve(taskID).Problem(t, http.StatusConflict, "remote_task_conflict")
		got := conflicts()
		if len(got) != i+1 || got[i]["reported_task_id"] != taskID || got[i]["source"] != "oncall" || got[i]["answered_context_id"] != "ctx-someone-else" {
			t.Fatalf("remote_task_conflict events after naming %s: %v", taskID, got)
		}
		e.stillUnknown(t, d.ID, before)
	}
	resolve("nobody-knows").Problem(t, http.StatusConflict, "remote_task_unknown")
	k.mu.Lock()
	k.onGet = func(string) bool { return true }
	k.mu.Unlock()
	resolve("kt-1").Problem(t, http.StatusBadGateway, "remote_agent_unavailable")
	k.mu.Lock()
	k.onGet = nil
	k.mu.Unlock()
	e.Do(t, http.MethodPost, path, e.OncallToken, map[string]any{"task_id": "kt-1", "context_id": "ctx-guessed", "reason": "INC-11"}).
		Problem(t, http.StatusUnprocessableEntity, "validation_failed")
	if n := len(conflicts()); n != 2 {
		t.Fatalf("refusals that proved no mismatch recorded conflicts: %d, want 2", n)
	}
	e.stillUnknown(t, d.ID, before)
	if n := countEvents(e.events(t, d.ID), ledger.EventTypeDispatchResolved); n != 0 {
		t.Fatalf("dispatch_resolved events after refusals: %d", n)
	}

	var resolved httpapi.DelegationBody
	resolve("kt-1").Expect(t, http.StatusOK).JSON(t, &resolved)
	if resolved.Remote.TaskID != "kt-1" || resolved.Remote.ContextID != delegate.DispatchContextID(uuid.MustParse(d.ID)) {
		t.Fatalf("resolved to %+v", resolved.Remote)
	}
	r := eventsData(t, e.waitEvent(t, d.ID, ledger.EventTypeDispatchResolved), ledger.EventTypeDispatchResolved)
	if r[0]["found_by"] != "oncall" || r[0]["proven_by"] != "message_id" {
		t.Fatalf("dispatch_resolved = %v", r)
	}
	e.waitFor(t, d.ID, "the resolved task observed", func(d httpapi.DelegationBody) bool { return d.TaskStatus == "working" })

	k.setState("kt-1", "rejected")
	got := e.waitFor(t, d.ID, "the rejection observed", func(d httpapi.DelegationBody) bool { return d.TaskStatus == "rejected" })
	if got.ObligationState != "revocation_pending_compensation" || got.HoldState != "active" {
		t.Fatalf("a person-resolved task's rejection: obligation %s, hold %s; want revocation_pending_compensation, active", got.ObligationState, got.HoldState)
	}
	if b := e.Budget(t, "ops"); b.AvailableMinor != before.AvailableMinor || b.HeldMinor != before.HeldMinor {
		t.Fatalf("the rejection moved money: %+v, before %+v", b, before)
	}
	for _, ev := range e.events(t, d.ID) {
		if ev.ObligationTo == "revocation_pending_compensation" && eventData(t, ev)["resolved_by_person"] != true {
			t.Fatalf("the gated end does not say why: %s", ev.Data)
		}
	}
	e.CheckInvariants(t)
}

// TestA2AResolveDispatchRefusesAnotherTenantsTask: another tenant's
// orchestrator records, at the same org, the task id the agent created
// for this delegation's dispatch. On-call naming it is refused (409
// remote_task_taken) although the agent shows it is this delegation's (in
// its context; the agent answers without history): a task id recorded by
// another tenant is never taken. Nothing moves.
func TestA2AResolveDispatchRefusesAnotherTenantsTask(t *testing.T) {
	t.Parallel()
	k := &taskKeeper{}
	e := newA2AEnv(t, apitest.Worker{NoPush: true})
	d, _ := e.unknownDispatch(t, k, "nolist")
	k.dropHistory("kt-1")
	globex := e.NewOrchestrator(t, "globex")
	req := apitest.NewCreateRequest("po-globex", "nolist", "procurement", "ops", 500, "EUR")
	req.Remote.TaskID = "kt-1"
	e.CreateDelegation(t, globex, req)
	before := e.Budget(t, "ops")

	p := e.Do(t, http.MethodPost, "/admin/v1/delegations/"+d.ID+"/dispatch/resolve", e.OncallToken,
		map[string]any{"task_id": "kt-1", "reason": "the org named it, INC-12"}).Problem(t, http.StatusConflict, "remote_task_taken")
	if p.Detail == "" {
		t.Fatal("remote_task_taken without a detail")
	}
	e.stillUnknown(t, d.ID, before)
	if n := countEvents(e.events(t, d.ID), ledger.EventTypeDispatchResolved); n != 0 {
		t.Fatalf("dispatch_resolved events: %d", n)
	}
	e.CheckInvariants(t)
}

// TestA2ADispatchUnknownLookupRefusesAnotherTenantsTask: the same, found by
// Quittance's own ListTasks lookup: another tenant recorded the task id
// the agent then created for this delegation. The lookup finds it in the
// delegation's context but does not take it: a remote_task_conflict event
// (which does not name the other tenant's delegation) and the condition
// stays for on-call.
func TestA2ADispatchUnknownLookupRefusesAnotherTenantsTask(t *testing.T) {
	t.Parallel()
	k := startTaskKeeper(t, &taskKeeper{listTasks: true, onSend: func(call int) string {
		if call == 1 {
			return "drop"
		}
		return "refuse"
	}})
	e := newA2AEnv(t, apitest.Worker{NoPush: true})
	e.putOrg(t, "lister", k.cardURL, http.StatusCreated)
	globex := e.NewOrchestrator(t, "globex")
	req := apitest.NewCreateRequest("po-globex", "lister", "procurement", "ops", 500, "EUR")
	req.Remote.TaskID = "kt-1" // the id the agent gives its next task
	e.CreateDelegation(t, globex, req)
	before := e.Budget(t, "ops")

	d := e.dispatch(t, "po-lister", "lister")
	e.waitEvent(t, d.ID, ledger.EventTypeDispatchUnknown)
	events := e.waitEvent(t, d.ID, ledger.EventTypeRemoteTaskConflict)
	if u := eventsData(t, events, ledger.EventTypeDispatchUnknown); u[0]["lookup"] != "found" {
		t.Fatalf("dispatch_unknown = %v, want lookup found", u)
	}
	c := eventsData(t, events, ledger.EventTypeRemoteTaskConflict)
	if c[0]["reported_task_id"] != "kt-1" || c[0]["source"] != "list_tasks" || c[0]["recorded_by"] != "another_tenant" || c[0]["other_delegation_id"] != nil {
		t.Fatalf("remote_task_conflict = %v", c)
	}
	if n := countEvents(events, ledger.EventTypeDispatchResolved); n != 0 {
		t.Fatalf("the lookup resolved to another tenant's task: %d dispatch_resolved", n)
	}
	held := before
	held.AvailableMinor, held.HeldMinor = before.AvailableMinor-12_500, before.HeldMinor+12_500
	e.stillUnknown(t, d.ID, held)
	e.CheckInvariants(t)
}
