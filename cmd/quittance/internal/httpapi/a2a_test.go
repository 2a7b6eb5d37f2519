package httpapi_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"
	"github.com/a2aproject/a2a-go/a2asrv/push"
	"github.com/google/uuid"

	"github.com/quittance/quittance/cmd/quittance/internal/demoagent"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/compensation/extension"
	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/delegate/egress"
	"github.com/quittance/quittance/ledger"
)

// These tests run the whole A2A lifecycle through Quittance's public API —
// dispatch, push, poll, cancel, compensation over A2A — against a remote
// agent we did not write: the a2a-go v0.3.3 server, in process, on
// loopback. Quittance's outbound calls go through the production egress
// client, allowing http and 127.0.0.1/32 only (apitest.LoopbackEgress).

const a2aLedgerID = "ledger-a2a-test"

// v03Peer is a remote supplier agent on a2a-go v0.3.3. Tasks work until
// released (completed), canceled, or refused cancel; a message carrying a
// compensationRequest data part is answered with a compensation-receipt
// artifact whose outcome is compOutcome ("pending": a pending receipt and
// a working task, then, once compRelease is closed, a compensated receipt
// and a completed task). With refuseWith set, every message is refused
// with that error before a task exists. With purgeOnCancel set, a cancel
// purges the task (see purgingStore): the cancel and every later call on
// it answer TaskNotFoundError.
type v03Peer struct {
	refuseCancel  bool
	purgeOnCancel bool
	compOutcome   string
	refuseWith    error
	compRelease   chan struct{}
	// receiptExtra is added to every compensation receipt (a
	// reversedAmountMinor).
	receiptExtra map[string]any

	release chan struct{}
	stop    chan struct{}

	mu         sync.Mutex
	messageIDs []string
	compReqs   []map[string]any
	metadata   []map[string]any // of every message received
	tasks      atomic.Int32

	store   *purgingStore
	srv     *httptest.Server
	cardURL string
}

func (p *v03Peer) Execute(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	p.mu.Lock()
	p.messageIDs = append(p.messageIDs, rc.Message.ID)
	p.metadata = append(p.metadata, rc.Message.Metadata)
	if p.refuseWith != nil {
		p.mu.Unlock()
		return p.refuseWith
	}
	var req map[string]any
	for _, part := range rc.Message.Parts {
		if dp, ok := part.(a2a.DataPart); ok {
			if r, ok := dp.Data["compensationRequest"].(map[string]any); ok {
				req = r
				p.compReqs = append(p.compReqs, r)
			}
		}
	}
	outcome := p.compOutcome
	p.mu.Unlock()
	if req != nil {
		if outcome == "" {
			outcome = "compensated"
		}
		receipt := func(outcome string) error {
			data := map[string]any{
				"outcome": outcome, "receiptId": "rcpt-" + string(rc.TaskID), "taskId": req["taskId"], "idempotencyKey": req["idempotencyKey"],
			}
			maps.Copy(data, p.receiptExtra)
			if outcome == "not_supported" {
				data["reason"] = "orders of this kind cannot be reversed"
			}
			if err := extension.ValidateValue(extension.SchemaReceipt, data); err != nil {
				return fmt.Errorf("the peer's receipt breaks the extension's schema: %w", err)
			}
			art := a2a.NewArtifactEvent(rc, a2a.DataPart{Data: data})
			art.Artifact.Name = compensation.ReceiptArtifactName
			return q.Write(ctx, art)
		}
		if err := receipt(outcome); err != nil {
			return err
		}
		if outcome == "pending" {
			if err := q.Write(ctx, a2a.NewStatusUpdateEvent(rc, a2a.TaskStateWorking, nil)); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
				return nil
			case <-p.stop:
				return nil
			case <-p.compRelease:
			}
			if err := receipt("compensated"); err != nil {
				return err
			}
		}
		done := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateCompleted, nil)
		done.Final = true
		return q.Write(ctx, done)
	}
	p.tasks.Add(1)
	if err := q.Write(ctx, a2a.NewStatusUpdateEvent(rc, a2a.TaskStateWorking, nil)); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return nil
	case <-p.stop:
		return finishOnStop(ctx, rc, q)
	case <-p.release:
		done := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateCompleted, nil)
		done.Final = true
		return q.Write(ctx, done)
	}
}

// finishOnStop ends a task the test left working when the peer stops:
// a2a-go keeps an execution, and its event broker, running until the
// executor writes a final event, so returning without one would leave
// their goroutines behind (internal/leaktest fails the package then).
func finishOnStop(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	ev := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateCanceled, nil)
	ev.Final = true
	return q.Write(ctx, ev)
}

func (p *v03Peer) Cancel(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	if p.refuseCancel {
		return a2a.ErrTaskNotCancelable
	}
	if p.purgeOnCancel {
		// The agent forgets the task at once; its effects stand. Its
		// execution goes on unseen until the peer stops (finishOnStop),
		// and nothing it writes is stored again.
		p.store.purge(rc.TaskID)
		return fmt.Errorf("task %s purged: %w", rc.TaskID, a2a.ErrTaskNotFound)
	}
	ev := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateCanceled, nil)
	ev.Final = true
	return q.Write(ctx, ev)
}

func (p *v03Peer) received() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.messageIDs...)
}

// startV03Peer serves p on ip (127.0.0.1 unless given).
func startV03Peer(t *testing.T, p *v03Peer, ip string) *v03Peer {
	t.Helper()
	p.stop = make(chan struct{})
	if p.release == nil {
		p.release = make(chan struct{})
	}
	p.store = newPurgingStore()
	p.srv, p.cardURL = serveA2APeer(t, p, ip, "sells pallets", a2asrv.WithTaskStore(p.store))
	t.Cleanup(func() { close(p.stop) })
	return p
}

// purgingStore is an a2asrv.TaskStore that can purge a task, as an agent
// with a short retention does: a purged task is never loaded or saved
// again, so a2a-go answers every call naming it (GetTask, CancelTask) with
// TaskNotFoundError. Tasks are kept as JSON, so no caller shares one.
type purgingStore struct {
	mu     sync.Mutex
	tasks  map[a2a.TaskID][]byte
	purged map[a2a.TaskID]bool
}

func newPurgingStore() *purgingStore {
	return &purgingStore{tasks: map[a2a.TaskID][]byte{}, purged: map[a2a.TaskID]bool{}}
}

func (s *purgingStore) Save(_ context.Context, task *a2a.Task) error {
	b, err := json.Marshal(task)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.purged[task.ID] {
		s.tasks[task.ID] = b
	}
	return nil
}

func (s *purgingStore) Get(_ context.Context, id a2a.TaskID) (*a2a.Task, error) {
	s.mu.Lock()
	b, ok := s.tasks[id]
	s.mu.Unlock()
	if !ok {
		return nil, a2a.ErrTaskNotFound
	}
	var task a2a.Task
	if err := json.Unmarshal(b, &task); err != nil {
		return nil, err
	}
	return &task, nil
}

func (s *purgingStore) purge(id a2a.TaskID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.purged[id] = true
	delete(s.tasks, id)
}

func (s *purgingStore) wasPurged(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.purged[a2a.TaskID(id)]
}

