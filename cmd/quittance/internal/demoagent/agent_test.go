package demoagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gojose "github.com/go-jose/go-jose/v4"

	"github.com/quittance/quittance/cmd/quittance/internal/demoagent"
	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/compensation/extension"
	"github.com/quittance/quittance/compensation/kit"
	"github.com/quittance/quittance/delegate/a2a"
	"github.com/quittance/quittance/delegate/egress"
	"github.com/quittance/quittance/internal/jose"
)

// loopback is the egress policy of the tests: plain http to 127.0.0.1.
var loopback = egress.Policy{AllowHTTP: true, AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}

type bundle struct {
	agent  *demoagent.Agent
	server *httptest.Server
	hc     *http.Client
	client *a2a.Client
	card   a2a.AgentCard
}

// setup serves an agent on loopback and returns a v1.0 client for it,
// built from its card the way Quittance builds one.
func setup(t *testing.T, cfg demoagent.Config) *bundle {
	t.Helper()
	if cfg.LedgerID == "" {
		cfg.LedgerID = "ledger-test"
	}
	agent, err := demoagent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agent.Close)
	srv := httptest.NewServer(agent.Handler())
	t.Cleanup(srv.Close)
	hc := egress.NewClient(loopback)
	card, err := a2a.FetchAgentCard(context.Background(), hc, agent.CardURL(srv.URL), []string{"127.0.0.1"})
	if err != nil {
		t.Fatalf("fetch agent card: %v", err)
	}
	iface, err := card.JSONRPCInterface()
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{agent: agent, server: srv, hc: hc, client: a2a.NewClient(hc, iface), card: card}
}

func procurement(messageID, text string) a2a.SendRequest {
	return a2a.SendRequest{
		Message:           a2a.Message{MessageID: messageID, Role: a2a.RoleUser, Parts: []a2a.Part{{Text: text}}},
		ReturnImmediately: true,
	}
}

func compensationRequest(t *testing.T, messageID string, task a2a.Task, key string) a2a.SendRequest {
	t.Helper()
	data, err := json.Marshal(map[string]any{"compensationRequest": map[string]any{
		"taskId": task.ID, "idempotencyKey": key, "reason": "delegation canceled",
	}})
	if err != nil {
		t.Fatal(err)
	}
	return a2a.SendRequest{
		Message: a2a.Message{
			MessageID: messageID, ContextID: task.ContextID, Role: a2a.RoleUser,
			ReferenceTaskIDs: []string{task.ID}, Extensions: []string{demoagent.ExtensionURI},
			Parts: []a2a.Part{{Data: data}},
		},
		ReturnImmediately: true,
		Extensions:        []string{demoagent.ExtensionURI},
	}
}

