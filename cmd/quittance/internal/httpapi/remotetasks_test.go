package httpapi_test

import (
	"bytes"
	"cmp"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/ledger"
)

// taskKeeper is an in-test A2A v0.3 agent with tasks of its own, on a real
// HTTP server (startRawAgent), that does not deduplicate on messageId: every
// message/send creates a task, in the contextId the client set. onSend says,
// per dispatch send (1, 2, …), what it does after creating the task — or
// before, for a refusal: "reply", "drop" (the task exists, the connection
// is dropped) or "refuse" (-32602 "duplicate messageId", no task). It lists
// tasks by context (tasks/list) when listTasks is set, and answers -32601
// otherwise. A compensation request gets a completed task with a
// compensated receipt. A task in stuck refuses to be canceled
// (TaskNotCancelableError) and keeps working.
type taskKeeper struct {
	*rawAgent
	onSend    func(call int) string
	listTasks bool
	// onCompSend, if set, says per compensation request send what the
	// agent does after creating its task: "reply" or "drop".
	onCompSend func(call int) string
	// push declares push notifications in the card; the push config of
	// the dispatch is kept for pushTask.
	push bool
	// receiptID, if set, is the receiptId of every compensated receipt
	// (else rcpt-<compensation task id>); compWorking answers a
	// compensation request with a task that keeps working, no receipt.
	receiptID   string
	compWorking bool
	// compOutcome, if set, is the outcome of every receipt instead of
	// compensated ("failed": a request that brings no compensation).
	compOutcome string
	// onGet, if set, says per tasks/get (by task id) whether the agent
	// drops the connection instead of answering; set and read under mu.
	onGet func(id string) (drop bool)

	mu        sync.Mutex
	tasks     map[string]map[string]any
	order     []string
	sends     int
	compSends int
	stuck     map[string]bool
	compReqs  []map[string]any
	contexts  []string // the contextId of every dispatch send
	cancelled []string
	pushURL   string
	pushToken string
}

func startTaskKeeper(t *testing.T, k *taskKeeper) *taskKeeper {
	t.Helper()
	k.tasks, k.stuck = map[string]map[string]any{}, map[string]bool{}
	k.rawAgent = startRawAgent(t, &rawAgent{handle: k.handle, push: k.push})
	return k
}

// dupAgent is a taskKeeper whose first dispatch send creates a task and
// drops the connection, so the resend's task is tracked and the first is an
// extra task, found by tasks/list and canceled.
func dupAgent(t *testing.T, k *taskKeeper) *taskKeeper {
	k.listTasks = true
	k.onSend = func(call int) string {
		if call == 1 {
			return "drop"
		}
		return "reply"
	}
	return startTaskKeeper(t, k)
}

// extraTaskDispatch starts k as a dupAgent, registers it as org dup and
// dispatches po to it, and returns the delegation once the extra task (the
// first send's, kt-1) is found and canceled: the resend's task, kt-2, is
// the delegation's.
func (e *a2aEnv) extraTaskDispatch(t *testing.T, k *taskKeeper, po string) httpapi.DelegationBody {
	t.Helper()
	dupAgent(t, k)
	e.putOrg(t, "dup", k.cardURL, http.StatusCreated)
	d := e.dispatch(t, po, "dup")
	e.waitEvent(t, d.ID, ledger.EventTypeRemoteTaskEnded)
	return d
}

// unknownDispatch starts k as an agent whose first dispatch send creates a
// task (kt-1) and drops the connection, and which refuses the resend (the
// same messageId) with -32602: whether the dispatch created a task is
// unknown. It registers k as org name, dispatches po-<name> to it, and
// returns the delegation and its events once dispatch_unknown is recorded.
func (e *a2aEnv) unknownDispatch(t *testing.T, k *taskKeeper, name string) (httpapi.DelegationBody, []ledger.EventRecord) {
	t.Helper()
	k.onSend = func(call int) string {
		if call == 1 {
			return "drop"
		}
		return "refuse"
	}
	startTaskKeeper(t, k)
	e.putOrg(t, name, k.cardURL, http.StatusCreated)
	d := e.dispatch(t, "po-"+name, name)
	return d, e.waitEvent(t, d.ID, ledger.EventTypeDispatchUnknown)
}