// serveA2APeer serves an a2a-go v0.3.3 agent running exec on ip, with push
// notifications and the compensation extension on its card, until the
// test ends, with opts added to the handler's. It returns the server and
// the agent card's URL.
func serveA2APeer(t *testing.T, exec a2asrv.AgentExecutor, ip, description string, opts ...a2asrv.RequestHandlerOption) (*httptest.Server, string) {
	t.Helper()
	handler := a2asrv.NewHandler(exec, append([]a2asrv.RequestHandlerOption{
		a2asrv.WithPushNotifications(push.NewInMemoryStore(), push.NewHTTPPushSender(&push.HTTPSenderConfig{Timeout: 5 * time.Second})),
	}, opts...)...)
	mux := http.NewServeMux()
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Skipf("cannot listen on %s: %v", ip, err)
	}
	srv := httptest.NewUnstartedServer(mux)
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	mux.Handle("/rpc", checkExtensionWire(t, a2asrv.NewJSONRPCHandler(handler)))
	mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewStaticAgentCardHandler(&a2a.AgentCard{
		Name: "Supplier", Description: description, URL: srv.URL + "/rpc",
		PreferredTransport: a2a.TransportProtocolJSONRPC, ProtocolVersion: "0.3.0", Version: "1.0.0",
		Capabilities: a2a.AgentCapabilities{
			PushNotifications: true,
			Extensions:        []a2a.AgentExtension{{URI: compensation.ExtensionURI}},
		},
		DefaultInputModes: []string{"text"}, DefaultOutputModes: []string{"text"},
		Skills: []a2a.AgentSkill{{ID: "buy", Name: "buy", Description: "buy", Tags: []string{"buy"}}},
	}))
	return srv, srv.URL + a2asrv.WellKnownAgentCardPath
}

// a2aEnv is the API with its A2A workers (apitest.WithWorker) on the
// system clock, with an orchestrator token of tenant acme and a funded
// budget "ops".
type a2aEnv struct {
	*apitest.Env
	orch string
	// opts are what the Env was started with, for restart.
	opts []apitest.Option
}

// newA2AEnv starts an a2aEnv on a fresh database: its workers are w (at
// most 3 compensation requests unless set), opts change the rest.
func newA2AEnv(t *testing.T, w apitest.Worker, opts ...apitest.Option) *a2aEnv {
	t.Helper()
	if w.CompensationMaxAttempts == 0 {
		w.CompensationMaxAttempts = 3
	}
	opts = append([]apitest.Option{apitest.WithClock(ledger.SystemClock{}), apitest.WithLedgerID(a2aLedgerID), apitest.WithWorker(w)}, opts...)
	e := &a2aEnv{Env: apitest.New(t, opts...), opts: opts}
	e.orch = e.NewOrchestrator(t, "acme")
	e.must(t, http.MethodPut, "/admin/v1/budgets/ops", e.OncallToken, map[string]any{"currency": "EUR", "funded_minor": 1_000_000, "tenants": apitest.DefaultBudgetTenants}, http.StatusCreated)
	return e
}

// restart starts a new API with new workers on the same database, as a
// restarted process does, with opts added; the tokens stay valid.
func (e *a2aEnv) restart(t *testing.T, opts ...apitest.Option) *a2aEnv {
	t.Helper()
	opts = append(append(slices.Clone(e.opts), apitest.WithOncallToken(e.OncallToken)), opts...)
	return &a2aEnv{Env: apitest.Start(t, e.Pool, opts...), orch: e.orch, opts: opts}
}

// do sends a request through apitest.Env.Do and returns the status and body.
func (e *a2aEnv) do(t *testing.T, method, path, token string, body any) (int, []byte) {
	t.Helper()
	r := e.Do(t, method, path, token, body)
	return r.Status, r.Body
}

func (e *a2aEnv) must(t *testing.T, method, path, token string, body any, status int) []byte {
	t.Helper()
	return e.Do(t, method, path, token, body).Expect(t, status).Body
}

func (e *a2aEnv) putOrg(t *testing.T, id, cardURL string, status int) {
	t.Helper()
	e.must(t, http.MethodPut, "/admin/v1/orgs/"+id, e.OncallToken, map[string]any{
		"name": "Supplier " + id, "agent_card_url": cardURL, "allowed_hosts": []string{"127.0.0.1"},
	}, status)
}

func (e *a2aEnv) dispatch(t *testing.T, op, org string) httpapi.DelegationBody {
	t.Helper()
	var d httpapi.DelegationBody
	out := e.must(t, http.MethodPost, "/v1/delegations", e.orch, map[string]any{
		"business_operation_id": op, "org_id": org, "task_class": "procurement", "budget_id": "ops",
		"hold": map[string]any{"amount_minor": 12_500, "currency": "EUR"},
		"dispatch": map[string]any{"message": map[string]any{
			"parts": []any{map[string]any{"text": "buy 3 pallets"}, map[string]any{"data": map[string]any{"sku": "P-1", "qty": 3}}},
		}},
	}, http.StatusCreated)
	if err := json.Unmarshal(out, &d); err != nil {
		t.Fatal(err)
	}
	if d.Remote.TaskID != "" || d.ObligationState != "held" || d.HoldState != "active" {
		t.Fatalf("dispatched delegation at creation = %+v", d)
	}
	return d
}

func (e *a2aEnv) get(t *testing.T, id string) httpapi.DelegationBody {
	t.Helper()
	return e.Delegation(t, e.orch, id)
}

func (e *a2aEnv) events(t *testing.T, id string) []ledger.EventRecord {
	t.Helper()
	return e.Events(t, e.orch, id)
}

func countEvents(events []ledger.EventRecord, typ ledger.EventType) int {
	n := 0
	for _, ev := range events {
		if ev.Type == typ {
			n++
		}
	}
	return n
}