// waitState polls GetTask until the task reaches state.
func waitState(t *testing.T, c *a2a.Client, id string, state a2a.TaskState) a2a.Task {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		task, err := c.GetTask(context.Background(), id)
		if err != nil {
			t.Fatalf("get task: %v", err)
		}
		if task.Status.State == state {
			return task
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s is %s; want %s", id, task.Status.State, state)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type receiptBody struct {
	Outcome        string `json:"outcome"`
	ReceiptID      string `json:"receiptId"`
	TaskID         string `json:"taskId"`
	IdempotencyKey string `json:"idempotencyKey"`
	JWS            string `json:"jws"`
}

func receiptOf(t *testing.T, task a2a.Task) receiptBody {
	t.Helper()
	for _, a := range task.Artifacts {
		if a.Name != kit.ReceiptArtifactName {
			continue
		}
		if len(a.Parts) != 1 || a.Parts[0].Data == nil {
			t.Fatalf("receipt artifact has %d parts; want one data part", len(a.Parts))
		}
		var r receiptBody
		if err := json.Unmarshal(a.Parts[0].Data, &r); err != nil {
			t.Fatal(err)
		}
		// The receipt holds to the extension's published schemas
		// (compensation/extension/v1/README.md).
		if err := extension.Validate(extension.SchemaReceipt, a.Parts[0].Data); err != nil {
			t.Errorf("receipt %s: %v", a.Parts[0].Data, err)
		}
		if r.JWS != "" {
			if err := extension.ValidateToken(extension.SchemaReceiptToken, r.JWS); err != nil {
				t.Errorf("receipt jws: %v", err)
			}
		}
		return r
	}
	t.Fatalf("task %s has no %s artifact", task.ID, kit.ReceiptArtifactName)
	return receiptBody{}
}

func verify(t *testing.T, b *bundle, token string, kind compensation.TokenKind) compensation.Claims {
	t.Helper()
	keys, err := jose.ParseOrgJWKS(b.agent.JWKS())
	if err != nil {
		t.Fatalf("the agent's JWKS is not registrable: %v", err)
	}
	claims, err := compensation.Verify(compensation.VerifyInput{
		Token: []byte(token), Kind: kind, OrgID: b.agent.OrgID(), Keys: keys, LedgerID: "ledger-test", Now: time.Now(),
	})
	if err != nil {
		t.Fatalf("verify receipt token: %v", err)
	}
	return claims
}

func TestCard(t *testing.T) {
	b := setup(t, demoagent.Config{})
	iface, _ := b.card.JSONRPCInterface()
	if iface.ProtocolVersion != "1.0" || !strings.HasPrefix(iface.URL, b.server.URL) {
		t.Errorf("interface = %+v; want a v1.0 JSON-RPC interface on %s", iface, b.server.URL)
	}
	if !b.card.Streaming || !b.card.PushNotifications {
		t.Errorf("card capabilities: streaming=%v push=%v; want both", b.card.Streaming, b.card.PushNotifications)
	}
	ext, ok := b.card.Extension(demoagent.ExtensionURI)
	if !ok {
		t.Fatal("card does not declare the compensation extension")
	}
	if strings.Contains(string(ext.Params), "atomicCancel") {
		t.Errorf("extension params %s declare atomicCancel without AtomicCancel", ext.Params)
	}
	// The declaration is the kit's: it names the receipts' signing.
	var params struct {
		SignedReceipts bool     `json:"signedReceipts"`
		ReceiptAlgs    []string `json:"receiptAlgs"`
	}
	if err := json.Unmarshal(ext.Params, &params); err != nil || !params.SignedReceipts || !slices.Equal(params.ReceiptAlgs, []string{"EdDSA"}) {
		t.Errorf("extension params %s; want signedReceipts true and receiptAlgs [EdDSA] (err %v)", ext.Params, err)
	}

	resp, err := http.Get(b.server.URL + demoagent.JWKSPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	served, _ := io.ReadAll(resp.Body)
	if string(served) != string(b.agent.JWKS()) {
		t.Errorf("served JWKS %s differs from Agent.JWKS %s", served, b.agent.JWKS())
	}
}

func TestSendGetCancelKeepsEffects(t *testing.T) {
	b := setup(t, demoagent.Config{WorkDelay: time.Hour})
	ctx := context.Background()
	res, err := b.client.SendMessage(ctx, procurement("m-1", "Order 40 laptops"))
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	if res.Task == nil {
		t.Fatal("send returned no task")
	}
	if s := res.Task.Status.State; s != a2a.TaskStateSubmitted && s != a2a.TaskStateWorking {
		t.Errorf("non-blocking send returned a %s task; want submitted or working", s)
	}
	if res.Task.ContextID == "" {
		t.Error("task has no context id")
	}
	task := waitState(t, b.client, res.Task.ID, a2a.TaskStateWorking)
	po, ok := b.agent.PurchaseOrder(task.ID)
	if !ok || po.Reversed {
		t.Fatalf("working task has purchase order %+v, %v; want a committed one", po, ok)
	}

	again, err := b.client.SendMessage(ctx, procurement("m-1", "Order 40 laptops"))
	if err != nil {
		t.Fatal(err)
	}
	if again.Task == nil || again.Task.ID != task.ID {
		t.Errorf("a resend with the same messageId gave task %+v; want %s", again.Task, task.ID)
	}

	canceled, err := b.client.CancelTask(ctx, task.ID, nil)
	if err != nil {
		t.Fatalf("cancel: %v", err)
	}
	if canceled.Status.State != a2a.TaskStateCanceled {
		t.Fatalf("cancel returned %s; want canceled", canceled.Status.State)
	}
	if po, _ := b.agent.PurchaseOrder(task.ID); po.Reversed {
		t.Error("the cancel reversed the purchase order; a cancel must leave the effects in place")
	}
	if _, err := b.client.CancelTask(ctx, task.ID, nil); err != nil {
		t.Errorf("a repeated cancel failed: %v; cancel is idempotent", err)
	}
	if got := waitState(t, b.client, task.ID, a2a.TaskStateCanceled); got.Status.Message == nil {
		t.Error("the canceled status carries no message")
	}
}

func TestErrors(t *testing.T) {
	b := setup(t, demoagent.Config{WorkDelay: time.Millisecond})
	ctx := context.Background()

	if _, err := b.client.GetTask(ctx, "no-such-task"); !errors.Is(err, a2a.ErrTaskNotFound) {
		t.Errorf("get of an unknown task: %v; want TaskNotFound", err)
	}

	res, err := b.client.SendMessage(ctx, procurement("m-done", "Order 1 stapler"))
	if err != nil {
		t.Fatal(err)
	}
	done := waitState(t, b.client, res.Task.ID, a2a.TaskStateCompleted)
	var po bool
	for _, a := range done.Artifacts {
		po = po || a.Name == "purchase-order"
	}
	if !po {
		t.Error("completed task has no purchase-order artifact")
	}
	_, err = b.client.CancelTask(ctx, done.ID, nil)
	if !errors.Is(err, a2a.ErrTaskNotCancelable) {
		t.Fatalf("cancel of a completed task: %v; want TaskNotCancelable", err)
	}
	var rpcErr *a2a.RPCError
	errors.As(err, &rpcErr)
	var details []map[string]any
	if err := json.Unmarshal(rpcErr.Data, &details); err != nil || len(details) != 1 || details[0]["reason"] != "TASK_NOT_CANCELABLE" {
		t.Errorf("error data %s; want an array with one ErrorInfo of reason TASK_NOT_CANCELABLE", rpcErr.Data)
	}

	// A request without A2A-Version is a v0.3 request, which this agent
	// does not speak.
	req, _ := http.NewRequest(http.MethodPost, b.server.URL+demoagent.RPCPath,
		strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x"}}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct{ Error struct{ Code int } }
	json.NewDecoder(resp.Body).Decode(&body)
	if body.Error.Code != -32009 {
		t.Errorf("request without A2A-Version: error code %d; want -32009", body.Error.Code)
	}
}

func TestSubscribe(t *testing.T) {
	b := setup(t, demoagent.Config{WorkDelay: 300 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := b.client.SendMessage(ctx, procurement("m-sub", "Order 3 chairs"))
	if err != nil {
		t.Fatal(err)
	}
	var events []a2a.StreamEvent
	for ev, err := range b.client.Subscribe(ctx, res.Task.ID) {
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		events = append(events, ev)
	}
	if len(events) < 2 || events[0].Task == nil || events[0].Task.ID != res.Task.ID {
		t.Fatalf("stream began with %+v; want the task first", events)
	}
	last := events[len(events)-1]
	if last.StatusUpdate == nil || last.StatusUpdate.Status.State != a2a.TaskStateCompleted {
		t.Errorf("stream ended with %+v; want a completed status update", last)
	}
	var artifact bool
	for _, ev := range events {
		artifact = artifact || (ev.ArtifactUpdate != nil && ev.ArtifactUpdate.Artifact.Name == "purchase-order")
	}
	if !artifact {
		t.Error("stream carried no purchase-order artifact update")
	}

	// A terminal task cannot be subscribed to: the stream yields that error.
	var subscribeErr error
	for _, err := range b.client.Subscribe(ctx, res.Task.ID) {
		subscribeErr = err
		break
	}
	if !errors.Is(subscribeErr, a2a.ErrUnsupportedOperation) {
		t.Errorf("subscribe to a completed task: %v; want UnsupportedOperation", subscribeErr)
	}
}

// pushReceiver records the push notifications it receives.
type pushReceiver struct {
	mu    sync.Mutex
	got   []receivedPush
	event chan struct{}
}

type receivedPush struct {
	auth, token, contentType string
	event                    a2a.StreamEvent
}

func newPushReceiver(t *testing.T) (*pushReceiver, *httptest.Server) {
	p := &pushReceiver{event: make(chan struct{}, 100)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ev, err := a2a.ParsePushNotification(body)
		if err != nil {
			t.Errorf("push body %s: %v", body, err)
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		p.mu.Lock()
		p.got = append(p.got, receivedPush{
			auth: r.Header.Get("Authorization"), token: r.Header.Get("A2A-Notification-Token"),
			contentType: r.Header.Get("Content-Type"), event: ev,
		})
		p.mu.Unlock()
		p.event <- struct{}{}
	}))
	t.Cleanup(srv.Close)
	return p, srv
}

// waitFor waits until a push reports the task in state, and returns every
// push received so far.
func (p *pushReceiver) waitFor(t *testing.T, taskID string, state a2a.TaskState) []receivedPush {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		p.mu.Lock()
		got := append([]receivedPush(nil), p.got...)
		p.mu.Unlock()
		for _, r := range got {
			if su := r.event.StatusUpdate; su != nil && su.TaskID == taskID && su.Status.State == state {
				return got
			}
		}
		select {
		case <-p.event:
		case <-timeout:
			t.Fatalf("no push reported task %s %s; got %d pushes", taskID, state, len(got))
		}
	}
}

func TestPushNotifications(t *testing.T) {
	b := setup(t, demoagent.Config{WorkDelay: time.Hour})
	recv, srv := newPushReceiver(t)
	ctx := context.Background()

	req := procurement("m-push", "Order 12 desks")
	req.Push = &a2a.PushConfig{URL: srv.URL + "/a2a/push/d-1", Token: "secret-1"}
	res, err := b.client.SendMessage(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	recv.waitFor(t, res.Task.ID, a2a.TaskStateWorking)
	if _, err := b.client.CancelTask(ctx, res.Task.ID, nil); err != nil {
		t.Fatal(err)
	}
	got := recv.waitFor(t, res.Task.ID, a2a.TaskStateCanceled)
	var states []a2a.TaskState
	for _, r := range got {
		if r.auth != "Bearer secret-1" || r.token != "secret-1" {
			t.Errorf("push headers Authorization=%q A2A-Notification-Token=%q; want the registered token", r.auth, r.token)
		}
		if r.contentType != "application/a2a+json" {
			t.Errorf("push Content-Type %q; want application/a2a+json", r.contentType)
		}
		states = append(states, r.event.StatusUpdate.Status.State)
	}
	want := []a2a.TaskState{a2a.TaskStateSubmitted, a2a.TaskStateWorking, a2a.TaskStateCanceled}
	if len(states) != len(want) || states[0] != want[0] || states[1] != want[1] || states[2] != want[2] {
		t.Errorf("pushed states %v; want %v in order", states, want)
	}

	// A config registered after the task exists gets the later changes.
	res2, err := b.client.SendMessage(ctx, procurement("m-push-2", "Order 2 lamps"))
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, b.client, res2.Task.ID, a2a.TaskStateWorking)
	if err := b.client.SetPushConfig(ctx, res2.Task.ID, a2a.PushConfig{URL: srv.URL + "/a2a/push/d-2", Token: "secret-2"}); err != nil {
		t.Fatalf("create push config: %v", err)
	}
	if _, err := b.client.CancelTask(ctx, res2.Task.ID, nil); err != nil {
		t.Fatal(err)
	}
	for _, r := range recv.waitFor(t, res2.Task.ID, a2a.TaskStateCanceled) {
		if r.event.TaskID() == res2.Task.ID && r.auth != "Bearer secret-2" {
			t.Errorf("push for the second task carried Authorization %q", r.auth)
		}
	}
	if err := b.client.SetPushConfig(ctx, "no-such-task", a2a.PushConfig{URL: srv.URL}); !errors.Is(err, a2a.ErrTaskNotFound) {
		t.Errorf("push config for an unknown task: %v; want TaskNotFound", err)
	}
}

func TestCompensation(t *testing.T) {
	b := setup(t, demoagent.Config{WorkDelay: time.Hour, OrgID: "supplier-x"})
	ctx := context.Background()
	res, err := b.client.SendMessage(ctx, procurement("m-comp", "Order 500 pallets"))
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, b.client, res.Task.ID, a2a.TaskStateWorking)
	canceled, err := b.client.CancelTask(ctx, res.Task.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range canceled.Artifacts {
		if a.Name == kit.ReceiptArtifactName {
			t.Error("the cancel response carries a receipt without AtomicCancel")
		}
	}

	reply, err := b.client.SendMessage(ctx, compensationRequest(t, "comp-1", canceled, "idem-1"))
	if err != nil {
		t.Fatalf("compensation request: %v", err)
	}
	if reply.Task == nil || reply.Task.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("compensation reply %+v; want a completed task", reply)
	}
	if reply.Task.ContextID != canceled.ContextID {
		t.Errorf("compensation task context %q; want the delegation's %q", reply.Task.ContextID, canceled.ContextID)
	}
	rc := receiptOf(t, *reply.Task)
	if rc.Outcome != string(kit.Compensated) || rc.TaskID != canceled.ID || rc.IdempotencyKey != "idem-1" || rc.ReceiptID == "" {
		t.Errorf("receipt %+v; want compensated for %s with key idem-1", rc, canceled.ID)
	}
	claims := verify(t, b, rc.JWS, compensation.KindAck)
	if claims.Issuer != "supplier-x" || claims.Subject != canceled.ID || claims.IdempotencyKey != "idem-1" ||
		claims.ReceiptID != rc.ReceiptID || claims.JTI == "" || claims.Expiry.Sub(claims.IssuedAt) != 5*time.Minute {
		t.Errorf("claims %+v do not match the receipt %+v", claims, rc)
	}
	if _, err := compensation.Verify(compensation.VerifyInput{
		Token: []byte(rc.JWS), Kind: compensation.KindDeclaration, OrgID: "supplier-x",
		Keys: mustKeys(t, b.agent.JWKS()), LedgerID: "ledger-test", Now: time.Now(),
	}); err == nil {
		t.Error("an ack verified as a declaration")
	}
	if po, _ := b.agent.PurchaseOrder(canceled.ID); !po.Reversed {
		t.Error("compensation did not reverse the purchase order")
	}

	// Retries: the same message gives the same task; a new message with
	// the same idempotency key gives the same receipt.
	same, err := b.client.SendMessage(ctx, compensationRequest(t, "comp-1", canceled, "idem-1"))
	if err != nil {
		t.Fatal(err)
	}
	if same.Task.ID != reply.Task.ID {
		t.Errorf("a resent compensation request made task %s; want %s", same.Task.ID, reply.Task.ID)
	}
	repeat, err := b.client.SendMessage(ctx, compensationRequest(t, "comp-2", canceled, "idem-1"))
	if err != nil {
		t.Fatal(err)
	}
	if got := receiptOf(t, *repeat.Task); got != rc {
		t.Errorf("repeat receipt %+v; want the original %+v", got, rc)
	}

	// The same key for another task is refused.
	other, err := b.client.SendMessage(ctx, procurement("m-other", "Order 1 forklift"))
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, b.client, other.Task.ID, a2a.TaskStateWorking)
	otherCanceled, err := b.client.CancelTask(ctx, other.Task.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.SendMessage(ctx, compensationRequest(t, "comp-3", otherCanceled, "idem-1")); err == nil {
		t.Error("an idempotency key reused for another task was accepted")
	}
	if _, err := b.client.SendMessage(ctx, compensationRequest(t, "comp-4", a2a.Task{ID: "no-such-task"}, "idem-9")); !errors.Is(err, a2a.ErrTaskNotFound) {
		t.Errorf("compensation for an unknown task: %v; want TaskNotFound", err)
	}
}

func TestAtomicCancel(t *testing.T) {
	b := setup(t, demoagent.Config{WorkDelay: time.Hour, AtomicCancel: true})
	ext, _ := b.card.Extension(demoagent.ExtensionURI)
	var params struct{ AtomicCancel bool }
	if err := json.Unmarshal(ext.Params, &params); err != nil || !params.AtomicCancel {
		t.Errorf("extension params %s; want atomicCancel true", ext.Params)
	}
	ctx := context.Background()
	res, err := b.client.SendMessage(ctx, procurement("m-atomic", "Order 9 vans"))
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, b.client, res.Task.ID, a2a.TaskStateWorking)
	canceled, err := b.client.CancelTask(ctx, res.Task.ID, []string{demoagent.ExtensionURI})
	if err != nil {
		t.Fatal(err)
	}
	rc := receiptOf(t, canceled)
	if rc.Outcome != string(kit.Compensated) {
		t.Errorf("atomic cancel receipt outcome %q; want compensated", rc.Outcome)
	}
	verify(t, b, rc.JWS, compensation.KindAck)
	if po, _ := b.agent.PurchaseOrder(res.Task.ID); !po.Reversed {
		t.Error("atomic cancel did not reverse the purchase order")
	}
}

func TestLoadOrCreateKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys", "demo-agent.pem")
	k1, err := demoagent.LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := demoagent.LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if !k1.Equal(k2) {
		t.Error("the key file gave a different key the second time")
	}
	a1, _ := demoagent.New(demoagent.Config{Key: k1})
	a2, _ := demoagent.New(demoagent.Config{Key: k2})
	if string(a1.JWKS()) != string(a2.JWKS()) {
		t.Error("the same key gave different JWK Sets")
	}
}

