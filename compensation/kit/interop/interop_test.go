package interop

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"iter"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	v2 "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"github.com/google/uuid"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/compensation/extension"
	"github.com/quittance/quittance/compensation/kit"
	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/delegate/a2a"
	"github.com/quittance/quittance/internal/jose"
	"github.com/quittance/quittance/ledger"
)

const (
	orgID    = "acme-supplies"
	ledgerID = "quittance"
)

// work is the org's own executor: every task works until canceled.
type work struct{}

func (work) Execute(_ context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[v2.Event, error] {
	return func(yield func(v2.Event, error) bool) {
		if yield(v2.NewSubmittedTask(ec, ec.Message), nil) {
			yield(v2.NewStatusUpdateEvent(ec, v2.TaskStateWorking, nil), nil)
		}
	}
}

func (work) Cancel(_ context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[v2.Event, error] {
	return func(yield func(v2.Event, error) bool) {
		yield(v2.NewStatusUpdateEvent(ec, v2.TaskStateCanceled, nil), nil)
	}
}

// reversals counts the org's reversals per idempotency key.
type reversals struct {
	mu       sync.Mutex
	count    map[string]int
	requests []kit.Request
}

func (r *reversals) reverse(_ context.Context, req kit.Request) (kit.Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.count[req.IdempotencyKey]++
	r.requests = append(r.requests, req)
	return kit.Result{Outcome: kit.Compensated, ReceiptID: "rcpt-" + string(req.TaskID)}, nil
}

// serve serves an a2a-go v2 agent with the kit on loopback, signing with
// signer, and returns its card's URL.
func serve(t *testing.T, signer *kit.Signer, r *reversals, p kit.Params) string {
	t.Helper()
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	card := &v2.AgentCard{
		Name: "ACME Supplies", Description: "sells pallets", Version: "1.0.0",
		SupportedInterfaces: []*v2.AgentInterface{{URL: srv.URL + "/rpc", ProtocolBinding: v2.TransportProtocolJSONRPC, ProtocolVersion: "1.0"}},
		DefaultInputModes:   []string{"text"}, DefaultOutputModes: []string{"text"},
		Skills: []v2.AgentSkill{{ID: "buy", Name: "buy", Description: "buy", Tags: []string{"buy"}}},
	}
	card.Capabilities.Extensions = append(card.Capabilities.Extensions, kit.Extension(signer, p))
	if err := extension.ValidateValue(extension.SchemaCard, card.Capabilities.Extensions[0]); err != nil {
		t.Errorf("the kit's declaration: %v", err)
	}
	handler := a2asrv.NewHandler(kit.Wrap(work{}, signer, r.reverse))
	mux.Handle("/rpc", a2asrv.NewJSONRPCHandler(handler))
	mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewStaticAgentCardHandler(card))
	return srv.URL + a2asrv.WellKnownAgentCardPath
}

// keys make an org key of each kind Quittance accepts.
var keys = map[string]func() (crypto.Signer, error){
	"EdDSA": func() (crypto.Signer, error) { _, k, err := ed25519.GenerateKey(rand.Reader); return k, err },
	"ES256": func() (crypto.Signer, error) { return ecdsa.GenerateKey(elliptic.P256(), rand.Reader) },
	"ES384": func() (crypto.Signer, error) { return ecdsa.GenerateKey(elliptic.P384(), rand.Reader) },
	"PS256": func() (crypto.Signer, error) { return rsa.GenerateKey(rand.Reader, 2048) },
}

func newSigner(t *testing.T, kid string) (*kit.Signer, []byte) {
	t.Helper()
	return newSignerAlg(t, kid, "EdDSA")
}

func newSignerAlg(t *testing.T, kid, alg string) (*kit.Signer, []byte) {
	t.Helper()
	priv, err := keys[alg]()
	if err != nil {
		t.Fatal(err)
	}
	s, err := kit.NewSigner(kit.SignerConfig{OrgID: orgID, LedgerID: ledgerID, KeyID: kid, Key: priv})
	if err != nil {
		t.Fatal(err)
	}
	jwks, err := s.JWKS()
	if err != nil {
		t.Fatal(err)
	}
	return s, jwks
}

// quittance is Quittance's side: the ledger's identity, the org's agent
// (card fetched as the worker fetches it) and a delegation whose task the
// agent ran and canceled.
type quittance struct {
	id     *jose.Identity
	card   a2a.AgentCard
	client *a2a.Client
	d      ledger.Delegation
}

func newQuittance(t *testing.T, cardURL string) *quittance {
	t.Helper()
	ctx := t.Context()
	raw, err := jose.NewIdentityFile("ledger", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	id, err := jose.LoadIdentity(ledgerID, raw)
	if err != nil {
		t.Fatal(err)
	}
	card, err := a2a.FetchAgentCard(ctx, http.DefaultClient, cardURL, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := card.Extension(compensation.ExtensionURI); !ok {
		t.Fatalf("the card does not declare %s: %+v", compensation.ExtensionURI, card.Extensions)
	}
	iface, err := card.JSONRPCInterface()
	if err != nil {
		t.Fatal(err)
	}
	q := &quittance{id: id, card: card, client: a2a.NewClient(http.DefaultClient, iface)}
	q.d = ledger.Delegation{ID: uuid.New(), OrgID: orgID, Hold: ledger.Money{AmountMinor: 125000, Currency: "EUR"}}
	q.d.Remote.ContextID = "quittance-context-" + q.d.ID.String()
	res, err := q.client.SendMessage(ctx, a2a.SendRequest{Message: a2a.Message{
		MessageID: delegate.DispatchMessageID(q.d.ID), ContextID: q.d.Remote.ContextID, Role: a2a.RoleUser,
		Parts: []a2a.Part{{Text: "Order 40 laptops"}},
	}, ReturnImmediately: true})
	if err != nil || res.Task == nil {
		t.Fatalf("dispatch: %+v, %v", res, err)
	}
	q.d.Remote.TaskID = res.Task.ID
	q.d.Compensation.IdempotencyKey = ledger.CompensationKey(q.d)
	return q
}

// cancel cancels the delegation's task as the worker does
// (delegate.CancelExtensions) and returns the canceled task.
func (q *quittance) cancel(t *testing.T) a2a.Task {
	t.Helper()
	exts, meta, err := delegate.CancelExtensions(q.d, q.card, q.id, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	task, err := q.client.CancelTaskWithMetadata(t.Context(), q.d.Remote.TaskID, exts, meta)
	if err != nil || task.Status.State != a2a.TaskStateCanceled {
		t.Fatalf("cancel: %+v, %v", task, err)
	}
	q.d.TaskStatus = ledger.StatusCanceled
	return task
}

// ask sends round's compensation request as the worker does and returns
// the receipt the agent answered with, as sent and as parsed.
func (q *quittance) ask(t *testing.T, round int) (json.RawMessage, compensation.RemoteReceipt) {
	t.Helper()
	req := compensation.RequestFor(q.d)
	send, err := delegate.CompensationRequestSend(q.d, req, compensation.RequestMessageID(q.d.ID, round),
		[]string{q.d.Remote.TaskID}, q.id, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	res, err := q.client.SendMessage(t.Context(), send)
	if err != nil || res.Task == nil {
		t.Fatalf("compensation request: %+v, %v", res, err)
	}
	// The request returns at once (returnImmediately); the worker follows
	// the compensation task with GetTask until its receipt is there.
	task := *res.Task
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		for _, art := range task.Artifacts {
			if art.Name == compensation.ReceiptArtifactName && len(art.Parts) == 1 {
				r, err := compensation.ParseRemoteReceipt(art.Parts[0].Data)
				if err != nil {
					t.Fatal(err)
				}
				return art.Parts[0].Data, r
			}
		}
		if task.Status.State.Terminal() || time.Now().After(deadline) {
			t.Fatalf("task %s (%s) has no receipt: %+v", task.ID, task.Status.State, task.Artifacts)
		}
		if task, err = q.client.GetTask(t.Context(), task.ID); err != nil {
			t.Fatal(err)
		}
	}
}

func (q *quittance) judge(r compensation.RemoteReceipt, jwks []byte) compensation.ReceiptVerdict {
	return compensation.JudgeReceipt(compensation.ReceiptInput{
		Delegation: q.d, Org: ledger.Org{ID: orgID, JWKS: jwks, RequireSignedReceipts: true},
		Receipt: r, LedgerID: ledgerID, Now: time.Now(),
	})
}

// TestQuittanceAcceptsTheKitsReceipt: the receipt the kit signs for a
// compensation request Quittance sends is an ack Quittance accepts, the
// same key asked again is reversed once, and what went over the wire
// holds to the extension's schemas.
func TestQuittanceAcceptsTheKitsReceipt(t *testing.T) {
	for alg := range keys {
		t.Run(alg, func(t *testing.T) { acceptsReceipt(t, alg) })
	}
}

func acceptsReceipt(t *testing.T, alg string) {
	signer, jwks := newSignerAlg(t, "acme-1", alg)
	r := &reversals{count: map[string]int{}}
	q := newQuittance(t, serve(t, signer, r, kit.Params{}))
	if task := q.cancel(t); len(task.Artifacts) != 0 {
		t.Fatalf("a cancel without atomicCancel carries artifacts %+v", task.Artifacts)
	}

	raw, receipt := q.ask(t, 1)
	v := q.judge(receipt, jwks)
	if v.Event != ledger.EventCompensationAck || v.Claims == nil || v.Claims.KeyID != "acme-1" {
		t.Fatalf("verdict %+v; want a signed compensation ack", v)
	}
	if err := extension.Validate(extension.SchemaReceipt, raw); err != nil {
		t.Error(err)
	}
	if err := extension.ValidateToken(extension.SchemaReceiptToken, receipt.JWS); err != nil {
		t.Error(err)
	}
	_, again := q.ask(t, 2)
	if v := q.judge(again, jwks); v.Event != ledger.EventCompensationAck || again.ReceiptID != receipt.ReceiptID {
		t.Errorf("repeat: receipt %+v, verdict %+v; want the same receipt, accepted", again, v)
	}
	if n := r.count[q.d.Compensation.IdempotencyKey]; n != 1 {
		t.Errorf("the org reversed %d times for one key, want once", n)
	}
	// The org can tell the ledger asked: RequestFrom hands it the ledger's
	// signature, which verifies against the ledger's published keys.
	got := r.requests[0]
	claims, err := compensation.VerifyCompensationRequest(got.RequestJWS, q.id.JWKS(), ledgerID, orgID, time.Now())
	if err != nil || claims.TaskID != string(got.TaskID) || claims.IdempotencyKey != got.IdempotencyKey ||
		claims.MessageID != compensation.RequestMessageID(q.d.ID, 1) {
		t.Errorf("request %+v: claims %+v, %v", got, claims, err)
	}
}

// TestQuittanceRefusesAForgedReceipt: a receipt signed with a key the org
// did not register — under the registered key's kid — proves nothing, and
// neither does an unsigned one from an org that requires signatures.
func TestQuittanceRefusesAForgedReceipt(t *testing.T) {
	_, registered := newSigner(t, "acme-1")
	forger, _ := newSigner(t, "acme-1")
	q := newQuittance(t, serve(t, forger, &reversals{count: map[string]int{}}, kit.Params{}))
	q.cancel(t)
	_, receipt := q.ask(t, 1)
	if v := q.judge(receipt, registered); v.Event != "" || !strings.Contains(v.Problem, "refused") {
		t.Fatalf("forged receipt: verdict %+v; want it refused", v)
	}
	receipt.JWS = ""
	if v := q.judge(receipt, registered); v.Event != "" {
		t.Fatalf("unsigned receipt: verdict %+v; want it refused", v)
	}
}

// TestAtomicCancelReceiptAccepted: an agent that declares atomicCancel
// gets the compensation request with Quittance's cancel and answers it on
// the canceled task, where Quittance judges it as an atomic receipt; the
// compensation request sent later for the same key gets the same receipt,
// with no second reversal.
func TestAtomicCancelReceiptAccepted(t *testing.T) {
	signer, jwks := newSigner(t, "acme-1")
	r := &reversals{count: map[string]int{}}
	q := newQuittance(t, serve(t, signer, r, kit.Params{AtomicCancel: true}))
	task := q.cancel(t)
	var raw json.RawMessage
	for _, art := range task.Artifacts {
		if art.Name == compensation.ReceiptArtifactName && len(art.Parts) == 1 {
			raw = art.Parts[0].Data
		}
	}
	if raw == nil {
		t.Fatalf("the canceled task has no receipt: %+v", task.Artifacts)
	}
	if err := extension.Validate(extension.SchemaReceipt, raw); err != nil {
		t.Error(err)
	}
	receipt, err := compensation.ParseRemoteReceipt(raw)
	if err != nil {
		t.Fatal(err)
	}
	v := compensation.JudgeReceipt(compensation.ReceiptInput{
		Delegation: q.d, Org: ledger.Org{ID: orgID, JWKS: jwks, RequireSignedReceipts: true},
		Receipt: receipt, LedgerID: ledgerID, Now: time.Now(), Atomic: true,
	})
	if v.Event != ledger.EventCompensationAck {
		t.Fatalf("atomic receipt %+v: verdict %+v; want an ack", receipt, v)
	}
	_, again := q.ask(t, 1)
	if again.ReceiptID != receipt.ReceiptID || r.count[q.d.Compensation.IdempotencyKey] != 1 {
		t.Errorf("request after the atomic cancel: receipt %+v, %d reversals; want the same receipt, one reversal",
			again, r.count[q.d.Compensation.IdempotencyKey])
	}
}