// waitFor polls the delegation until ok holds, failing after 15s.
func (e *a2aEnv) waitFor(t *testing.T, id, what string, ok func(httpapi.DelegationBody) bool) httpapi.DelegationBody {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		d := e.get(t, id)
		if ok(d) {
			checkStoredReceipt(t, d)
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; delegation = %+v; events = %+v", what, d, e.events(t, id))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func dispatched(d httpapi.DelegationBody) bool { return d.Remote.TaskID != "" }

func TestA2ALifecycleCancelThenCompensateOverA2A(t *testing.T) {
	t.Parallel()
	peer := startV03Peer(t, &v03Peer{}, "127.0.0.1")
	e := newA2AEnv(t, apitest.Worker{})
	e.putOrg(t, "supplier", peer.cardURL, http.StatusCreated)

	d := e.dispatch(t, "po-1", "supplier")
	d = e.waitFor(t, d.ID, "the dispatched task", func(d httpapi.DelegationBody) bool { return dispatched(d) && d.TaskStatus == "working" })
	if d.Remote.ContextID == "" || d.Remote.ProtocolVersion != "0.3" {
		t.Fatalf("remote = %+v, want context id and protocol 0.3", d.Remote)
	}
	id := uuid.MustParse(d.ID)
	if got := peer.received(); len(got) != 1 || got[0] != delegate.DispatchMessageID(id) {
		t.Fatalf("peer received messages %v, want one %q", got, delegate.DispatchMessageID(id))
	}

	// The dispatch carries the compensation idempotency key in the
	// extension's metadata, so the remote can send evidence at any time.
	peer.mu.Lock()
	ext, _ := peer.metadata[0][compensation.ExtensionURI].(map[string]any)
	peer.mu.Unlock()
	if d.Compensation == nil || d.Compensation.IdempotencyKey == "" || ext["idempotencyKey"] != d.Compensation.IdempotencyKey {
		t.Fatalf("dispatch metadata %v, want the delegation's compensation idempotency key %+v", ext, d.Compensation)
	}

	e.must(t, http.MethodPost, "/v1/delegations/"+d.ID+"/cancel", e.orch, nil, http.StatusOK)
	d = e.waitFor(t, d.ID, "compensated", func(d httpapi.DelegationBody) bool { return d.ObligationState == "compensated" })
	if d.TaskStatus != "canceled" || d.HoldState != "returned" || d.Compensation == nil || d.Compensation.Receipt == nil || d.Compensation.Attempts != 1 {
		t.Fatalf("after compensation: %+v", d)
	}
	peer.mu.Lock()
	reqs := append([]map[string]any(nil), peer.compReqs...)
	peer.mu.Unlock()
	if len(reqs) != 1 || reqs[0]["taskId"] != d.Remote.TaskID || reqs[0]["idempotencyKey"] != d.Compensation.IdempotencyKey {
		t.Fatalf("compensation requests = %v", reqs)
	}
	events := e.events(t, d.ID)
	var path []string
	for _, ev := range events {
		if ev.ObligationTo != "" {
			path = append(path, string(ev.ObligationFrom)+"->"+string(ev.ObligationTo))
		}
	}
	want := "held->revocation_pending_compensation,revocation_pending_compensation->compensated"
	if strings.Join(path, ",") != want {
		t.Fatalf("obligation path %v, want %s", path, want)
	}
	for _, typ := range []ledger.EventType{ledger.EventTypeTaskDispatched, ledger.EventTypeCancelRequested, ledger.EventTypeCompensationRequested, ledger.EventTypeCompensationAcked} {
		if countEvents(events, typ) != 1 {
			t.Fatalf("want one %s event; events = %+v", typ, events)
		}
	}
	b := e.must(t, http.MethodGet, "/admin/v1/budgets/ops", e.OncallToken, nil, http.StatusOK)
	var budget httpapi.BudgetBody
	_ = json.Unmarshal(b, &budget)
	if budget.HeldMinor != 0 || budget.AvailableMinor != 1_000_000 {
		t.Fatalf("budget after compensation = %+v", budget)
	}
}

func TestA2ACompensationFailuresEndUnconfirmedNeverReleased(t *testing.T) {
	t.Parallel()
	peer := startV03Peer(t, &v03Peer{compOutcome: "failed"}, "127.0.0.1")
	e := newA2AEnv(t, apitest.Worker{CompensationMaxAttempts: 2})
	e.putOrg(t, "supplier", peer.cardURL, http.StatusCreated)
	d := e.dispatch(t, "po-fail", "supplier")
	e.waitFor(t, d.ID, "dispatch", dispatched)
	e.must(t, http.MethodPost, "/v1/delegations/"+d.ID+"/cancel", e.orch, nil, http.StatusOK)
	d = e.waitFor(t, d.ID, "unconfirmed", func(d httpapi.DelegationBody) bool { return d.ObligationState == "compensation_unconfirmed" })
	if d.HoldState != "active" || d.Compensation.Attempts != 2 || !strings.Contains(d.Compensation.LastError, "failed") {
		t.Fatalf("after exhausted retries: %+v", d)
	}
	events := e.events(t, d.ID)
	if countEvents(events, ledger.EventTypeCompensationRetriesExhausted) != 1 {
		t.Fatalf("events = %+v", events)
	}
	// Each round is a new request with its own messageId.
	peer.mu.Lock()
	n := len(peer.compReqs)
	peer.mu.Unlock()
	if n != 2 {
		t.Fatalf("peer got %d compensation requests, want 2", n)
	}
}

// TestA2ACompensationPendingReceiptWaits: a pending receipt is neither
// evidence nor a failure: the obligation stays
// revocation_pending_compensation, no new round is sent, and the
// compensation task is observed until its final receipt compensates.
func TestA2ACompensationPendingReceiptWaits(t *testing.T) {
	t.Parallel()
	peer := startV03Peer(t, &v03Peer{compOutcome: "pending", compRelease: make(chan struct{})}, "127.0.0.1")
	e := newA2AEnv(t, apitest.Worker{CompensationMaxAttempts: 2})
	e.putOrg(t, "supplier", peer.cardURL, http.StatusCreated)
	d := e.dispatch(t, "po-pending", "supplier")
	e.waitFor(t, d.ID, "dispatch", dispatched)
	e.must(t, http.MethodPost, "/v1/delegations/"+d.ID+"/cancel", e.orch, nil, http.StatusOK)
	d = e.waitFor(t, d.ID, "the request answered pending", func(d httpapi.DelegationBody) bool {
		return d.ObligationState == "revocation_pending_compensation" && d.Compensation.Attempts == 1
	})
	// Several poll intervals (20ms) and backoffs (at most 200ms) later,
	// still waiting: no failure recorded, no new round.
	time.Sleep(time.Second)
	d = e.get(t, d.ID)
	events := e.events(t, d.ID)
	if d.ObligationState != "revocation_pending_compensation" || d.HoldState != "active" || d.Compensation.Attempts != 1 ||
		countEvents(events, ledger.EventTypeCompensationRequestFailed) != 0 || countEvents(events, ledger.EventTypeCompensationRequested) != 1 {
		t.Fatalf("while pending: %+v; events %+v", d, events)
	}
	peer.mu.Lock()
	n := len(peer.compReqs)
	peer.mu.Unlock()
	if n != 1 {
		t.Fatalf("peer got %d compensation requests while pending, want 1", n)
	}
	close(peer.compRelease)
	d = e.waitFor(t, d.ID, "compensated", func(d httpapi.DelegationBody) bool { return d.ObligationState == "compensated" })
	if d.HoldState != "returned" || d.Compensation.Receipt == nil {
		t.Fatalf("after the final receipt: %+v", d)
	}
	if receipt, _ := json.Marshal(d.Compensation.Receipt); !strings.Contains(string(receipt), `"compensated"`) {
		t.Fatalf("receipt %s, want the final compensated one", receipt)
	}
	peer.mu.Lock()
	n = len(peer.compReqs)
	peer.mu.Unlock()
	if n != 1 {
		t.Fatalf("peer got %d compensation requests, want 1", n)
	}
	expectOneCompensationRound(t, peer, d.ID)
}

// expectOneCompensationRound checks that the peer received the dispatch
// and exactly one compensation request, with round 1's messageId.
func expectOneCompensationRound(t *testing.T, peer *v03Peer, id string) {
	t.Helper()
	uid := uuid.MustParse(id)
	want := []string{delegate.DispatchMessageID(uid), compensation.RequestMessageID(uid, 1)}
	if got := peer.received(); !slices.Equal(got, want) {
		t.Fatalf("peer received messages %v, want the dispatch and one compensation request %v", got, want)
	}
}

// TestA2ACompensationNotSupportedIsUnconfirmedAtOnce: a not_supported
// receipt says nobody will ack: the obligation is compensation_unconfirmed
// after the first answer, with the reason, the hold active, and no retry.
func TestA2ACompensationNotSupportedIsUnconfirmedAtOnce(t *testing.T) {
	t.Parallel()
	peer := startV03Peer(t, &v03Peer{compOutcome: "not_supported"}, "127.0.0.1")
	e := newA2AEnv(t, apitest.Worker{CompensationMaxAttempts: 5})
	e.putOrg(t, "supplier", peer.cardURL, http.StatusCreated)
	d := e.dispatch(t, "po-unsupported", "supplier")
	e.waitFor(t, d.ID, "dispatch", dispatched)
	e.must(t, http.MethodPost, "/v1/delegations/"+d.ID+"/cancel", e.orch, nil, http.StatusOK)
	d = e.waitFor(t, d.ID, "unconfirmed", func(d httpapi.DelegationBody) bool { return d.ObligationState == "compensation_unconfirmed" })
	if d.HoldState != "active" || d.Compensation.Attempts != 1 || !strings.Contains(d.Compensation.LastError, "cannot be reversed") {
		t.Fatalf("after not_supported: %+v", d)
	}
	time.Sleep(500 * time.Millisecond) // several backoffs: nothing more is sent
	events := e.events(t, d.ID)
	if countEvents(events, ledger.EventTypeCompensationNotSupported) != 1 || countEvents(events, ledger.EventTypeCompensationRetriesExhausted) != 0 {
		t.Fatalf("events = %+v", events)
	}
	last := events[len(events)-1]
	if last.Type != ledger.EventTypeCompensationNotSupported || last.ObligationTo != "compensation_unconfirmed" {
		t.Fatalf("last event %s -> %s, want compensation_not_supported -> compensation_unconfirmed", last.Type, last.ObligationTo)
	}
	peer.mu.Lock()
	n := len(peer.compReqs)
	peer.mu.Unlock()
	if n != 1 {
		t.Fatalf("peer got %d compensation requests, want 1", n)
	}
	expectOneCompensationRound(t, peer, d.ID)
}

// purgePollAfter is the PollAfter of the purged-task tests: soon after the
// cancel a poll's GetTask meets the purge too.
const purgePollAfter = 300 * time.Millisecond

// waitNotFound waits until the events record remote_task_not_found for the
// cancel and the delegation is listed in the task_not_found condition,
// then checks over the polls of three more poll periods (each answered
// TaskNotFoundError too) that they add at most one event: an answer the
// same as the last one is no news, only a different one (a GetTask may word
// it otherwise than the cancel) is recorded.
func waitNotFound(t *testing.T, e *a2aEnv, id string, pollAfter time.Duration) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for sources := []string(nil); !slices.Contains(sources, "cancel"); sources = notFoundSources(t, e.events(t, id)) {
		if time.Now().After(deadline) {
			t.Fatalf("remote_task_not_found from %v, want the cancel: %+v", sources, e.events(t, id))
		}
		time.Sleep(20 * time.Millisecond)
	}
	listed := e.obligationsIn(t, "task_not_found")
	if len(listed) != 1 || listed[0].DelegationID != id || listed[0].TaskNotFoundAt == nil {
		t.Fatalf("condition=task_not_found lists %+v, want %s", listed, id)
	}
	observed := *e.get(t, id).LastObservedAt
	time.Sleep(3 * pollAfter)
	if got := e.get(t, id); !got.LastObservedAt.After(observed) {
		t.Fatalf("the purged task was not polled again within %s (last observed %v)", 3*pollAfter, got.LastObservedAt)
	}
	polls := 0
	for _, source := range notFoundSources(t, e.events(t, id)) {
		if source == "poll" {
			polls++
		}
	}
	if polls > 1 {
		t.Fatalf("%d remote_task_not_found events from polls of a purged task answered alike: one per poll", polls)
	}
}

// TestA2ACancelPurgedTaskKeepsHold: the a2a-go agent purges the task when
// it is canceled, so it answers the cancel, and every GetTask after it,
// with TaskNotFoundError. Quittance records the answer as
// remote_task_not_found (once, not per poll), lists the delegation in the
// task_not_found condition and never reads it as canceled or rejected: the
// obligation stays held, the hold active, and no compensation is asked for.
func TestA2ACancelPurgedTaskKeepsHold(t *testing.T) {
	t.Parallel()
	peer := startV03Peer(t, &v03Peer{purgeOnCancel: true}, "127.0.0.1")
	e := newA2AEnv(t, apitest.Worker{PollAfter: purgePollAfter})
	e.putOrg(t, "supplier", peer.cardURL, http.StatusCreated)
	d := e.dispatch(t, "po-purged-go", "supplier")
	d = e.waitFor(t, d.ID, "the dispatched task", func(d httpapi.DelegationBody) bool { return dispatched(d) && d.TaskStatus == "working" })
	e.must(t, http.MethodPost, "/v1/delegations/"+d.ID+"/cancel", e.orch, nil, http.StatusOK)
	waitNotFound(t, e, d.ID, purgePollAfter)
	if !peer.store.wasPurged(d.Remote.TaskID) {
		t.Fatalf("the peer did not purge task %s", d.Remote.TaskID)
	}
	d = e.get(t, d.ID)
	if d.ObligationState != "held" || d.HoldState != "active" || d.TaskStatus != "working" {
		t.Fatalf("after TaskNotFoundError for a purged task: %+v", d)
	}
	events := e.events(t, d.ID)
	if path := obligationPath(events); path != "" {
		t.Fatalf("a purged task moved the obligation: %s", path)
	}
	for _, typ := range []ledger.EventType{ledger.EventTypeCancelFailed, ledger.EventTypeCompensationRequested} {
		if n := countEvents(events, typ); n != 0 {
			t.Fatalf("%d %s events for a purged task: %+v", n, typ, events)
		}
	}
	for _, ev := range events {
		if ev.Type == ledger.EventTypeTaskStatusChanged && ledger.TaskStatus(statusOf(t, ev)).Terminal() {
			t.Fatalf("a purged task was read as ended: %s %s", ev.Type, ev.Data)
		}
	}
	if got := peer.received(); len(got) != 1 {
		t.Fatalf("peer received messages %v, want the dispatch alone", got)
	}
	e.CheckInvariants(t)
}

func TestA2ACancelNotCancelableKeepsHold(t *testing.T) {
	t.Parallel()
	peer := startV03Peer(t, &v03Peer{refuseCancel: true}, "127.0.0.1")
	e := newA2AEnv(t, apitest.Worker{})
	e.putOrg(t, "supplier", peer.cardURL, http.StatusCreated)
	d := e.dispatch(t, "po-2", "supplier")
	e.waitFor(t, d.ID, "dispatch", dispatched)
	e.must(t, http.MethodPost, "/v1/delegations/"+d.ID+"/cancel", e.orch, nil, http.StatusOK)
	deadline := time.Now().Add(15 * time.Second)
	for countEvents(e.events(t, d.ID), ledger.EventTypeCancelRefused) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no cancel_refused event: %+v", e.events(t, d.ID))
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // let the follow-up observation run
	d = e.get(t, d.ID)
	if d.ObligationState != "held" || d.HoldState != "active" || d.TaskStatus != "working" {
		t.Fatalf("after a refused cancel: %+v", d)
	}
}

func TestA2APollPicksUpTerminalState(t *testing.T) {
	t.Parallel()
	peer := startV03Peer(t, &v03Peer{}, "127.0.0.1")
	e := newA2AEnv(t, apitest.Worker{NoPush: true, PollAfter: 50 * time.Millisecond})
	e.putOrg(t, "supplier", peer.cardURL, http.StatusCreated)
	d := e.dispatch(t, "po-3", "supplier")
	e.waitFor(t, d.ID, "dispatch", dispatched)
	close(peer.release)
	d = e.waitFor(t, d.ID, "settled", func(d httpapi.DelegationBody) bool { return d.ObligationState == "settled" })
	if d.TaskStatus != "completed" || d.HoldState != "consumed" {
		t.Fatalf("after poll: %+v", d)
	}
	found := false
	for _, ev := range e.events(t, d.ID) {
		if ev.Type == ledger.EventTypeTaskStatusChanged && ev.ObligationTo == "settled" && strings.Contains(string(ev.Data), `"source":"poll"`) {
			found = true
		}
	}
	if !found {
		t.Fatalf("settlement not observed by the poller: %+v", e.events(t, d.ID))
	}
}

// sendPush posts a push notification for id with the given header and body.
func (e *a2aEnv) sendPush(t *testing.T, id, header, value, contentType string, body []byte) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.URL+"/a2a/push/"+id, bytes.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	if header != "" {
		req.Header.Set(header, value)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

func TestA2APushReceiver(t *testing.T) {
	t.Parallel()
	peer := startV03Peer(t, &v03Peer{}, "127.0.0.1")
	e := newA2AEnv(t, apitest.Worker{})
	e.putOrg(t, "supplier", peer.cardURL, http.StatusCreated)
	d := e.dispatch(t, "po-4", "supplier")
	d = e.waitFor(t, d.ID, "dispatch", dispatched)
	id := uuid.MustParse(d.ID)

	// The registered token is random and only its hash is stored; replace
	// it with one the test knows (the peer's own pushes now fail auth).
	const token = "push-token-for-test"
	sum := sha256.Sum256([]byte(token))
	if err := e.Store.A2A().InTx(t.Context(), func(tx delegate.Tx) error {
		return tx.SetPushTokenHash(t.Context(), id, sum[:], time.Now())
	}); err != nil {
		t.Fatal(err)
	}
	task := d.Remote.TaskID
	v1Working := []byte(fmt.Sprintf(`{"statusUpdate":{"taskId":%q,"contextId":%q,"status":{"state":"TASK_STATE_WORKING"}}}`, task, d.Remote.ContextID))
	v03Completed := []byte(fmt.Sprintf(`{"kind":"task","id":%q,"contextId":%q,"status":{"state":"completed"}}`, task, d.Remote.ContextID))

	for _, tc := range []struct {
		name, header, value, ct string
		body                    []byte
		status                  int
	}{
		{"bearer", "Authorization", "Bearer " + token, "application/a2a+json", v1Working, http.StatusAccepted},
		{"x-token", "X-A2A-Notification-Token", token, "application/json", v1Working, http.StatusAccepted},
		{"token", "A2A-Notification-Token", token, "application/json", v1Working, http.StatusAccepted},
		{"wrong token", "X-A2A-Notification-Token", "nope", "application/json", v1Working, http.StatusUnauthorized},
		{"no token", "", "", "application/json", v1Working, http.StatusUnauthorized},
		{"wrong task", "X-A2A-Notification-Token", token, "application/json",
			[]byte(`{"statusUpdate":{"taskId":"someone-else","status":{"state":"TASK_STATE_COMPLETED"}}}`), http.StatusConflict},
		{"malformed", "X-A2A-Notification-Token", token, "application/json", []byte(`{"hello":1}`), http.StatusBadRequest},
		{"wrong media type", "X-A2A-Notification-Token", token, "text/plain", v1Working, http.StatusUnsupportedMediaType},
	} {
		if got, body := e.sendPush(t, d.ID, tc.header, tc.value, tc.ct, tc.body); got != tc.status {
			t.Fatalf("%s: status %d, want %d: %s", tc.name, got, tc.status, body)
		}
	}
	if got, _ := e.sendPush(t, uuid.NewString(), "X-A2A-Notification-Token", token, "application/json", v1Working); got != http.StatusUnauthorized {
		t.Fatalf("push for an unknown delegation: %d", got)
	}
	// A push claiming completion is only a hint: the task is still working
	// at the remote, so nothing moves.
	if got, _ := e.sendPush(t, d.ID, "X-A2A-Notification-Token", token, "application/json", v03Completed); got != http.StatusAccepted {
		t.Fatalf("hint push: %d", got)
	}
	time.Sleep(300 * time.Millisecond)
	if d := e.get(t, d.ID); d.ObligationState != "held" || d.TaskStatus != "working" {
		t.Fatalf("a push alone moved the delegation: %+v", d)
	}
	if countEvents(e.events(t, d.ID), ledger.EventTypePushRefused) != 1 {
		t.Fatalf("wrong-task push not recorded: %+v", e.events(t, d.ID))
	}

	// Now the task completes at the remote; duplicate and out-of-order
	// pushes (completed twice, then working) settle it exactly once.
	close(peer.release)
	time.Sleep(100 * time.Millisecond)
	for _, body := range [][]byte{v03Completed, v03Completed, v1Working} {
		if got, _ := e.sendPush(t, d.ID, "Authorization", "Bearer "+token, "application/json", body); got != http.StatusAccepted {
			t.Fatalf("push: %d", got)
		}
	}
	d = e.waitFor(t, d.ID, "settled", func(d httpapi.DelegationBody) bool { return d.ObligationState == "settled" })
	time.Sleep(200 * time.Millisecond)
	transitions := 0
	for _, ev := range e.events(t, d.ID) {
		if ev.ObligationTo != "" {
			transitions++
		}
	}
	if transitions != 1 || e.get(t, d.ID).TaskStatus != "completed" {
		t.Fatalf("transitions = %d; events = %+v", transitions, e.events(t, d.ID))
	}
}

func TestA2ACrashBetweenHoldAndSendResumesWithSameMessageID(t *testing.T) {
	t.Parallel()
	peer := startV03Peer(t, &v03Peer{}, "127.0.0.1")
	e := newA2AEnv(t, apitest.Worker{Stopped: true})
	e.putOrg(t, "supplier", peer.cardURL, http.StatusCreated)
	d := e.dispatch(t, "po-5", "supplier")
	id := uuid.MustParse(d.ID)

	// A worker claims the send and dies before making it: its lease
	// (short here) must run out, and then a fresh worker makes the call.
	now := time.Now()
	jobs, err := e.Store.A2A().ClaimJobs(t.Context(), now, now.Add(300*time.Millisecond), "crashed-worker", 10)
	if err != nil || len(jobs) != 1 || jobs[0].Kind != ledger.OutboundDispatch || jobs[0].DelegationID != id {
		t.Fatalf("claimed %+v, %v", jobs, err)
	}
	if got := peer.received(); len(got) != 0 {
		t.Fatalf("the peer heard of the delegation before any worker sent it: %v", got)
	}
	if again, _ := e.Store.A2A().ClaimJobs(t.Context(), time.Now(), time.Now().Add(time.Minute), "other", 10); len(again) != 0 {
		t.Fatalf("a leased job was claimed twice: %+v", again)
	}
	e.StartWorker()
	d = e.waitFor(t, d.ID, "dispatch after the lease expired", dispatched)
	if got := peer.received(); len(got) != 1 || got[0] != delegate.DispatchMessageID(id) {
		t.Fatalf("peer received %v, want exactly one %q", got, delegate.DispatchMessageID(id))
	}
	if n := peer.tasks.Load(); n != 1 {
		t.Fatalf("the peer created %d tasks, want 1", n)
	}
	if d.ObligationState != "held" || countEvents(e.events(t, d.ID), ledger.EventTypeTaskDispatched) != 1 {
		t.Fatalf("after resume: %+v", d)
	}
}

func TestA2AEgressRefusesForbiddenAgentAddress(t *testing.T) {
	t.Parallel()
	forbidden := startV03Peer(t, &v03Peer{}, "127.0.0.2")
	e := newA2AEnv(t, apitest.Worker{})
	// Registration refuses a card on an address outside the allow-list.
	e.putOrg(t, "elsewhere", forbidden.cardURL, http.StatusUnprocessableEntity)

	// And if the registration policy was looser, the dialer still refuses.
	loose := egress.Policy{AllowHTTP: true, AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	e2 := newA2AEnv(t, apitest.Worker{}, apitest.WithRegistrationEgress(loose))
	e2.putOrg(t, "elsewhere", forbidden.cardURL, http.StatusCreated)
	d := e2.dispatch(t, "po-6", "elsewhere")
	deadline := time.Now().Add(15 * time.Second)
	for countEvents(e2.events(t, d.ID), ledger.EventTypeDispatchFailed) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no dispatch_failed: %+v", e2.events(t, d.ID))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := forbidden.received(); len(got) != 0 {
		t.Fatalf("the forbidden agent was reached: %v", got)
	}
	if d := e2.get(t, d.ID); d.ObligationState != "held" || d.HoldState != "active" {
		t.Fatalf("a refused dispatch moved the hold: %+v", d)
	}
	for _, ev := range e2.events(t, d.ID) {
		if ev.Type == ledger.EventTypeDispatchFailed && !strings.Contains(string(ev.Data), "egress denied") {
			t.Fatalf("dispatch_failed without the egress reason: %s", ev.Data)
		}
	}
}

// TestA2ADispatchRefusedByAgent: an agent that refuses the message outright
// (invalid params: no task exists) rejects the work, so the obligation is
// released with the refusal as the status message, once.
func TestA2ADispatchRefusedByAgent(t *testing.T) {
	t.Parallel()
	peer := startV03Peer(t, &v03Peer{refuseWith: a2a.ErrInvalidParams}, "127.0.0.1")
	e := newA2AEnv(t, apitest.Worker{})
	e.putOrg(t, "picky", peer.cardURL, http.StatusCreated)
	d := e.dispatch(t, "po-refused", "picky")
	d = e.waitFor(t, d.ID, "the refusal", func(d httpapi.DelegationBody) bool { return d.TaskStatus == "rejected" })
	if d.ObligationState != "released" || d.HoldState != "returned" || !strings.Contains(d.TaskStatusMessage, "invalid params") {
		t.Fatalf("after a refused dispatch: %+v", d)
	}
	if got := peer.received(); len(got) != 1 {
		t.Fatalf("the agent received %d messages, want 1: %v", len(got), got)
	}
	e.CheckInvariants(t)
}

func TestA2ADispatchValidation(t *testing.T) {
	t.Parallel()
	e := newA2AEnv(t, apitest.Worker{Stopped: true})
	e.must(t, http.MethodPut, "/admin/v1/orgs/no-agent", e.OncallToken, map[string]any{"name": "No agent"}, http.StatusCreated)
	base := map[string]any{
		"business_operation_id": "op", "org_id": "no-agent", "task_class": "procurement", "budget_id": "ops",
		"hold": map[string]any{"amount_minor": 100, "currency": "EUR"},
	}
	with := func(kv ...any) map[string]any {
		m := map[string]any{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	msg := map[string]any{"message": map[string]any{"parts": []any{map[string]any{"text": "hi"}}}}
	e.must(t, http.MethodPost, "/v1/delegations", e.orch, with("dispatch", msg), http.StatusConflict) // org has no agent
	e.must(t, http.MethodPost, "/v1/delegations", e.orch, with("dispatch", msg, "remote", map[string]any{"task_id": "x"}), http.StatusUnprocessableEntity)
	e.must(t, http.MethodPost, "/v1/delegations", e.orch, with("dispatch", map[string]any{"message": map[string]any{"parts": []any{}}}), http.StatusUnprocessableEntity)
	e.must(t, http.MethodPost, "/v1/delegations", e.orch, with(), http.StatusUnprocessableEntity)
	e.must(t, http.MethodPut, "/admin/v1/orgs/bad", e.OncallToken, map[string]any{"name": "Bad", "agent_card_url": "ftp://127.0.0.1/card"}, http.StatusUnprocessableEntity)
	e.must(t, http.MethodPut, "/admin/v1/orgs/bad", e.OncallToken, map[string]any{"name": "Bad", "agent_card_url": "http://127.0.0.1/card"}, http.StatusUnprocessableEntity) // no allowed hosts
}

// TestA2ADemoAgentLifecycle runs the `make run` walk-through against the
// demo supplier agent: dispatch, cancel, and compensation with a signed
// receipt, without reporting anything by hand.
// testA2ADemoAgent runs the walk-through against the demo agent configured
// by cfg (its ledger id, key and base URL are set here): dispatch, cancel,
// and wait until the obligation is want, with the task canceled.
func testA2ADemoAgent(t *testing.T, cfg demoagent.Config, want string) (httpapi.DelegationBody, *a2aEnv) {
	t.Helper()
	e, _, d := dispatchToDemoAgent(t, cfg, apitest.Worker{})
	e.must(t, http.MethodPost, "/v1/delegations/"+d.ID+"/cancel", e.orch, nil, http.StatusOK)
	d = e.waitFor(t, d.ID, want, func(d httpapi.DelegationBody) bool { return d.ObligationState == want })
	if d.TaskStatus != "canceled" {
		t.Fatalf("after the walk-through: %+v", d)
	}
	return d, e
}

// dispatchToDemoAgent serves the demo agent configured by cfg (its ledger
// id, key and base URL are set here), registers it as an org with its JWKS
// on an a2aEnv whose workers are w, and dispatches a delegation to it,
// returned once the remote task is recorded.
func dispatchToDemoAgent(t *testing.T, cfg demoagent.Config, w apitest.Worker, wrap ...func(http.Handler) http.Handler) (*a2aEnv, *demoagent.Agent, httpapi.DelegationBody) {
	t.Helper()
	agent, base := serveDemoAgent(t, cfg, wrap...)
	e := newA2AEnv(t, w)
	e.must(t, http.MethodPut, "/admin/v1/orgs/"+agent.OrgID(), e.OncallToken, map[string]any{
		"name": "Demo supplier", "agent_card_url": agent.CardURL(base), "allowed_hosts": []string{"127.0.0.1"},
		"jwks": json.RawMessage(agent.JWKS()), "require_signed_receipts": true,
	}, http.StatusCreated)
	d := e.dispatch(t, "po-demo", agent.OrgID())
	d = e.waitFor(t, d.ID, "the dispatched task", dispatched)
	if d.Remote.ProtocolVersion != "1.0" {
		t.Fatalf("remote = %+v", d.Remote)
	}
	return e, agent, d
}

// serveDemoAgent serves the demo agent configured by cfg (its ledger id,
// a fresh key and its base URL are set here) on loopback until the test
// ends, its handler wrapped by wrap, and returns it with its base URL.
func serveDemoAgent(t *testing.T, cfg demoagent.Config, wrap ...func(http.Handler) http.Handler) (*demoagent.Agent, string) {
	t.Helper()
	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + l.Addr().String()
	cfg.LedgerID, cfg.Key, cfg.BaseURL = a2aLedgerID, key, base
	agent, err := demoagent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agent.Close)
	h := agent.Handler()
	for _, w := range wrap {
		h = w(h)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return agent, base
}

func TestA2ADemoAgentLifecycle(t *testing.T) {
	t.Parallel()
	d, _ := testA2ADemoAgent(t, demoagent.Config{}, "compensated")
	if d.HoldState != "returned" {
		t.Fatalf("after the walk-through: %+v", d)
	}
}

// TestA2ADemoAgentPendingCompensation: the demo agent in pending mode
// answers the compensation request with a pending receipt on a working
// task and finishes it later; Quittance waits on that task, sends one
// request only, and the final receipt compensates.
func TestA2ADemoAgentPendingCompensation(t *testing.T) {
	t.Parallel()
	d, e := testA2ADemoAgent(t, demoagent.Config{Compensation: demoagent.CompensationPending, PendingDelay: 1500 * time.Millisecond}, "compensated")
	events := e.events(t, d.ID)
	if d.HoldState != "returned" || d.Compensation.Attempts != 1 || countEvents(events, ledger.EventTypeCompensationRequested) != 1 ||
		countEvents(events, ledger.EventTypeCompensationRequestFailed) != 0 {
		t.Fatalf("after a pending compensation: %+v; events %+v", d, events)
	}
	expectRequestedOnce(t, d.ID, events)
}

// expectRequestedOnce checks that every compensation request the events
// record (compensation_requested, compensation_not_supported,
// compensation_request_failed) names round 1's messageId: no new round was
// started.
func expectRequestedOnce(t *testing.T, id string, events []ledger.EventRecord) {
	t.Helper()
	want := compensation.RequestMessageID(uuid.MustParse(id), 1)
	var got []string
	for _, ev := range events {
		switch ev.Type {
		case ledger.EventTypeCompensationRequested, ledger.EventTypeCompensationNotSupported, ledger.EventTypeCompensationRequestFailed:
			var data struct {
				MessageID string `json:"message_id"`
			}
			if err := json.Unmarshal(ev.Data, &data); err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(got, data.MessageID) {
				got = append(got, data.MessageID)
			}
		}
	}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("compensation requests recorded with messageIds %v, want round 1's alone, %s", got, want)
	}
}

// TestA2ADemoAgentCompensationNotSupported: the demo agent in
// not_supported mode answers with a reason; the obligation is
// compensation_unconfirmed after that one answer, the hold active.
func TestA2ADemoAgentCompensationNotSupported(t *testing.T) {
	t.Parallel()
	d, e := testA2ADemoAgent(t, demoagent.Config{Compensation: demoagent.CompensationNotSupported}, "compensation_unconfirmed")
	events := e.events(t, d.ID)
	if d.HoldState != "active" || d.Compensation.Attempts != 1 || !strings.Contains(d.Compensation.LastError, "cannot be reversed") ||
		countEvents(events, ledger.EventTypeCompensationNotSupported) != 1 ||
		countEvents(events, ledger.EventTypeCompensationRetriesExhausted) != 0 {
		t.Fatalf("after not_supported: %+v; events %+v", d, events)
	}
	expectRequestedOnce(t, d.ID, events)
}

// TestA2ADemoAgentPurgeOnCancel: the demo agent in purge-on-cancel mode
// forgets the task when asked to cancel it and answers the cancel, and
// every GetTask after it, with TaskNotFoundError, its purchase order
// standing. Quittance records the answer as remote_task_not_found (once,
// not per poll), lists it as task_not_found and never reads it as
// canceled or rejected: the obligation stays held and
// the hold active, with no compensation asked for. (The agent declares
// atomicCancel too: a purge reverses nothing, so nothing compensates.)
func TestA2ADemoAgentPurgeOnCancel(t *testing.T) {
	t.Parallel()
	e, agent, d := dispatchToDemoAgent(t, demoagent.Config{PurgeOnCancel: true, AtomicCancel: true}, apitest.Worker{PollAfter: purgePollAfter})
	d = e.waitFor(t, d.ID, "the task working", func(d httpapi.DelegationBody) bool { return d.TaskStatus == "working" })
	e.must(t, http.MethodPost, "/v1/delegations/"+d.ID+"/cancel", e.orch, nil, http.StatusOK)
	waitNotFound(t, e, d.ID, purgePollAfter)
	if !agent.Purged(d.Remote.TaskID) {
		t.Fatalf("the demo agent did not purge task %s", d.Remote.TaskID)
	}
	if po, ok := agent.PurchaseOrder(d.Remote.TaskID); !ok || po.Reversed {
		t.Fatalf("purchase order %+v, %v; want it standing", po, ok)
	}
	d = e.get(t, d.ID)
	if d.ObligationState != "held" || d.HoldState != "active" || d.TaskStatus != "working" || d.Compensation.Attempts != 0 {
		t.Fatalf("after TaskNotFoundError for a purged task: %+v", d)
	}
	events := e.events(t, d.ID)
	if path := obligationPath(events); path != "" {
		t.Fatalf("a purged task moved the obligation: %s", path)
	}
	for _, typ := range []ledger.EventType{ledger.EventTypeCancelFailed, ledger.EventTypeCompensationRequested, ledger.EventTypeCompensationAcked} {
		if n := countEvents(events, typ); n != 0 {
			t.Fatalf("%d %s events for a purged task: %+v", n, typ, events)
		}
	}
	for _, ev := range events {
		if ev.Type == ledger.EventTypeTaskStatusChanged && ledger.TaskStatus(statusOf(t, ev)).Terminal() {
			t.Fatalf("a purged task was read as ended: %s %s", ev.Type, ev.Data)
		}
	}
	e.CheckInvariants(t)
}

// TestA2AAtomicCancelCarriesCompensationRequest: to an agent whose card
// declares atomicCancel, the cancel itself carries the compensation request
// (task id, idempotency key, reason) in its metadata; the agent reverses
// with the cancel, its receipt echoes the delegation's key, and the
// obligation goes straight from held to compensated.
func TestA2AAtomicCancelCarriesCompensationRequest(t *testing.T) {
	t.Parallel()
	d, _ := testA2ADemoAgent(t, demoagent.Config{AtomicCancel: true}, "compensated")
	receipt, _ := json.Marshal(d.Compensation.Receipt)
	var r struct {
		IdempotencyKey string `json:"idempotencyKey"`
	}
	if err := json.Unmarshal(receipt, &r); err != nil || r.IdempotencyKey != d.Compensation.IdempotencyKey {
		t.Fatalf("atomic receipt %s, want it to echo the key %s sent in the cancel", receipt, d.Compensation.IdempotencyKey)
	}
	if d.ObligationReason != ledger.ReasonAtomicCompensation || d.Compensation.Attempts != 0 {
		t.Fatalf("obligation reason %s after %d requests, want %s with no compensation request", d.ObligationReason, d.Compensation.Attempts, ledger.ReasonAtomicCompensation)
	}
}

// TestA2AAtomicReceiptFetchedAfterALostCancelReply: the agent cancels and
// compensates, but every reply to CancelTask is lost (the connection
// drops once the agent has answered). The push or poll that fetches the
// canceled task finds the same receipt on it, and it compensates at once,
// as the reply would have: no compensation request is sent.
func TestA2AAtomicReceiptFetchedAfterALostCancelReply(t *testing.T) {
	t.Parallel()
	var lost atomic.Int32
	loseCancelReplies := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			method, ok := rpcMethod(w, r)
			if !ok {
				return
			}
			if method != "CancelTask" {
				h.ServeHTTP(w, r)
				return
			}
			h.ServeHTTP(httptest.NewRecorder(), r) // the agent cancels and compensates
			lost.Add(1)
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				conn.Close()
			}
		})
	}
	e, _, d := dispatchToDemoAgent(t, demoagent.Config{AtomicCancel: true}, apitest.Worker{}, loseCancelReplies)
	e.must(t, http.MethodPost, "/v1/delegations/"+d.ID+"/cancel", e.orch, nil, http.StatusOK)
	d = e.waitFor(t, d.ID, "compensated", func(d httpapi.DelegationBody) bool { return d.ObligationState == "compensated" })
	if lost.Load() == 0 {
		t.Fatal("no cancel reply was lost")
	}
	if d.ObligationReason != ledger.ReasonAtomicCompensation || d.Compensation.Attempts != 0 || d.TaskStatus != "canceled" {
		t.Fatalf("after lost cancel replies: reason %s after %d requests, task %s; want %s with no compensation request",
			d.ObligationReason, d.Compensation.Attempts, d.TaskStatus, ledger.ReasonAtomicCompensation)
	}
	if n := countEvents(e.events(t, d.ID), ledger.EventTypeCompensationRequested); n != 0 {
		t.Errorf("%d compensation requests after an atomic receipt", n)
	}
}

