package httpapi_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"iter"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	v2 "github.com/a2aproject/a2a-go/v2/a2a"
	a2agrpc "github.com/a2aproject/a2a-go/v2/a2agrpc/v1"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	v2push "github.com/a2aproject/a2a-go/v2/a2asrv/push"
	"github.com/a2aproject/a2a-go/v2/a2asrv/taskstore"
	"google.golang.org/grpc"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/compensation/kit"
	"github.com/quittance/quittance/delegate/a2a"
	"github.com/quittance/quittance/ledger"
)

// These tests run Quittance's workers against an agent built on a2a-go
// v2.3.1's a2asrv (the Go SDK's protocol-1.0 line) that answers
// compensation requests with the compensation kit, as a remote org would
// build it. The agent is served in process over one A2A v1.0 binding at a
// time — JSON-RPC, HTTP+JSON or gRPC, each on loopback — and its card
// lists that binding alone: an agent that exposes only REST or only gRPC
// is delegated to, observed, canceled and asked for compensation over it.

// v2Bindings are the A2A v1.0 bindings the peer is served over.
var v2Bindings = []string{a2a.BindingJSONRPC, a2a.BindingHTTPJSON, a2a.BindingGRPC}

// v2Work is the org's own executor: a task works until it is canceled.
//
// Its submitted task is undated, as a2a-go v2.3.1's NewSubmittedTask makes
// it: Quittance dates it on receipt, after the agent dated its "working"
// update, and that receipt date must not make the update stale
// (dispatchToV2Peer checks).
type v2Work struct {
	// finishAfter > 0: the task completes by itself after that long.
	finishAfter time.Duration
}

