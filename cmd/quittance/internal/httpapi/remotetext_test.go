package httpapi_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/gob"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"
	"github.com/google/uuid"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/ledger"
)

// textPeer is a remote agent (a2a-go v0.3.3) that says what the database
// cannot store: its tasks work with a status message holding a NUL, and its
// cancel reply (an atomic cancel-and-compensate, as its card declares)
// carries a canceled status whose message holds a NUL and a
// compensation-receipt whose numbers jsonb rewrites (1e2, -0, 1.0, an
// integer beyond 2^53) and whose text holds a NUL.
type textPeer struct {
	mu  sync.Mutex
	key string // the idempotency key the receipt names

	gets atomic.Int32 // GetTask calls answered
	stop chan struct{}
}

const (
	workingMessage  = "packing\x00pallets"
	canceledMessage = "stopped\x00"
)

func (p *textPeer) Execute(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	msg := a2a.NewMessage(a2a.MessageRoleAgent, a2a.TextPart{Text: workingMessage})
	if err := q.Write(ctx, a2a.NewStatusUpdateEvent(rc, a2a.TaskStateWorking, msg)); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return nil
	case <-p.stop:
		return finishOnStop(ctx, rc, q)
	}
}

func (p *textPeer) Cancel(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	p.mu.Lock()
	key := p.key
	p.mu.Unlock()
	art := a2a.NewArtifactEvent(rc, a2a.DataPart{Data: map[string]any{
		"outcome": "compensated", "receiptId": "rcpt-\x00-1", "taskId": string(rc.TaskID), "idempotencyKey": key,
		"reversedMinor": json.Number("1e2"), "fee": json.Number("-0"), "rate": json.Number("1.0"),
		"ref": json.Number("9007199254740993"), "note": "café ✓",
	}})
	art.Artifact.Name = compensation.ReceiptArtifactName
	if err := q.Write(ctx, art); err != nil {
		return err
	}
	ev := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateCanceled, a2a.NewMessage(a2a.MessageRoleAgent, a2a.TextPart{Text: canceledMessage}))
	ev.Final = true
	return q.Write(ctx, ev)
}

// The a2a-go task store copies artifacts through gob, which must know the
// type that keeps the receipt's number literals.
func init() { gob.Register(json.Number("")) }

// startTextPeer serves p on loopback, its card declaring the compensation
// extension with atomicCancel; GetTask calls are counted.
func startTextPeer(t *testing.T, p *textPeer) string {
	t.Helper()
	p.stop = make(chan struct{})
	t.Cleanup(func() { close(p.stop) })
	rpc := a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(p))
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
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		rpc.ServeHTTP(w, r)
		if bytes.Contains(body, []byte(`"tasks/get"`)) {
			p.gets.Add(1)
		}
	})
	mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewStaticAgentCardHandler(&a2a.AgentCard{
		Name: "Supplier", Description: "says odd things", URL: srv.URL + "/rpc",
		PreferredTransport: a2a.TransportProtocolJSONRPC, ProtocolVersion: "0.3.0", Version: "1.0.0",
		Capabilities: a2a.AgentCapabilities{Extensions: []a2a.AgentExtension{{
			URI: compensation.ExtensionURI, Params: map[string]any{"atomicCancel": true},
		}}},
		DefaultInputModes: []string{"text"}, DefaultOutputModes: []string{"text"},
		Skills: []a2a.AgentSkill{{ID: "buy", Name: "buy", Description: "buy", Tags: []string{"buy"}}},
	}))
	return srv.URL + a2asrv.WellKnownAgentCardPath
}