func mustKeys(t *testing.T, raw []byte) *gojose.JSONWebKeySet {
	t.Helper()
	keys, err := jose.ParseOrgJWKS(raw)
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

func TestCompensationWithoutEffects(t *testing.T) {
	b := setup(t, demoagent.Config{WorkDelay: time.Hour})
	// A closed agent starts no more work, so the task stays submitted and
	// commits no purchase order before it is canceled.
	b.agent.Close()
	ctx := context.Background()
	res, err := b.client.SendMessage(ctx, procurement("m-early", "Order 7 bikes"))
	if err != nil {
		t.Fatal(err)
	}
	canceled, err := b.client.CancelTask(ctx, res.Task.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := b.agent.PurchaseOrder(res.Task.ID); ok {
		t.Fatal("a task canceled while submitted committed a purchase order")
	}
	reply, err := b.client.SendMessage(ctx, compensationRequest(t, "comp-early", canceled, "idem-early"))
	if err != nil {
		t.Fatal(err)
	}
	rc := receiptOf(t, *reply.Task)
	if rc.Outcome != string(kit.NoEffects) {
		t.Fatalf("receipt outcome %q; want no_effects", rc.Outcome)
	}
	claims := verify(t, b, rc.JWS, compensation.KindDeclaration)
	if claims.Subject != canceled.ID || claims.Issuer != demoagent.DefaultOrgID {
		t.Errorf("declaration claims %+v", claims)
	}
}

// TestListTasks: the tasks a client created in the context it chose are
// listed by that context, newest first, with their history (the messageId
// that created each), a page at a time; other contexts are left out.
func TestListTasks(t *testing.T) {
	b := setup(t, demoagent.Config{WorkDelay: time.Hour})
	ctx := context.Background()
	var ids []string
	for i, c := range []string{"ctx-mine", "ctx-other", "ctx-mine", "ctx-mine"} {
		req := procurement(fmt.Sprintf("m-%d", i), "Order 1 laptop")
		req.Message.ContextID = c
		res, err := b.client.SendMessage(ctx, req)
		if err != nil || res.Task == nil {
			t.Fatalf("send: %+v, %v", res, err)
		}
		if res.Task.ContextID != c {
			t.Fatalf("task in context %q, want the client's %q", res.Task.ContextID, c)
		}
		ids = append(ids, res.Task.ID)
	}
	page, err := b.client.ListTasks(ctx, a2a.ListTasksRequest{ContextID: "ctx-mine", PageSize: 2, HistoryLength: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Tasks) != 2 || page.Tasks[0].ID != ids[3] || page.Tasks[1].ID != ids[2] || page.NextPageToken == "" {
		t.Fatalf("page 1 = %+v, want %s, %s and a next page", page, ids[3], ids[2])
	}
	if h := page.Tasks[0].HistoryMessageIDs; len(h) == 0 || h[0] != "m-3" {
		t.Fatalf("history messageIds %v, want m-3 first", h)
	}
	page, err = b.client.ListTasks(ctx, a2a.ListTasksRequest{ContextID: "ctx-mine", PageSize: 2, PageToken: page.NextPageToken})
	if err != nil || len(page.Tasks) != 1 || page.Tasks[0].ID != ids[0] || page.NextPageToken != "" {
		t.Fatalf("page 2 = %+v, %v; want %s alone", page, err, ids[0])
	}
	if _, err := b.client.ListTasks(ctx, a2a.ListTasksRequest{PageSize: 101}); err == nil || a2a.Unsupported(err) {
		t.Fatalf("pageSize 101 answered %v, want invalid params", err)
	}
}

// TestPurgeOnCancel: with PurgeOnCancel the agent forgets a task when asked
// to cancel it: the cancel and every later call on the task answer
// TaskNotFoundError, a resend of its messageId no longer finds it, and its
// purchase order stands, unreversed.
func TestPurgeOnCancel(t *testing.T) {
	b := setup(t, demoagent.Config{WorkDelay: time.Hour, PurgeOnCancel: true, AtomicCancel: true})
	ctx := context.Background()
	res, err := b.client.SendMessage(ctx, procurement("m-purge", "Order 3 forklifts"))
	if err != nil {
		t.Fatal(err)
	}
	task := waitState(t, b.client, res.Task.ID, a2a.TaskStateWorking)
	if b.agent.Purged(task.ID) {
		t.Fatal("a working task is reported purged")
	}
	if _, err := b.client.CancelTask(ctx, task.ID, []string{demoagent.ExtensionURI}); !errors.Is(err, a2a.ErrTaskNotFound) {
		t.Fatalf("cancel of a task purged on cancel: %v; want TaskNotFound", err)
	}
	if !b.agent.Purged(task.ID) {
		t.Error("the canceled task is not reported purged")
	}
	if _, err := b.client.GetTask(ctx, task.ID); !errors.Is(err, a2a.ErrTaskNotFound) {
		t.Errorf("get of a purged task: %v; want TaskNotFound", err)
	}
	if _, err := b.client.CancelTask(ctx, task.ID, nil); !errors.Is(err, a2a.ErrTaskNotFound) {
		t.Errorf("repeated cancel of a purged task: %v; want TaskNotFound", err)
	}
	if _, err := b.client.SendMessage(ctx, compensationRequest(t, "m-purge-comp", task, "key-purge")); !errors.Is(err, a2a.ErrTaskNotFound) {
		t.Errorf("compensation request for a purged task: %v; want TaskNotFound", err)
	}
	if po, ok := b.agent.PurchaseOrder(task.ID); !ok || po.Reversed {
		t.Errorf("purchase order of the purged task %+v, %v; want it committed and standing", po, ok)
	}
	again, err := b.client.SendMessage(ctx, procurement("m-purge", "Order 3 forklifts"))
	if err != nil {
		t.Fatal(err)
	}
	if again.Task == nil || again.Task.ID == task.ID {
		t.Errorf("a resend of the purged task's messageId gave %+v; want a new task", again.Task)
	}
}