func (w v2Work) Execute(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[v2.Event, error] {
	return func(yield func(v2.Event, error) bool) {
		if !yield(v2.NewSubmittedTask(ec, ec.Message), nil) || !yield(v2.NewStatusUpdateEvent(ec, v2.TaskStateWorking, nil), nil) || w.finishAfter == 0 {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(w.finishAfter):
			yield(v2.NewStatusUpdateEvent(ec, v2.TaskStateCompleted, nil), nil)
		}
	}
}

func (v2Work) Cancel(_ context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[v2.Event, error] {
	return func(yield func(v2.Event, error) bool) {
		yield(v2.NewStatusUpdateEvent(ec, v2.TaskStateCanceled, nil), nil)
	}
}

// v2Reversals is the org's compensation: it counts reversals per key and
// answers with outcome.
type v2Reversals struct {
	outcome kit.Outcome
	mu      sync.Mutex
	count   map[string]int
}

func (r *v2Reversals) reverse(_ context.Context, req kit.Request) (kit.Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.count[req.IdempotencyKey]++
	res := kit.Result{Outcome: r.outcome, ReceiptID: "rcpt-" + string(req.TaskID)}
	if r.outcome == kit.NotSupported {
		res.Reason = "the purchase order cannot be reversed"
	}
	return res, nil
}

// pendingFirst answers a compensation request pending at once and with the
// final receipt after delay, on the same task (kit.Pending's contract);
// everything else goes to the kit.
type pendingFirst struct {
	next   a2asrv.AgentExecutor
	signer *kit.Signer
	rev    *v2Reversals
	delay  time.Duration
}

func (p *pendingFirst) Execute(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[v2.Event, error] {
	req, ok, err := kit.RequestFrom(ec.Message)
	if !ok || err != nil {
		return p.next.Execute(ctx, ec)
	}
	return func(yield func(v2.Event, error) bool) {
		receipt := func(res kit.Result) (v2.Event, error) {
			r, err := p.signer.Receipt(req, res)
			if err != nil {
				return nil, err
			}
			return r.Artifact(ec)
		}
		if ec.StoredTask == nil && !yield(v2.NewSubmittedTask(ec, ec.Message), nil) {
			return
		}
		pending, err := receipt(kit.Result{Outcome: kit.Pending, ReceiptID: "rcpt-pending", Reason: "reversal under way"})
		if !yield(pending, err) || err != nil || !yield(v2.NewStatusUpdateEvent(ec, v2.TaskStateWorking, nil), nil) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(p.delay):
		}
		res, _ := p.rev.reverse(ctx, req)
		final, err := receipt(res)
		if yield(final, err) && err == nil {
			yield(v2.NewStatusUpdateEvent(ec, v2.TaskStateCompleted, nil), nil)
		}
	}
}

func (p *pendingFirst) Cancel(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[v2.Event, error] {
	return p.next.Cancel(ctx, ec)
}

// v2PeerConfig says how the peer compensates and over which binding it is
// served.
type v2PeerConfig struct {
	binding string
	outcome kit.Outcome // Compensated or NotSupported
	pending bool        // answer pending first, then outcome
	atomic  bool        // declare atomicCancel
	purge   bool        // forget a task asked to cancel: TaskNotFound from then on
	// finishAfter > 0: a task completes by itself after that long.
	finishAfter time.Duration
}

// v2PurgingStore is a2a-go's in-memory task store that forgets the tasks
// purged: Get and Update answer TaskNotFound for them.
type v2PurgingStore struct {
	*taskstore.InMemory
	purged sync.Map
}

func (s *v2PurgingStore) Get(ctx context.Context, id v2.TaskID) (*taskstore.StoredTask, error) {
	if _, ok := s.purged.Load(id); ok {
		return nil, v2.ErrTaskNotFound
	}
	return s.InMemory.Get(ctx, id)
}

func (s *v2PurgingStore) Update(ctx context.Context, req *taskstore.UpdateRequest) (taskstore.TaskVersion, error) {
	if _, ok := s.purged.Load(req.Task.ID); ok {
		return 0, v2.ErrTaskNotFound
	}
	return s.InMemory.Update(ctx, req)
}

// v2Purging cancels nothing: it purges the task, the purchase order
// standing, and the cancel's own status update then finds no task, so the
// cancel is answered TaskNotFound (and the task's execution ends).
type v2Purging struct {
	v2Work
	store *v2PurgingStore
}

func (p v2Purging) Cancel(_ context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[v2.Event, error] {
	return func(yield func(v2.Event, error) bool) {
		p.store.purged.Store(ec.TaskID, true)
		yield(v2.NewStatusUpdateEvent(ec, v2.TaskStateCanceled, nil), nil)
	}
}

type v2Peer struct {
	orgID   string
	cardURL string
	jwks    []byte
	rev     *v2Reversals
}

// serveV2Peer serves the peer until the test ends.
func serveV2Peer(t *testing.T, cfg v2PeerConfig) *v2Peer {
	t.Helper()
	const orgID = "v2-supplier"
	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := kit.NewSigner(kit.SignerConfig{OrgID: orgID, LedgerID: a2aLedgerID, KeyID: "v2-1", Key: key})
	if err != nil {
		t.Fatal(err)
	}
	jwks, err := signer.JWKS()
	if err != nil {
		t.Fatal(err)
	}
	rev := &v2Reversals{outcome: cfg.outcome, count: map[string]int{}}
	opts := []a2asrv.RequestHandlerOption{
		a2asrv.WithPushNotifications(v2push.NewInMemoryStore(), v2push.NewHTTPPushSender(&v2push.HTTPSenderConfig{Timeout: 5 * time.Second})),
	}
	var work a2asrv.AgentExecutor = v2Work{finishAfter: cfg.finishAfter}
	if cfg.purge {
		store := &v2PurgingStore{InMemory: taskstore.NewInMemory(nil)}
		work = v2Purging{store: store}
		opts = append(opts, a2asrv.WithTaskStore(store))
	}
	exec := kit.Wrap(work, signer, rev.reverse)
	if cfg.pending {
		exec = &pendingFirst{next: exec, signer: signer, rev: rev, delay: time.Second}
	}
	handler := a2asrv.NewHandler(exec, opts...)

	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	var url string
	switch cfg.binding {
	case a2a.BindingJSONRPC:
		mux.Handle("/rpc", a2asrv.NewJSONRPCHandler(handler))
		url = srv.URL + "/rpc"
	case a2a.BindingHTTPJSON:
		mux.Handle("/rest/", http.StripPrefix("/rest", a2asrv.NewRESTHandler(handler)))
		url = srv.URL + "/rest"
	case a2a.BindingGRPC:
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		gs := grpc.NewServer()
		a2agrpc.NewHandler(handler).RegisterWith(gs)
		go func() { _ = gs.Serve(l) }()
		t.Cleanup(gs.Stop)
		url = "http://" + l.Addr().String()
	}
	card := &v2.AgentCard{
		Name: "v2 supplier", Description: "sells pallets", Version: "1.0.0",
		SupportedInterfaces: []*v2.AgentInterface{{URL: url, ProtocolBinding: v2.TransportProtocol(cfg.binding), ProtocolVersion: "1.0"}},
		Capabilities:        v2.AgentCapabilities{Streaming: true, PushNotifications: true},
		DefaultInputModes:   []string{"text"}, DefaultOutputModes: []string{"text"},
		Skills: []v2.AgentSkill{{ID: "buy", Name: "buy", Description: "buy", Tags: []string{"buy"}}},
	}
	card.Capabilities.Extensions = append(card.Capabilities.Extensions, kit.Extension(signer, kit.Params{AtomicCancel: cfg.atomic}))
	mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewStaticAgentCardHandler(card))
	return &v2Peer{orgID: orgID, cardURL: srv.URL + a2asrv.WellKnownAgentCardPath, jwks: jwks, rev: rev}
}

// runV2Peer registers the peer's org, dispatches a delegation to it,
// cancels it once the task works, and waits for the obligation to be want.
func runV2Peer(t *testing.T, cfg v2PeerConfig, want string) (httpapi.DelegationBody, []ledger.EventRecord, *v2Peer) {
	t.Helper()
	e, peer, d := dispatchToV2Peer(t, cfg, apitest.Worker{})
	e.must(t, http.MethodPost, "/v1/delegations/"+d.ID+"/cancel", e.orch, nil, http.StatusOK)
	d = e.waitFor(t, d.ID, want, func(d httpapi.DelegationBody) bool { return d.ObligationState == want })
	if d.TaskStatus != "canceled" {
		t.Fatalf("after the cancel: %+v", d)
	}
	events := e.events(t, d.ID)
	checkBindingRecorded(t, events, cfg.binding)
	e.CheckInvariants(t)
	return d, events, peer
}

// dispatchToV2Peer serves the peer, registers its org on an a2aEnv whose
// workers are w, and dispatches a delegation to it, returned once its task
// works.
func dispatchToV2Peer(t *testing.T, cfg v2PeerConfig, w apitest.Worker) (*a2aEnv, *v2Peer, httpapi.DelegationBody) {
	t.Helper()
	peer := serveV2Peer(t, cfg)
	e := newA2AEnv(t, w)
	e.must(t, http.MethodPut, "/admin/v1/orgs/"+peer.orgID, e.OncallToken, map[string]any{
		"name": "v2 supplier", "agent_card_url": peer.cardURL, "allowed_hosts": []string{"127.0.0.1"},
		"jwks": json.RawMessage(peer.jwks), "require_signed_receipts": true,
	}, http.StatusCreated)
	d := e.dispatch(t, "po-v2", peer.orgID)
	d = e.waitFor(t, d.ID, "the task working", func(d httpapi.DelegationBody) bool { return dispatched(d) && d.TaskStatus == "working" })
	if d.Remote.ProtocolVersion != "1.0" || d.Remote.ContextID == "" {
		t.Fatalf("remote = %+v", d.Remote)
	}
	if n := countEvents(e.events(t, d.ID), ledger.EventTypeTaskStatusStale); n != 0 {
		t.Fatalf("%d task_status_stale events: the undated submitted status made the agent's working update stale", n)
	}
	return e, peer, d
}

// checkBindingRecorded: the events of the calls name the binding they went
// over: the dispatch, the statuses read (a push too: it is confirmed with
// GetTask), and the compensation request if one was sent.
func checkBindingRecorded(t *testing.T, events []ledger.EventRecord, binding string) {
	t.Helper()
	read := 0
	for _, ev := range events {
		var data struct {
			Binding string `json:"binding"`
		}
		if err := json.Unmarshal(ev.Data, &data); err != nil {
			t.Fatal(err)
		}
		switch ev.Type {
		case ledger.EventTypeTaskDispatched, ledger.EventTypeCompensationRequested:
			if data.Binding != binding {
				t.Errorf("%s records binding %q, want %q: %s", ev.Type, data.Binding, binding, ev.Data)
			}
		case ledger.EventTypeTaskStatusChanged:
			switch {
			case data.Binding == binding:
				read++
			case data.Binding != "":
				t.Errorf("task_status_changed records binding %q, want %q: %s", data.Binding, binding, ev.Data)
			}
		}
	}
	if read == 0 {
		t.Errorf("no status read over %s recorded its binding; events %+v", binding, events)
	}
}

// TestV2PeerCompensated: on each binding, cancel then a compensation
// request answered with a signed compensated receipt.
func TestV2PeerCompensated(t *testing.T) {
	t.Parallel()
	for _, b := range v2Bindings {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			d, events, peer := runV2Peer(t, v2PeerConfig{binding: b, outcome: kit.Compensated}, "compensated")
			if d.HoldState != "returned" || d.Compensation.Attempts != 1 || countEvents(events, ledger.EventTypeCompensationAcked) != 1 {
				t.Fatalf("after compensation: %+v; events %+v", d, events)
			}
			if n := peer.reversals(d.Compensation.IdempotencyKey); n != 1 {
				t.Fatalf("the org reversed %d times", n)
			}
		})
	}
}

// TestV2PeerNotSupported: on each binding, a not_supported receipt leaves
// the obligation compensation_unconfirmed after one request, the hold
// active.
func TestV2PeerNotSupported(t *testing.T) {
	t.Parallel()
	for _, b := range v2Bindings {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			d, events, _ := runV2Peer(t, v2PeerConfig{binding: b, outcome: kit.NotSupported}, "compensation_unconfirmed")
			if d.HoldState != "active" || d.Compensation.Attempts != 1 || countEvents(events, ledger.EventTypeCompensationNotSupported) != 1 {
				t.Fatalf("after not_supported: %+v; events %+v", d, events)
			}
			expectRequestedOnce(t, d.ID, events)
		})
	}
}