// TestA2ARemoteTextIsRecorded: what a remote agent says is data, whatever
// it holds. A NUL in the status message of the dispatch reply and of every
// poll is recorded (replaced by U+FFFD, the raw data kept in base64) and
// the observe jobs finish; twenty identical polls append no event and only
// move last_observed_at; the cancel reply's NUL-bearing canceled status and
// its receipt, whose numbers jsonb normalises, are recorded, and the
// delegation's chain still verifies from the evidence endpoint.
func TestA2ARemoteTextIsRecorded(t *testing.T) {
	t.Parallel()
	peer := &textPeer{}
	cardURL := startTextPeer(t, peer)
	e := newA2AEnv(t, apitest.Worker{NoPush: true, PollAfter: 30 * time.Millisecond})
	e.putOrg(t, "supplier", cardURL, http.StatusCreated)

	d := e.dispatch(t, "po-text", "supplier")
	d = e.waitFor(t, d.ID, "the working task", func(d httpapi.DelegationBody) bool { return d.TaskStatus == "working" })
	if want := "packing\uFFFDpallets"; d.TaskStatusMessage != want {
		t.Fatalf("task_status_message %q, want %q", d.TaskStatusMessage, want)
	}
	events := e.events(t, d.ID)
	var working ledger.EventRecord
	for _, ev := range events {
		if ev.Type == ledger.EventTypeTaskStatusChanged {
			working = ev
		}
	}
	var data struct {
		Message string `json:"message"`
		Raw     string `json:"raw_data_base64"`
	}
	if err := json.Unmarshal(working.Data, &data); err != nil || data.Message != "packing\uFFFDpallets" {
		t.Fatalf("working event data %s (%v)", working.Data, err)
	}
	raw, err := base64.StdEncoding.DecodeString(data.Raw)
	if err != nil || !bytes.Contains(raw, []byte(`packing\u0000pallets`)) {
		t.Fatalf("raw data of the working event %q (%v), want the message as sent", raw, err)
	}

	// Twenty polls and more, each answering the same status and message.
	before := len(events)
	firstObserved := *e.get(t, d.ID).LastObservedAt
	start := peer.gets.Load()
	deadline := time.Now().Add(20 * time.Second)
	for peer.gets.Load() < start+20 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d polls answered", peer.gets.Load()-start)
		}
		time.Sleep(20 * time.Millisecond)
	}
	got := e.get(t, d.ID)
	if n := len(e.events(t, d.ID)); n != before {
		t.Fatalf("%d polls of an unchanged task appended %d events: %+v", peer.gets.Load()-start, n-before, e.events(t, d.ID)[before:])
	}
	if got.LastObservedAt == nil || !got.LastObservedAt.After(firstObserved) || got.Version != d.Version {
		t.Fatalf("after the polls: last_observed_at %v (was %v), version %d (was %d)", got.LastObservedAt, firstObserved, got.Version, d.Version)
	}
	// The job of the last poll answered may still be finishing.
	var observed, failed int
	for wait := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if err := e.Pool.QueryRow(context.Background(), `
			SELECT count(*) FILTER (WHERE outcome = 'observed'), count(*) FILTER (WHERE last_error IS NOT NULL OR outcome = 'observe_failed')
			FROM a2a_outbox WHERE delegation_id = $1 AND kind = 'observe'`, d.ID).Scan(&observed, &failed); err != nil {
			t.Fatal(err)
		}
		if observed >= 20 || time.Now().After(wait) {
			break
		}
	}
	if observed < 20 || failed != 0 {
		t.Fatalf("observe jobs: %d observed, %d failed or retried; want every poll observed", observed, failed)
	}

	// The cancel reply: canceled with a NUL, and an atomic receipt.
	peer.mu.Lock()
	peer.key = ledger.CompensationKey(ledger.Delegation{ID: uuid.MustParse(d.ID)})
	peer.mu.Unlock()
	e.must(t, http.MethodPost, "/v1/delegations/"+d.ID+"/cancel", e.orch, nil, http.StatusOK)
	d = e.waitFor(t, d.ID, "compensated", func(d httpapi.DelegationBody) bool { return d.ObligationState == "compensated" })
	if d.TaskStatus != "canceled" || d.TaskStatusMessage != "stopped\uFFFD" || d.HoldState != "returned" {
		t.Fatalf("after the cancel reply: %s %q %s / %s", d.TaskStatus, d.TaskStatusMessage, d.ObligationState, d.HoldState)
	}
	if receipt, _ := d.Compensation.Receipt.(map[string]any); receipt["receiptId"] != "rcpt-\uFFFD-1" {
		t.Fatalf("stored receipt %v", d.Compensation.Receipt)
	}

	// As quittance verify-chain reads it.
	var chain struct {
		Events []ledger.EventRecord `json:"events"`
	}
	if err := json.Unmarshal(e.must(t, http.MethodGet, "/v1/delegations/"+d.ID+"/evidence", e.OncallToken, nil, http.StatusOK), &chain); err != nil {
		t.Fatal(err)
	}
	var canceled ledger.EventRecord
	chainEvents := make([]ledger.Event, len(chain.Events))
	for i, r := range chain.Events {
		if chainEvents[i], err = r.Event(); err != nil {
			t.Fatal(err)
		}
		if r.Type == ledger.EventTypeTaskStatusChanged && r.ObligationTo == ledger.ObligationCompensated {
			canceled = r
		}
	}
	if err := ledger.VerifyChain(chainEvents); err != nil {
		t.Fatalf("the chain of a delegation with a 1e2 receipt: %v", err)
	}
	// The evidence shows the receipt's numbers as the remote wrote them.
	for _, lit := range []string{`"reversedMinor":1e2`, `"fee":-0`, `"rate":1.0`, `"ref":9007199254740993`} {
		if !strings.Contains(string(canceled.Data), lit) {
			t.Errorf("canceled event data %s lacks %s", canceled.Data, lit)
		}
	}
	e.CheckInvariants(t)
}