// TestA2AAtomicReceiptAfterAStreamedCancel: with streaming on (the
// binary's default), the agent's stream reports the canceled task before
// its reply to CancelTask arrives: the reply is held back until the ledger
// has the task canceled. The stream's status update carries no artifacts;
// the worker fetches the canceled task, whose atomic receipt compensates at
// once, as the reply would have: held → compensated, no compensation
// request.
func TestA2AAtomicReceiptAfterAStreamedCancel(t *testing.T) {
	t.Parallel()
	var (
		env        atomic.Pointer[a2aEnv]
		id         atomic.Pointer[uuid.UUID]
		subscribed = make(chan struct{})
		once       sync.Once
		streamed   atomic.Bool
		replied    = make(chan struct{})
		replyOnce  sync.Once
	)
	// canceledInLedger waits until the ledger has the delegation's task
	// canceled, from something other than the cancel reply.
	canceledInLedger := func() bool {
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if e, d := env.Load(), id.Load(); e != nil && d != nil {
				if cur, err := e.Store.Delegation(context.Background(), *d); err == nil && cur.TaskStatus == ledger.StatusCanceled {
					return true
				}
			}
		}
		return false
	}
	streamFirst := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			method, ok := rpcMethod(w, r)
			if !ok {
				return
			}
			switch method {
			case "SubscribeToTask":
				h.ServeHTTP(firstWriteWriter{ResponseWriter: w, wrote: func() { once.Do(func() { close(subscribed) }) }}, r)
			case "CancelTask":
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, r) // the agent cancels, compensates and tells its stream
				streamed.Store(canceledInLedger())
				maps.Copy(w.Header(), rec.Header())
				w.WriteHeader(rec.Code)
				w.Write(rec.Body.Bytes())
				replyOnce.Do(func() { close(replied) })
			default:
				h.ServeHTTP(w, r)
			}
		})
	}
	e, _, d := dispatchToDemoAgent(t, demoagent.Config{AtomicCancel: true}, apitest.Worker{Streaming: true}, streamFirst)
	env.Store(e)
	did := uuid.MustParse(d.ID)
	id.Store(&did)
	select {
	case <-subscribed:
	case <-time.After(15 * time.Second):
		t.Fatal("the worker did not subscribe to the task within 15s")
	}
	e.must(t, http.MethodPost, "/v1/delegations/"+d.ID+"/cancel", e.orch, nil, http.StatusOK)
	select {
	case <-replied:
	case <-time.After(15 * time.Second):
		t.Fatal("the agent did not reply to the cancel within 15s")
	}
	if !streamed.Load() {
		t.Fatal("the ledger did not have the task canceled before the cancel reply: the stream did not report it")
	}
	d = e.waitFor(t, d.ID, "compensated", func(d httpapi.DelegationBody) bool { return d.ObligationState == "compensated" })
	if d.ObligationReason != ledger.ReasonAtomicCompensation || d.Compensation.Attempts != 0 {
		t.Fatalf("after a streamed cancel: compensated (%s) after %d requests; want %s with no compensation request",
			d.ObligationReason, d.Compensation.Attempts, ledger.ReasonAtomicCompensation)
	}
	if n := countEvents(e.events(t, d.ID), ledger.EventTypeCompensationRequested); n != 0 {
		t.Errorf("%d compensation requests after an atomic receipt", n)
	}
}

// firstWriteWriter calls wrote on the first write of a response (for a
// stream: its first event, sent once the agent has subscribed it).
type firstWriteWriter struct {
	http.ResponseWriter
	wrote func()
}

func (w firstWriteWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	w.wrote()
	return n, err
}

// Unwrap lets http.ResponseController flush the stream.
func (w firstWriteWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// rpcMethod is the JSON-RPC method r calls ("" when its body is not one),
// its body left to be read again; false, with a 400 sent, when the body
// cannot be read.
func rpcMethod(w http.ResponseWriter, r *http.Request) (string, bool) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return "", false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	var call struct {
		Method string `json:"method"`
	}
	_ = json.Unmarshal(body, &call)
	return call.Method, true
}