// TestV2PeerPendingThenCompensated: on each binding, a pending receipt on
// a working compensation task, then the final receipt on the same task:
// one request, compensated.
func TestV2PeerPendingThenCompensated(t *testing.T) {
	t.Parallel()
	for _, b := range v2Bindings {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			d, events, peer := runV2Peer(t, v2PeerConfig{binding: b, outcome: kit.Compensated, pending: true}, "compensated")
			if d.HoldState != "returned" || d.Compensation.Attempts != 1 || countEvents(events, ledger.EventTypeCompensationRequested) != 1 {
				t.Fatalf("after a pending compensation: %+v; events %+v", d, events)
			}
			expectRequestedOnce(t, d.ID, events)
			if n := peer.reversals(d.Compensation.IdempotencyKey); n != 1 {
				t.Fatalf("the org reversed %d times", n)
			}
		})
	}
}

// TestV2PeerAtomicCancel: the agent declares atomicCancel, so the cancel
// carries the compensation request. Over JSON-RPC the kit answers it on
// the canceled task and the obligation goes from held to compensated with
// no compensation request. a2a-go v2.3.1's HTTP+JSON and gRPC handlers
// build the cancel from the task id alone, so the request never reaches
// the kit there: the cancel comes back without a receipt and Quittance
// asks with a compensation request, once, and is compensated all the
// same.
func TestV2PeerAtomicCancel(t *testing.T) {
	t.Parallel()
	for _, b := range v2Bindings {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			d, events, peer := runV2Peer(t, v2PeerConfig{binding: b, outcome: kit.Compensated, atomic: true}, "compensated")
			if d.HoldState != "returned" {
				t.Fatalf("after an atomic cancel: %+v; events %+v", d, events)
			}
			if b == a2a.BindingJSONRPC {
				if d.ObligationReason != ledger.ReasonAtomicCompensation || d.Compensation.Attempts != 0 {
					t.Fatalf("obligation reason %s after %d requests, want %s with none", d.ObligationReason, d.Compensation.Attempts, ledger.ReasonAtomicCompensation)
				}
			} else if d.Compensation.Attempts != 1 || countEvents(events, ledger.EventTypeCompensationAcked) != 1 {
				t.Fatalf("%d compensation requests after a cancel without receipt, want 1 acked; events %+v", d.Compensation.Attempts, events)
			}
			if n := peer.reversals(d.Compensation.IdempotencyKey); n != 1 {
				t.Fatalf("the org reversed %d times", n)
			}
		})
	}
}

