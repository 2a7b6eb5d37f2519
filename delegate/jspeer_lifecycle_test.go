package delegate_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/delegate/internal/jspeer"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/pgstore"
	"github.com/quittance/quittance/sql/pgtest"
)

// These tests run the A2A lifecycle against the official JS SDK
// (@a2a-js/sdk, A2A v1.0) in a Node process on loopback: dispatch, push,
// streaming, cancel, and compensation over A2A with signed receipts. They
// drive the ledger service — what the HTTP API calls — and receive pushes
// over real HTTP (the API's own receiver is tested in cmd/quittance).

const jsLedgerID = "ledger-js-test"

type jsEnv struct {
	store  *pgstore.Store
	ledger *ledger.Service
	peer   *jspeer.Peer
	orch   ledger.Principal
	w      *delegate.Worker
}

type jsOptions struct {
	push      bool
	streaming bool
	peer      []jspeer.Option
}

func newJSEnv(t *testing.T, o jsOptions) *jsEnv {
	t.Helper()
	peer := jspeer.Start(t, append([]jspeer.Option{jspeer.WithOrgID("js-supplier"), jspeer.WithLedgerID(jsLedgerID)}, o.peer...)...)
	policy := delegate.EgressPolicy{AllowHTTP: true, AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
	pool := pgtest.Pool(t)
	store := pgstore.New(pool)
	svc := ledger.NewService(ledger.Config{
		Store:        store,
		ValidateJWKS: func(raw []byte) error { _, err := compensation.ParseOrgJWKS(raw); return err },
		ValidateAgentEndpoint: func(u string, hosts []string) error {
			return delegate.ValidateAgentEndpoint(policy, u, hosts)
		},
		ValidateDispatchMessage: delegate.ValidateDispatchMessage,
	})
	comp := compensation.NewService(compensation.Config{Store: store.Compensation(), LedgerID: jsLedgerID})
	var worker *delegate.Worker
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := uuid.Parse(strings.TrimPrefix(r.URL.Path, "/a2a/push/"))
		body, _ := io.ReadAll(r.Body)
		if err == nil {
			err = worker.ReceivePush(r.Context(), id, delegate.PushTokenFromRequest(r), body)
		}
		switch {
		case err == nil:
			w.WriteHeader(http.StatusAccepted)
		case errors.Is(err, delegate.ErrPushUnauthorized):
			w.WriteHeader(http.StatusUnauthorized)
		default:
			w.WriteHeader(http.StatusBadRequest)
		}
	}))
	t.Cleanup(receiver.Close)
	public := ""
	if o.push {
		public = receiver.URL
	}
	worker = delegate.NewWorker(delegate.Config{
		Store: store.A2A(), Compensation: comp, HTTPClient: delegate.NewHTTPClient(policy), LedgerID: jsLedgerID,
		PublicURL: public, Interval: 20 * time.Millisecond, PollAfter: time.Hour, PollInterval: time.Hour,
		BackoffBase: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond, CompensationPollInterval: 20 * time.Millisecond,
		Streaming: o.streaming, StreamInterval: 20 * time.Millisecond,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = worker.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	oncall := ledger.Principal{Name: "oncall", Role: ledger.RoleOncall}
	bg := context.Background()
	if _, _, err := svc.PutBudget(bg, oncall, "ops", "EUR", 1_000_000); err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.PutOrg(bg, oncall, peer.OrgID, ledger.OrgInput{
		Name: "JS supplier", JWKS: peer.JWKS, AgentCardURL: peer.CardURL, AllowedHosts: peer.AllowedHosts, RequireSignedReceipts: true,
	}); err != nil {
		t.Fatalf("register the JS peer: %v", err)
	}
	return &jsEnv{store: store, ledger: svc, peer: peer, orch: ledger.Principal{Name: "orch", Role: ledger.RoleOrchestrator, Tenant: "acme"}, w: worker}
}

func (e *jsEnv) dispatch(t *testing.T, op, scenario string) ledger.Delegation {
	t.Helper()
	msg := fmt.Sprintf(`{"parts":[{"text":%q},{"data":{"sku":"P-1","qty":3}}]}`, scenario)
	d, created, err := e.ledger.CreateDelegation(context.Background(), e.orch, ledger.CreateInput{
		BusinessOperationID: op, OrgID: e.peer.OrgID, TaskClass: "procurement", BudgetID: "ops",
		Hold: ledger.Money{AmountMinor: 5_000, Currency: "EUR"}, Dispatch: &ledger.DispatchInput{Message: json.RawMessage(msg)},
	})
	if err != nil || !created {
		t.Fatalf("dispatch: %v (created %v)", err, created)
	}
	return d
}

func (e *jsEnv) waitFor(t *testing.T, id uuid.UUID, what string, ok func(ledger.Delegation) bool) ledger.Delegation {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		d, err := e.store.Delegation(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if ok(d) {
			return d
		}
		if time.Now().After(deadline) {
			events, _ := e.store.StreamEvents(context.Background(), d.Stream())
			var types []string
			for _, ev := range events {
				types = append(types, ev.Type+":"+string(ev.Data))
			}
			t.Fatalf("timed out waiting for %s: %+v\nevents:\n%s\npeer output:\n%s", what, d, strings.Join(types, "\n"), e.peer.Output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *jsEnv) events(t *testing.T, d ledger.Delegation) []ledger.Event {
	t.Helper()
	events, err := e.store.StreamEvents(context.Background(), d.Stream())
	if err != nil {
		t.Fatal(err)
	}
	return events
}

// sourceOf returns the sources of the task_status_changed events that moved
// the obligation to state.
func sources(events []ledger.Event, to ledger.ObligationState) []string {
	var out []string
	for _, ev := range events {
		if ev.Type == ledger.EventTypeTaskStatusChanged && ev.ObligationTo == to {
			var data struct {
				Source string `json:"source"`
			}
			_ = json.Unmarshal(ev.Data, &data)
			out = append(out, data.Source)
		}
	}
	return out
}

func started(d ledger.Delegation) bool { return d.Remote.TaskID != "" }

func TestJSPeerCancelThenSignedCompensation(t *testing.T) {
	t.Parallel()
	e := newJSEnv(t, jsOptions{push: true, streaming: true})
	d := e.dispatch(t, "po-js-1", jspeer.ScenarioWork)
	d = e.waitFor(t, d.ID, "the dispatched task", started)
	if d.Remote.ProtocolVersion != "1.0" || d.Remote.ContextID == "" {
		t.Fatalf("remote = %+v, want A2A 1.0 with a context id", d.Remote)
	}
	if _, err := e.ledger.RequestCancel(context.Background(), e.orch, d.ID); err != nil {
		t.Fatal(err)
	}
	d = e.waitFor(t, d.ID, "compensated", func(d ledger.Delegation) bool { return d.ObligationState == ledger.ObligationCompensated })
	if d.TaskStatus != ledger.StatusCanceled || len(d.Compensation.Receipt) == 0 {
		t.Fatalf("after compensation: %+v", d)
	}
	var acked *ledger.Event
	events := e.events(t, d)
	for i, ev := range events {
		if ev.Type == compensation.EventTypeCompensationAcked {
			acked = &events[i]
		}
	}
	if acked == nil || acked.ObligationFrom != ledger.ObligationRevocationPendingCompensation || strings.Count(acked.Evidence, ".") != 2 {
		t.Fatalf("no signed compensation ack event: %+v", events)
	}
}

func TestJSPeerNoEffectsDeclarationReleases(t *testing.T) {
	t.Parallel()
	e := newJSEnv(t, jsOptions{push: true, peer: []jspeer.Option{jspeer.WithNoEffects()}})
	d := e.dispatch(t, "po-js-2", jspeer.ScenarioWork)
	e.waitFor(t, d.ID, "the dispatched task", started)
	if _, err := e.ledger.RequestCancel(context.Background(), e.orch, d.ID); err != nil {
		t.Fatal(err)
	}
	d = e.waitFor(t, d.ID, "released", func(d ledger.Delegation) bool { return d.ObligationState == ledger.ObligationReleased })
	if d.ObligationReason != ledger.ReasonNoCompensationDeclared {
		t.Fatalf("released for %q", d.ObligationReason)
	}
}

func TestJSPeerAtomicCancelAndCompensate(t *testing.T) {
	t.Parallel()
	e := newJSEnv(t, jsOptions{peer: []jspeer.Option{jspeer.WithAtomicCancel()}})
	d := e.dispatch(t, "po-js-3", jspeer.ScenarioWork)
	e.waitFor(t, d.ID, "the dispatched task", started)
	if _, err := e.ledger.RequestCancel(context.Background(), e.orch, d.ID); err != nil {
		t.Fatal(err)
	}
	d = e.waitFor(t, d.ID, "compensated", func(d ledger.Delegation) bool { return d.ObligationState == ledger.ObligationCompensated })
	if d.ObligationReason != ledger.ReasonAtomicCompensation {
		t.Fatalf("compensated for %q, want the atomic receipt", d.ObligationReason)
	}
}

func TestJSPeerStreamingObservesCompletion(t *testing.T) {
	t.Parallel()
	e := newJSEnv(t, jsOptions{streaming: true, peer: []jspeer.Option{jspeer.WithWorkDuration(1500 * time.Millisecond)}})
	d := e.dispatch(t, "po-js-4", jspeer.ScenarioWork)
	d = e.waitFor(t, d.ID, "settled", func(d ledger.Delegation) bool { return d.ObligationState == ledger.ObligationSettled })
	if got := sources(e.events(t, d), ledger.ObligationSettled); len(got) != 1 || got[0] != "stream" {
		t.Fatalf("settled by %v, want the stream (no push, no poll)", got)
	}
}

func TestJSPeerPushObservesCompletion(t *testing.T) {
	t.Parallel()
	e := newJSEnv(t, jsOptions{push: true, peer: []jspeer.Option{jspeer.WithWorkDuration(1500 * time.Millisecond)}})
	d := e.dispatch(t, "po-js-5", jspeer.ScenarioWork)
	d = e.waitFor(t, d.ID, "settled", func(d ledger.Delegation) bool { return d.ObligationState == ledger.ObligationSettled })
	if got := sources(e.events(t, d), ledger.ObligationSettled); len(got) != 1 || got[0] != "push" {
		t.Fatalf("settled by %v, want a push confirmed by GetTask", got)
	}
}

func TestJSPeerNotCancelableKeepsHold(t *testing.T) {
	t.Parallel()
	e := newJSEnv(t, jsOptions{push: true})
	d := e.dispatch(t, "po-js-6", jspeer.ScenarioNotCancelable)
	e.waitFor(t, d.ID, "the dispatched task", started)
	if _, err := e.ledger.RequestCancel(context.Background(), e.orch, d.ID); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		refused := false
		for _, ev := range e.events(t, d) {
			refused = refused || ev.Type == delegate.EventTypeCancelRefused
		}
		if refused {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no cancel_refused: %+v", e.events(t, d))
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	d, _ = e.store.Delegation(context.Background(), d.ID)
	if d.ObligationState != ledger.ObligationHeld || d.TaskStatus.Terminal() {
		t.Fatalf("after a refused cancel: %+v", d)
	}
}