// handle answers one call. The result is encoded under k.mu: it holds the
// keeper's own task maps, which a test may change while the reply is sent.
func (k *taskKeeper) handle(method string, _ int, params json.RawMessage) (any, *rawRPCError, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	result, rpcErr, drop := k.answer(method, params)
	if result == nil {
		return nil, rpcErr, drop
	}
	b, err := json.Marshal(result)
	if err != nil {
		return nil, &rawRPCError{Code: -32603, Message: err.Error()}, false
	}
	return json.RawMessage(b), rpcErr, drop
}

// answer is handle's reply; the caller holds k.mu.
func (k *taskKeeper) answer(method string, params json.RawMessage) (any, *rawRPCError, bool) {
	var p struct {
		ID        string `json:"id"`
		ContextID string `json:"contextId"`
		Message   struct {
			MessageID string            `json:"messageId"`
			ContextID string            `json:"contextId"`
			Parts     []json.RawMessage `json:"parts"`
		} `json:"message"`
		Configuration struct {
			Push *struct {
				URL   string `json:"url"`
				Token string `json:"token"`
			} `json:"pushNotificationConfig"`
		} `json:"configuration"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, &rawRPCError{Code: -32602, Message: "bad params"}, false
	}
	switch method {
	case "message/send":
		var req map[string]any
		for _, raw := range p.Message.Parts {
			var part struct {
				Data map[string]any `json:"data"`
			}
			_ = json.Unmarshal(raw, &part)
			if r, ok := part.Data["compensationRequest"].(map[string]any); ok {
				req = r
			}
		}
		if req != nil {
			k.compReqs = append(k.compReqs, req)
			k.compSends++
			drop := k.onCompSend != nil && k.onCompSend(k.compSends) == "drop"
			if k.compWorking {
				return k.newTask(p.Message.ContextID, p.Message.MessageID, "working"), nil, drop
			}
			task := k.newTask(p.Message.ContextID, p.Message.MessageID, "completed")
			receiptID := k.receiptID
			if receiptID == "" {
				receiptID = "rcpt-" + task["id"].(string)
			}
			task["artifacts"] = []any{map[string]any{
				"artifactId": compensation.ReceiptArtifactName, "name": compensation.ReceiptArtifactName,
				"parts": []any{map[string]any{"kind": "data", "data": map[string]any{
					"outcome": cmp.Or(k.compOutcome, "compensated"), "receiptId": receiptID, "taskId": req["taskId"], "idempotencyKey": req["idempotencyKey"],
				}}},
			}}
			return task, nil, drop
		}
		k.sends++
		k.contexts = append(k.contexts, p.Message.ContextID)
		if c := p.Configuration.Push; c != nil {
			k.pushURL, k.pushToken = c.URL, c.Token
		}
		what := k.onSend(k.sends)
		if what == "refuse" {
			return nil, &rawRPCError{Code: -32602, Message: "duplicate messageId"}, false
		}
		task := k.newTask(p.Message.ContextID, p.Message.MessageID, "working")
		return task, nil, what == "drop"
	case "tasks/get":
		if k.onGet != nil && k.onGet(p.ID) {
			return nil, nil, true
		}
		if task, ok := k.tasks[p.ID]; ok {
			return task, nil, false
		}
		return nil, &rawRPCError{Code: -32001, Message: "task not found"}, false
	case "tasks/cancel":
		task, ok := k.tasks[p.ID]
		switch {
		case !ok:
			return nil, &rawRPCError{Code: -32001, Message: "task not found"}, false
		case k.stuck[p.ID]:
			return nil, &rawRPCError{Code: -32002, Message: "task not cancelable"}, false
		case task["status"].(map[string]any)["state"] != "working":
			return nil, &rawRPCError{Code: -32002, Message: "task is in a terminal state"}, false
		}
		k.cancelled = append(k.cancelled, p.ID)
		task["status"] = map[string]any{"state": "canceled"}
		return task, nil, false
	case "tasks/list":
		if !k.listTasks {
			break
		}
		var out []any
		for _, id := range slices.Backward(k.order) { // newest first
			if p.ContextID == "" || k.tasks[id]["contextId"] == p.ContextID {
				out = append(out, k.tasks[id])
			}
		}
		return map[string]any{"tasks": out, "nextPageToken": ""}, nil, false
	}
	return nil, &rawRPCError{Code: -32601, Message: "method not found"}, false
}

// newTask creates a task in contextID; the caller holds k.mu.
func (k *taskKeeper) newTask(contextID, messageID, state string) map[string]any {
	id := "kt-" + strconv.Itoa(len(k.order)+1)
	if contextID == "" {
		contextID = "ctx-" + id
	}
	task := map[string]any{
		"kind": "task", "id": id, "contextId": contextID, "status": map[string]any{"state": state},
		"history": []any{map[string]any{"kind": "message", "messageId": messageID, "role": "user", "contextId": contextID, "taskId": id,
			"parts": []any{map[string]any{"kind": "text", "text": "…"}}}},
	}
	k.tasks[id], k.order = task, append(k.order, id)
	return task
}

// pushTask sends a v0.3 push notification (the task object) about task id
// to the push endpoint the dispatch registered, and returns the HTTP status.
func (k *taskKeeper) pushTask(t *testing.T, id string) int {
	t.Helper()
	k.mu.Lock()
	body, err := json.Marshal(k.tasks[id])
	url, token := k.pushURL, k.pushToken
	k.mu.Unlock()
	if err != nil || url == "" {
		t.Fatalf("no push config registered (%v)", err)
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-A2A-Notification-Token", token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// state returns a task's state at the agent.
func (k *taskKeeper) state(id string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	st, _ := k.tasks[id]["status"].(map[string]any)
	s, _ := st["state"].(string)
	return s
}

func (k *taskKeeper) setStuck(id string, stuck bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.stuck[id] = stuck
}

func (k *taskKeeper) compensationRequests() []map[string]any {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.compReqs)
}

// awaitCompensationRequests returns the compensation requests the agent
// received, once there is one (or none after 10 s).
func (k *taskKeeper) awaitCompensationRequests() []map[string]any {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if reqs := k.compensationRequests(); len(reqs) > 0 || time.Now().After(deadline) {
			return reqs
		}
	}
}

// eventsData returns the data of the delegation's events of typ.
func eventsData(t *testing.T, events []ledger.EventRecord, typ ledger.EventType) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, ev := range events {
		if ev.Type == typ {
			out = append(out, eventData(t, ev))
		}
	}
	return out
}

// TestA2AResendSecondTaskAccountedFor: attempt 1 of the dispatch creates a
// task and the connection drops; the agent does not deduplicate on
// messageId, so the resend creates a second task, which the reply names.
// Quittance dispatched in a context of its own choosing and looks it up
// (tasks/list): the first task is recorded on the delegation as an extra
// task (remote_task_found) and canceled. When the orchestrator revokes the
// delegation, the compensation request names the extra task. While the
// agent refuses to cancel that task, the compensated receipt does not
// close the obligation; once it is canceled, the obligation is compensated.
func TestA2AResendSecondTaskAccountedFor(t *testing.T) {
	t.Parallel()
	k := dupAgent(t, &taskKeeper{})
	e := newA2AEnv(t, apitest.Worker{NoPush: true, PollAfter: 50 * time.Millisecond})
	e.putOrg(t, "dup", k.cardURL, http.StatusCreated)
	d := e.dispatch(t, "po-dup", "dup")
	wantContext := delegate.DispatchContextID(uuid.MustParse(d.ID))
	events := e.waitEvent(t, d.ID, ledger.EventTypeRemoteTaskFound)
	got := e.get(t, d.ID)
	if got.Remote.TaskID != "kt-2" || got.Remote.ContextID != wantContext {
		t.Fatalf("tracked task = %+v, want kt-2 in %s", got.Remote, wantContext)
	}
	k.mu.Lock()
	contexts := slices.Clone(k.contexts)
	k.mu.Unlock()
	if len(contexts) != 2 || contexts[0] != wantContext || contexts[1] != wantContext {
		t.Fatalf("dispatch contexts = %v, want %s on every attempt", contexts, wantContext)
	}
	found := eventsData(t, events, ledger.EventTypeRemoteTaskFound)
	if len(found) != 1 || found[0]["task_id"] != "kt-1" || found[0]["found_by"] != "list_tasks" || found[0]["purpose"] != "dispatch" {
		t.Fatalf("remote_task_found = %v, want kt-1 by list_tasks", found)
	}
	e.waitEvent(t, d.ID, ledger.EventTypeRemoteTaskEnded)
	if s := k.state("kt-1"); s != "canceled" {
		t.Fatalf("the extra task is %q at the agent, want canceled", s)
	}
	if s := k.state("kt-2"); s != "working" {
		t.Fatalf("the tracked task is %q, want working", s)
	}

	// A second extra task, made by hand at the agent in the delegation's
	// context, that will not be canceled: it is found by the compensation
	// lookup and keeps the obligation open.
	k.mu.Lock()
	k.newTask(wantContext, delegate.DispatchMessageID(uuid.MustParse(d.ID)), "working")
	k.stuck["kt-3"] = true
	k.mu.Unlock()

	e.must(t, http.MethodPost, "/v1/delegations/"+d.ID+"/cancel", e.orch, nil, http.StatusOK)
	e.waitFor(t, d.ID, "a compensation request", func(d httpapi.DelegationBody) bool { return d.Compensation != nil && d.Compensation.Attempts > 0 })
	reqs := k.compensationRequests()
	if len(reqs) == 0 {
		t.Fatal("no compensation request")
	}
	extra, _ := reqs[0]["extraTaskIds"].([]any)
	if len(extra) != 2 || extra[0] != "kt-1" || extra[1] != "kt-3" || reqs[0]["taskId"] != "kt-2" {
		t.Fatalf("compensation request = %v, want taskId kt-2 and extraTaskIds [kt-1 kt-3]", reqs[0])
	}
	// The receipt came back compensated, but kt-3 is not terminal.
	time.Sleep(500 * time.Millisecond)
	if got := e.get(t, d.ID); got.ObligationState != "revocation_pending_compensation" || got.HoldState != "active" {
		t.Fatalf("closed while an extra task runs: %+v", got)
	}
	k.setStuck("kt-3", false)
	got = e.waitFor(t, d.ID, "compensated", func(d httpapi.DelegationBody) bool { return d.ObligationState == "compensated" })
	if got.HoldState != "returned" || k.state("kt-3") != "canceled" {
		t.Fatalf("after compensation: %+v, kt-3 %s", got, k.state("kt-3"))
	}
	events = e.events(t, d.ID)
	if n := countEvents(events, ledger.EventTypeRemoteTaskFound); n != 2 {
		t.Fatalf("%d remote_task_found events, want 2", n)
	}
	if n := countEvents(events, ledger.EventTypeRemoteTaskEnded); n != 2 {
		t.Fatalf("%d remote_task_ended events, want 2", n)
	}
	// Every task the agent holds for the delegation is accounted for.
	for _, id := range []string{"kt-1", "kt-3"} {
		if s := k.state(id); s != "canceled" {
			t.Fatalf("extra task %s is %s", id, s)
		}
	}
	e.CheckInvariants(t)
}

// TestA2AExtraTaskKeepsRejectionFromReleasing: an extra task exists and the
// tracked task then ends rejected. Rejection alone would release the hold;
// with another task of the delegation that may have done the work, the
// obligation waits for compensation instead, and the request names it.
func TestA2AExtraTaskKeepsRejectionFromReleasing(t *testing.T) {
	t.Parallel()
	k := &taskKeeper{}
	e := newA2AEnv(t, apitest.Worker{NoPush: true, PollAfter: 50 * time.Millisecond})
	d := e.extraTaskDispatch(t, k, "po-dup-rejected")
	k.mu.Lock()
	k.tasks["kt-2"]["status"] = map[string]any{"state": "rejected"}
	k.mu.Unlock()
	got := e.waitFor(t, d.ID, "the rejection", func(d httpapi.DelegationBody) bool { return d.TaskStatus == "rejected" })
	if got.ObligationState == "released" {
		t.Fatalf("released with an extra task: %+v", got)
	}
	got = e.waitFor(t, d.ID, "compensated", func(d httpapi.DelegationBody) bool { return d.ObligationState == "compensated" })
	reqs := k.compensationRequests()
	if extra, _ := reqs[0]["extraTaskIds"].([]any); len(extra) != 1 || extra[0] != "kt-1" {
		t.Fatalf("compensation request = %v", reqs[0])
	}
	var changed map[string]any
	for _, m := range eventsData(t, e.events(t, d.ID), ledger.EventTypeTaskStatusChanged) {
		if m["state"] == "rejected" {
			changed = m
		}
	}
	if ids, _ := changed["extra_remote_tasks"].([]any); len(ids) != 1 || ids[0] != "kt-1" {
		t.Fatalf("the rejected status does not name the extra task: %v", changed)
	}
	if got.HoldState != "returned" {
		t.Fatalf("after compensation: %+v", got)
	}
	e.CheckInvariants(t)
}

// TestA2ADispatchUnknownResolvedByListTasks: attempts 1 and 2 each create a
// task and the connection drops; attempt 3 is refused with -32602. The
// dispatch is unknown, but the agent lists tasks: the lookup on the
// delegation's context finds both, the older becomes the delegation's task
// (dispatch_resolved, found_by list_tasks, the condition ends) and the
// other is an extra task, canceled. The hold never moved.
func TestA2ADispatchUnknownResolvedByListTasks(t *testing.T) {
	t.Parallel()
	k := startTaskKeeper(t, &taskKeeper{listTasks: true, onSend: func(call int) string {
		if call <= 2 {
			return "drop"
		}
		return "refuse"
	}})
	e := newA2AEnv(t, apitest.Worker{NoPush: true, PollAfter: 50 * time.Millisecond})
	e.putOrg(t, "dup", k.cardURL, http.StatusCreated)
	d := e.dispatch(t, "po-lookup", "dup")
	events := e.waitEvent(t, d.ID, ledger.EventTypeDispatchResolved)
	unknown := eventsData(t, events, ledger.EventTypeDispatchUnknown)
	if len(unknown) != 1 || unknown[0]["lookup"] != "found" || unknown[0]["reason"] != "resend_refused" {
		t.Fatalf("dispatch_unknown = %v", unknown)
	}
	resolved := eventsData(t, events, ledger.EventTypeDispatchResolved)
	if resolved[0]["found_by"] != "list_tasks" || resolved[0]["task_id"] != "kt-1" {
		t.Fatalf("dispatch_resolved = %v", resolved)
	}
	for _, ev := range events {
		if ev.Type == ledger.EventTypeDispatchResolved && ev.Actor != "system:a2a" {
			t.Fatalf("resolved by %s", ev.Actor)
		}
		if ev.ObligationTo != "" {
			t.Fatalf("an obligation transition: %+v", ev)
		}
	}
	got := e.waitFor(t, d.ID, "the resolved task observed", func(d httpapi.DelegationBody) bool { return d.TaskStatus == "working" })
	if got.Remote.TaskID != "kt-1" || got.ObligationState != "held" || got.HoldState != "active" {
		t.Fatalf("after the lookup: %+v", got)
	}
	if ids := e.listCondition(t, "dispatch_unknown"); len(ids) != 0 {
		t.Fatalf("still listed as dispatch_unknown: %v", ids)
	}
	e.waitEvent(t, d.ID, ledger.EventTypeRemoteTaskEnded)
	found := eventsData(t, e.events(t, d.ID), ledger.EventTypeRemoteTaskFound)
	if len(found) != 1 || found[0]["task_id"] != "kt-2" {
		t.Fatalf("remote_task_found = %v, want kt-2", found)
	}
	if k.state("kt-2") != "canceled" || k.state("kt-1") != "working" {
		t.Fatalf("agent tasks: kt-1 %s, kt-2 %s", k.state("kt-1"), k.state("kt-2"))
	}
	e.CheckInvariants(t)
}

// TestA2ADispatchUnknownWithoutListTasksStaysForOncall: the same ambiguous
// dispatch to an agent that does not list tasks (-32601): nothing can be
// looked up, the condition stays for on-call (lookup not_supported), the
// hold stays, and on-call's resolution still works.
func TestA2ADispatchUnknownWithoutListTasksStaysForOncall(t *testing.T) {
	t.Parallel()
	k := &taskKeeper{}
	e := newA2AEnv(t, apitest.Worker{NoPush: true})
	d, events := e.unknownDispatch(t, k, "nolist")
	if u := eventsData(t, events, ledger.EventTypeDispatchUnknown); u[0]["lookup"] != "not_supported" {
		t.Fatalf("dispatch_unknown = %v, want lookup not_supported", u)
	}
	if k.count("tasks/list") == 0 {
		t.Fatal("no lookup was tried")
	}
	time.Sleep(200 * time.Millisecond)
	if got := e.get(t, d.ID); got.Remote.TaskID != "" || got.ObligationState != "held" || got.HoldState != "active" {
		t.Fatalf("after an unanswerable lookup: %+v", got)
	}
	if ids := e.listCondition(t, "dispatch_unknown"); len(ids) != 1 || ids[0] != d.ID {
		t.Fatalf("condition=dispatch_unknown lists %v, want [%s]", ids, d.ID)
	}
	if countEvents(e.events(t, d.ID), ledger.EventTypeDispatchResolved) != 0 {
		t.Fatal("resolved without a lookup")
	}
	e.must(t, http.MethodPost, "/admin/v1/delegations/"+d.ID+"/dispatch/resolve", e.OncallToken,
		map[string]any{"task_id": "kt-1", "reason": "the org named it, INC-9"}, http.StatusOK)
	got := e.waitFor(t, d.ID, "the resolved task observed", func(d httpapi.DelegationBody) bool { return d.TaskStatus == "working" })
	if got.Remote.TaskID != "kt-1" {
		t.Fatalf("after on-call resolution: %+v", got)
	}
	e.CheckInvariants(t)
}

// TestA2ACompensationResendSecondTaskAccountedFor: the first compensation
// request creates a compensation task and the connection drops; the agent
// does not deduplicate, so the resend (same messageId) creates a second
// one. Before resending, Quittance looks the context up: the first
// compensation task is recorded as an extra task (purpose compensation,
// already completed, so there is nothing to cancel), and the resend names
// it; the obligation is compensated once it is terminal and named.
func TestA2ACompensationResendSecondTaskAccountedFor(t *testing.T) {
	t.Parallel()
	k := startTaskKeeper(t, &taskKeeper{listTasks: true,
		onSend:     func(int) string { return "reply" },
		onCompSend: func(call int) string { return map[bool]string{true: "drop", false: "reply"}[call == 1] },
	})
	e := newA2AEnv(t, apitest.Worker{NoPush: true})
	e.putOrg(t, "dup", k.cardURL, http.StatusCreated)
	d := e.dispatch(t, "po-comp-dup", "dup")
	e.waitFor(t, d.ID, "the dispatched task", dispatched)
	e.must(t, http.MethodPost, "/v1/delegations/"+d.ID+"/cancel", e.orch, nil, http.StatusOK)
	got := e.waitFor(t, d.ID, "compensated", func(d httpapi.DelegationBody) bool { return d.ObligationState == "compensated" })
	if got.Remote.TaskID != "kt-1" || got.HoldState != "returned" {
		t.Fatalf("after compensation: %+v", got)
	}
	events := e.events(t, d.ID)
	found := eventsData(t, events, ledger.EventTypeRemoteTaskFound)
	if len(found) != 1 || found[0]["task_id"] != "kt-2" || found[0]["purpose"] != "compensation" || found[0]["state"] != "completed" {
		t.Fatalf("remote_task_found = %v, want the first compensation task kt-2, completed", found)
	}
	reqs := k.compensationRequests()
	if len(reqs) != 2 {
		t.Fatalf("%d compensation requests, want 2", len(reqs))
	}
	if _, named := reqs[0]["extraTaskIds"]; named {
		t.Fatalf("the first request named extra tasks: %v", reqs[0])
	}
	if extra, _ := reqs[1]["extraTaskIds"].([]any); len(extra) != 1 || extra[0] != "kt-2" {
		t.Fatalf("the resend = %v, want extraTaskIds [kt-2]", reqs[1])
	}
	requested := eventsData(t, events, ledger.EventTypeCompensationRequested)
	if len(requested) != 1 || requested[0]["compensation_task_id"] != "kt-3" {
		t.Fatalf("compensation_requested = %v, want the answer kt-3", requested)
	}
	e.CheckInvariants(t)
}

// TestA2ADispatchUnknownLookedUpAgain: when the dispatch became unknown the
// agent did not list tasks; later it does. The poller looks the
// dispatch_unknown delegation's context up again every PollAfter, finds the
// task and resolves the condition without a person.
func TestA2ADispatchUnknownLookedUpAgain(t *testing.T) {
	t.Parallel()
	k := &taskKeeper{}
	e := newA2AEnv(t, apitest.Worker{NoPush: true, PollAfter: 50 * time.Millisecond})
	d, events := e.unknownDispatch(t, k, "later")
	if u := eventsData(t, events, ledger.EventTypeDispatchUnknown); u[0]["lookup"] != "not_supported" {
		t.Fatalf("dispatch_unknown = %v", u)
	}
	for deadline := time.Now().Add(10 * time.Second); k.count("tasks/list") < 3; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the lookup was not repeated (%d tasks/list calls)", k.count("tasks/list"))
		}
	}
	if got := e.get(t, d.ID); got.Remote.TaskID != "" || got.ObligationState != "held" {
		t.Fatalf("resolved without a task found: %+v", got)
	}
	k.mu.Lock()
	k.listTasks = true
	k.mu.Unlock()
	events = e.waitEvent(t, d.ID, ledger.EventTypeDispatchResolved)
	if r := eventsData(t, events, ledger.EventTypeDispatchResolved); r[0]["found_by"] != "list_tasks" || r[0]["task_id"] != "kt-1" {
		t.Fatalf("dispatch_resolved = %v", r)
	}
	got := e.waitFor(t, d.ID, "the resolved task observed", func(d httpapi.DelegationBody) bool { return d.TaskStatus == "working" })
	if got.Remote.TaskID != "kt-1" || got.HoldState != "active" {
		t.Fatalf("after the lookup: %+v", got)
	}
	if ids := e.listCondition(t, "dispatch_unknown"); len(ids) != 0 {
		t.Fatalf("still listed: %v", ids)
	}
	e.CheckInvariants(t)
}

// TestA2ADispatchUnknownResolvedByPush: the agent lists no tasks, so the
// lookup cannot resolve the unknown dispatch; a later push about the task
// the first attempt created (with the push token the dispatch registered)
// is confirmed with GetTask — in the delegation's own context — and
// resolves the condition (found_by push). A push about a task in another
// context resolves nothing.
func TestA2ADispatchUnknownResolvedByPush(t *testing.T) {
	t.Parallel()
	k := &taskKeeper{push: true}
	e := newA2AEnv(t, apitest.Worker{})
	d, events := e.unknownDispatch(t, k, "pusher")
	if u := eventsData(t, events, ledger.EventTypeDispatchUnknown); u[0]["lookup"] != "not_supported" {
		t.Fatalf("dispatch_unknown = %v", u)
	}

	k.mu.Lock()
	k.newTask("ctx-elsewhere", "someone-else", "working") // kt-2
	k.mu.Unlock()
	if status := k.pushTask(t, "kt-2"); status != http.StatusAccepted {
		t.Fatalf("push about kt-2 answered %d", status)
	}
	events = e.waitEvent(t, d.ID, ledger.EventTypePushRefused)
	if r := eventsData(t, events, ledger.EventTypePushRefused); r[0]["pushed_task_id"] != "kt-2" || r[0]["reason"] != "task_not_delegations" {
		t.Fatalf("push_refused = %v", r)
	}
	if got := e.get(t, d.ID); got.Remote.TaskID != "" {
		t.Fatalf("a task in another context resolved the dispatch: %+v", got)
	}

	if status := k.pushTask(t, "kt-1"); status != http.StatusAccepted {
		t.Fatalf("push about kt-1 answered %d", status)
	}
	events = e.waitEvent(t, d.ID, ledger.EventTypeDispatchResolved)
	if r := eventsData(t, events, ledger.EventTypeDispatchResolved); r[0]["found_by"] != "push" || r[0]["task_id"] != "kt-1" {
		t.Fatalf("dispatch_resolved = %v", r)
	}
	got := e.get(t, d.ID)
	if got.Remote.TaskID != "kt-1" || got.TaskStatus != "working" || got.ObligationState != "held" || got.HoldState != "active" {
		t.Fatalf("after the push: %+v", got)
	}
	if ids := e.listCondition(t, "dispatch_unknown"); len(ids) != 0 {
		t.Fatalf("still listed: %v", ids)
	}
	e.CheckInvariants(t)
}