func (p *v2Peer) reversals(key string) int {
	p.rev.mu.Lock()
	defer p.rev.mu.Unlock()
	return p.rev.count[key]
}

// TestV2PeerPurgedTask: on each binding, an agent that forgets the task
// it is asked to cancel answers the cancel and every GetTask after it with
// TaskNotFound. Quittance records remote_task_not_found, naming the
// binding, once for the cancel and at most once for the polls; it never
// reads the task as ended: the obligation stays held, the hold active,
// and no compensation is asked for.
func TestV2PeerPurgedTask(t *testing.T) {
	t.Parallel()
	for _, b := range v2Bindings {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			e, peer, d := dispatchToV2Peer(t, v2PeerConfig{binding: b, outcome: kit.Compensated, purge: true}, apitest.Worker{PollAfter: purgePollAfter})
			e.must(t, http.MethodPost, "/v1/delegations/"+d.ID+"/cancel", e.orch, nil, http.StatusOK)
			waitNotFound(t, e, d.ID, purgePollAfter)
			d = e.get(t, d.ID)
			if d.ObligationState != "held" || d.HoldState != "active" || d.TaskStatus != "working" || d.Compensation.Attempts != 0 {
				t.Fatalf("after TaskNotFound for a purged task: %+v", d)
			}
			events := e.events(t, d.ID)
			for _, ev := range events {
				if ev.Type != ledger.EventTypeRemoteTaskNotFound {
					continue
				}
				var data struct {
					Binding string `json:"binding"`
				}
				if err := json.Unmarshal(ev.Data, &data); err != nil || data.Binding != b {
					t.Errorf("remote_task_not_found %s: binding %q, want %q", ev.Data, data.Binding, b)
				}
			}
			if path := obligationPath(events); path != "" {
				t.Fatalf("a purged task moved the obligation: %s", path)
			}
			if n := peer.reversals(d.Compensation.IdempotencyKey); n != 0 {
				t.Fatalf("the org reversed %d times", n)
			}
			e.CheckInvariants(t)
		})
	}
}

// TestV2PeerObserved: on each binding, the end of a task the agent
// completes by itself reaches Quittance by push (confirmed with GetTask),
// by the task's stream, or by polling, each over the binding, and is
// recorded with its source and binding.
func TestV2PeerObserved(t *testing.T) {
	t.Parallel()
	ways := map[string]apitest.Worker{
		"push":   {},
		"stream": {NoPush: true, Streaming: true},
		"poll":   {NoPush: true, PollAfter: purgePollAfter},
	}
	for _, b := range v2Bindings {
		for source, w := range ways {
			t.Run(b+"/"+source, func(t *testing.T) {
				t.Parallel()
				e, _, d := dispatchToV2Peer(t, v2PeerConfig{binding: b, outcome: kit.Compensated, finishAfter: 2 * time.Second}, w)
				d = e.waitFor(t, d.ID, "the task completed", func(d httpapi.DelegationBody) bool { return d.TaskStatus == "completed" })
				var found bool
				for _, ev := range e.events(t, d.ID) {
					var data struct {
						State, Source, Binding string
					}
					if ev.Type != ledger.EventTypeTaskStatusChanged || json.Unmarshal(ev.Data, &data) != nil || data.State != "completed" {
						continue
					}
					if data.Source != source || data.Binding != b {
						t.Fatalf("completed recorded from %s over %q, want %s over %s: %s", data.Source, data.Binding, source, b, ev.Data)
					}
					found = true
				}
				if !found {
					t.Fatal("no task_status_changed for the completion")
				}
				e.CheckInvariants(t)
			})
		}
	}
}
