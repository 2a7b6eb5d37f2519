package gateway_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"github.com/google/uuid"

	"github.com/quittance/quittance/cmd/quittance/internal/demoagent"
	"github.com/quittance/quittance/cmd/quittance/internal/gateway"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/extension"
)

// These tests put a2a-go v2's own client (a2aclient, over JSON-RPC and
// HTTP+JSON) in the orchestrator's place: it resolves the gateway's card
// for the demo supplier and delegates through it, on real PostgreSQL, with
// Quittance's A2A workers dispatching to the demo supplier's agent on
// loopback.

const (
	gwLedgerID = "ledger-gateway-test"
	orgID      = demoagent.DefaultOrgID
)

// gwEnv is an API with its workers, the demo supplier registered as
// orgID, a budget "ops" (EUR 10,000.00) that tenants acme and globex hold
// on, and an orchestrator token of each.
type gwEnv struct {
	*apitest.Env
	acme, globex string
}

func newGatewayEnv(t *testing.T, w ...apitest.Worker) *gwEnv {
	t.Helper()
	worker := apitest.Worker{}
	if len(w) > 0 {
		worker = w[0]
	}
	return newGatewayEnvWith(t, worker, demoagent.Config{})
}

// newGatewayEnvWith is newGatewayEnv with the demo supplier configured as
// agent says (WorkDelay an hour unless set) and the API's options opts
// after the gateway tests' own (event streams polled every 50 ms).
func newGatewayEnvWith(t *testing.T, worker apitest.Worker, agentCfg demoagent.Config, opts ...apitest.Option) *gwEnv {
	t.Helper()
	agent, base := serveDemoAgent(t, agentCfg)
	opts = append([]apitest.Option{apitest.WithClock(ledger.SystemClock{}), apitest.WithLedgerID(gwLedgerID), apitest.WithWorker(worker),
		apitest.WithStream(50*time.Millisecond, time.Second)}, opts...)
	e := &gwEnv{Env: apitest.New(t, opts...)}
	e.acme, e.globex = e.NewOrchestrator(t, "acme"), e.NewOrchestrator(t, "globex")
	e.PutBudget(t, "ops", "EUR", 1_000_000)
	e.Do(t, http.MethodPut, "/admin/v1/orgs/"+agent.OrgID(), e.OncallToken, map[string]any{
		"name": "Demo supplier", "agent_card_url": agent.CardURL(base), "allowed_hosts": []string{"127.0.0.1"},
		"jwks": json.RawMessage(agent.JWKS()), "require_signed_receipts": true,
	}).Expect(t, http.StatusCreated)
	return e
}

// serveDemoAgent serves the demo supplier's agent, configured as cfg, on
// loopback until the test ends; its tasks work for an hour unless
// canceled, or cfg's WorkDelay.
func serveDemoAgent(t *testing.T, cfg demoagent.Config) (*demoagent.Agent, string) {
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
	cfg.LedgerID, cfg.Key, cfg.BaseURL = gwLedgerID, key, base
	if cfg.WorkDelay == 0 {
		cfg.WorkDelay = time.Hour
	}
	agent, err := demoagent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agent.Close)
	srv := httptest.NewUnstartedServer(agent.Handler())
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return agent, base
}

// bearer adds a bearer token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// httpClient is an HTTP client that sends token.
func (e *gwEnv) httpClient(token string) *http.Client {
	return &http.Client{Transport: bearer{token: token, next: e.Client.Transport}, Timeout: 30 * time.Second}
}

// orgBase is the gateway's base URL for org.
func (e *gwEnv) orgBase(org string) string { return e.URL + "/a2a/orgs/" + org }

// card resolves org's gateway card with token, as a2a-go's resolver does.
func (e *gwEnv) card(t *testing.T, token, org string) *a2a.AgentCard {
	t.Helper()
	card, err := agentcard.NewResolver(e.Client).Resolve(context.Background(), e.orgBase(org), agentcard.WithRequestHeader("Authorization", "Bearer "+token))
	if err != nil {
		t.Fatalf("resolve %s's card: %v", org, err)
	}
	return card
}

// client is an a2a-go v2 client of org's gateway over binding, sending
// token: the interface is the one the card names for the binding.
func (e *gwEnv) client(t *testing.T, token, org string, binding a2a.TransportProtocol) *a2aclient.Client {
	t.Helper()
	card := e.card(t, e.acme, orgID)
	if org != orgID && org != "acme-supplies" {
		card = e.card(t, e.acme, org)
	}
	var iface *a2a.AgentInterface
	for _, i := range card.SupportedInterfaces {
		if i.ProtocolBinding == binding && i.ProtocolVersion == a2a.Version {
			iface = &a2a.AgentInterface{URL: strings.Replace(i.URL, "/a2a/orgs/"+orgID+"/", "/a2a/orgs/"+org+"/", 1), ProtocolBinding: i.ProtocolBinding, ProtocolVersion: i.ProtocolVersion}
		}
	}
	if iface == nil {
		t.Fatalf("the card names no %s interface: %+v", binding, card.SupportedInterfaces)
	}
	hc := e.httpClient(token)
	c, err := a2aclient.NewFromEndpoints(context.Background(), []*a2a.AgentInterface{iface},
		a2aclient.WithJSONRPCTransport(hc), a2aclient.WithRESTTransport(hc))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Destroy() })
	return c
}

// ledgerData is a purchase order's metadata, in either version: the
// ledger extension's data, a hold of amountMinor EUR on budget "ops" for
// task class procurement.
func ledgerData(amountMinor int64) map[string]any {
	return map[string]any{gateway.ExtensionURI: map[string]any{
		"budget_id": "ops", "task_class": "procurement",
		"hold": map[string]any{"amount_minor": amountMinor, "currency": "EUR"},
	}}
}

// ledgerMessage is a purchase order with the ledger extension's data.
func ledgerMessage(messageID, text string, amountMinor int64) *a2a.Message {
	m := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart(text))
	m.ID = messageID
	m.Metadata = ledgerData(amountMinor)
	return m
}

// meta is the ledger extension's metadata of a task.
func meta(t *testing.T, task *a2a.Task) map[string]any {
	t.Helper()
	m, ok := task.Metadata[gateway.ExtensionURI].(map[string]any)
	if !ok {
		t.Fatalf("task %s has no ledger metadata: %+v", task.ID, task.Metadata)
	}
	if err := extension.ValidateValue(extension.SchemaTaskMetadata, m); err != nil {
		t.Fatalf("task %s: its ledger metadata %+v: %v", task.ID, m, err)
	}
	return m
}

// send sends msg with c and returns the Task it answers.
func send(t *testing.T, c *a2aclient.Client, msg *a2a.Message) *a2a.Task {
	t.Helper()
	res, err := c.SendMessage(context.Background(), &a2a.SendMessageRequest{Message: msg})
	if err != nil {
		t.Fatalf("SendMessage: %v", err)
	}
	task, ok := res.(*a2a.Task)
	if !ok {
		t.Fatalf("SendMessage answered %T, want a task", res)
	}
	return task
}

// sendWorking sends msg with c and waits until the task it answers works,
// as a test of what a running task does begins.
func sendWorking(t *testing.T, c *a2aclient.Client, msg *a2a.Message) *a2a.Task {
	t.Helper()
	task := send(t, c, msg)
	return waitTask(t, c, task.ID, "the task working", func(task *a2a.Task) bool { return task.Status.State == a2a.TaskStateWorking })
}

// poll calls get every 20 ms until ok holds of what it returns, and
// returns that. An error of get fails the test at once; 30 s without ok
// fails it with what was waited for and show of what get returned last.
// It is how the tests wait, whichever version's client or receiver they
// wait on.
func poll[T any](t *testing.T, what string, get func() (T, error), ok func(T) bool, show func(T) string) T {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, err := get()
		if err != nil {
			t.Fatal(err)
		}
		if ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited for %s; %s", what, show(v))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitTask polls GetTask until ok holds of the task.
func waitTask(t *testing.T, c *a2aclient.Client, id a2a.TaskID, what string, ok func(*a2a.Task) bool) *a2a.Task {
	t.Helper()
	get := func() (*a2a.Task, error) {
		task, err := c.GetTask(context.Background(), &a2a.GetTaskRequest{ID: id})
		if err != nil {
			return nil, fmt.Errorf("GetTask %s: %w", id, err)
		}
		return task, nil
	}
	return poll(t, what, get, ok, func(task *a2a.Task) string { return fmt.Sprintf("task %+v, metadata %+v", task.Status, task.Metadata) })
}

// errorInfoMeta is the metadata of an A2A error's ErrorInfo.
func errorInfoMeta(t *testing.T, err error) map[string]string {
	t.Helper()
	var ae *a2a.Error
	if !errors.As(err, &ae) {
		t.Fatalf("%v (%T) is no a2a.Error", err, err)
	}
	m, _ := ae.ErrorInfo().Value["metadata"].(map[string]string)
	return m
}

func TestGatewayCard(t *testing.T) {
	t.Parallel()
	e := newGatewayEnv(t)
	card := e.card(t, e.acme, orgID)
	if card.Name != "Demo Supplier" || len(card.Skills) != 1 || card.Skills[0].ID != "procurement" ||
		strings.Join(card.DefaultInputModes, ",") != "text/plain,application/json" ||
		strings.Join(card.DefaultOutputModes, ",") != "application/json,text/plain" {
		t.Fatalf("the card does not mirror the remote card: %+v", card)
	}
	base := e.URL + "/a2a/orgs/" + orgID
	// 1.0's JSON-RPC and HTTP+JSON, then 0.3's JSON-RPC at 1.0's URL
	// (v03_test.go reads the card as a 0.3 client).
	if len(card.SupportedInterfaces) != 3 ||
		*card.SupportedInterfaces[0] != (a2a.AgentInterface{URL: base + "/jsonrpc", ProtocolBinding: a2a.TransportProtocolJSONRPC, ProtocolVersion: "1.0"}) ||
		*card.SupportedInterfaces[1] != (a2a.AgentInterface{URL: base + "/rest", ProtocolBinding: a2a.TransportProtocolHTTPJSON, ProtocolVersion: "1.0"}) ||
		*card.SupportedInterfaces[2] != (a2a.AgentInterface{URL: base + "/jsonrpc", ProtocolBinding: a2a.TransportProtocolJSONRPC, ProtocolVersion: "0.3"}) {
		t.Fatalf("interfaces %+v", card.SupportedInterfaces)
	}
	exts := card.Capabilities.Extensions
	if len(exts) != 1 || exts[0].URI != gateway.ExtensionURI || !exts[0].Required {
		t.Fatalf("extensions %+v: want the ledger extension alone, required (not the remote's compensation extension)", exts)
	}
	if !card.Capabilities.Streaming || !card.Capabilities.PushNotifications {
		t.Fatalf("capabilities %+v: the gateway serves streaming and push notifications", card.Capabilities)
	}
	scheme, ok := card.SecuritySchemes["bearer"].(a2a.HTTPAuthSecurityScheme)
	if !ok || !strings.EqualFold(scheme.Scheme, "bearer") || len(card.SecurityRequirements) != 1 {
		t.Fatalf("security %+v %+v", card.SecuritySchemes, card.SecurityRequirements)
	}

	// Only an orchestrator reads a card, and an org with no agent is the
	// same 404 as none.
	e.Do(t, http.MethodGet, "/a2a/orgs/"+orgID+gateway.CardPath, "", nil).Expect(t, http.StatusUnauthorized)
	finance := e.NewToken(t, ledger.RoleFinance, "", "finance")
	e.Do(t, http.MethodGet, "/a2a/orgs/"+orgID+gateway.CardPath, finance, nil).Expect(t, http.StatusForbidden)
	e.Do(t, http.MethodPut, "/admin/v1/orgs/no-agent", e.OncallToken, map[string]any{"name": "No agent"}).Expect(t, http.StatusCreated)
	unknown := e.Do(t, http.MethodGet, "/a2a/orgs/nobody"+gateway.CardPath, e.acme, nil).Expect(t, http.StatusNotFound)
	noAgent := e.Do(t, http.MethodGet, "/a2a/orgs/no-agent"+gateway.CardPath, e.acme, nil).Expect(t, http.StatusNotFound)
	if string(unknown.Body) != string(noAgent.Body) {
		t.Fatalf("an unknown org %s, one without an agent %s", unknown.Body, noAgent.Body)
	}
	// While no budget names its tenant, an orchestrator learns nothing of
	// the orgs (ledger/DESIGN.md §2.3): every card is that same 404.
	initech := e.NewOrchestrator(t, "initech")
	if r := e.Do(t, http.MethodGet, "/a2a/orgs/"+orgID+gateway.CardPath, initech, nil).Expect(t, http.StatusNotFound); string(r.Body) != string(unknown.Body) {
		t.Fatalf("the card for a tenant no budget names: %s", r.Body)
	}
	e.PutBudgetFor(t, "initech-ops", "EUR", 1_000, "initech")
	e.Do(t, http.MethodGet, "/a2a/orgs/"+orgID+gateway.CardPath, initech, nil).Expect(t, http.StatusOK)
}

// budgetHeld is what budget "ops" holds.
func (e *gwEnv) budgetHeld(t *testing.T) int64 {
	t.Helper()
	return e.Budget(t, "ops").HeldMinor
}

// TestGatewayLifecycle: over each binding, a2a-go v2's client delegates a
// purchase order through the gateway — one hold for a resend of the same
// messageId — follows it, lists it, cancels it (the obligation stays held
// on the cancel's word) and sees it compensated on the supplier's receipt;
// the other tenant, another org's path, a task id that names nothing and
// one that is no UUID all get the same TaskNotFoundError.
func TestGatewayLifecycle(t *testing.T) {
	t.Parallel()
	e := newGatewayEnv(t)
	for _, binding := range []a2a.TransportProtocol{a2a.TransportProtocolJSONRPC, a2a.TransportProtocolHTTPJSON} {
		t.Run(string(binding), func(t *testing.T) {
			testLifecycle(t, e, binding)
		})
	}
}

func testLifecycle(t *testing.T, e *gwEnv, binding a2a.TransportProtocol) {
	ctx := context.Background()
	acme := e.client(t, e.acme, orgID, binding)
	msgID := "po-" + strings.ToLower(string(binding[0:4])) + "-" + uuid.NewString()
	before := e.budgetHeld(t)

	task := send(t, acme, ledgerMessage(msgID, "Order 40 laptops for the Lyon office", 50_000))
	id, err := uuid.Parse(string(task.ID))
	if err != nil {
		t.Fatalf("task id %q is not the delegation's: %v", task.ID, err)
	}
	m := meta(t, task)
	hold, _ := m["hold"].(map[string]any)
	if m["delegation_id"] != id.String() || m["obligation_state"] != "held" || m["business_operation_id"] != msgID ||
		hold["amount_minor"] != float64(50_000) || hold["currency"] != "EUR" || hold["state"] != "active" {
		t.Fatalf("the answer's ledger metadata: %+v", m)
	}
	if held := e.budgetHeld(t); held != before+50_000 {
		t.Fatalf("held %d after the send, want %d", held, before+50_000)
	}

	// A resend of the same messageId is the same task, with no second hold.
	again := send(t, acme, ledgerMessage(msgID, "Order 40 laptops for the Lyon office", 50_000))
	if again.ID != task.ID {
		t.Fatalf("the resend is task %s, the send %s", again.ID, task.ID)
	}
	if held := e.budgetHeld(t); held != before+50_000 {
		t.Fatalf("held %d after the resend, want %d", held, before+50_000)
	}

	// Quittance dispatches it to the demo supplier; the task is the remote
	// task as observed.
	task = waitTask(t, acme, task.ID, "the remote task working", func(task *a2a.Task) bool {
		return task.Status.State == a2a.TaskStateWorking && meta(t, task)["remote_task_id"] != nil
	})
	if task.Status.Message == nil || !strings.Contains(task.Status.Message.Parts[0].Text(), "Purchase order PO-") {
		t.Fatalf("status %+v: want the supplier's status message", task.Status)
	}
	d := e.Delegation(t, e.acme, id.String())
	if meta(t, task)["remote_task_id"] != d.Remote.TaskID || d.OrgID != orgID || d.TaskClass != "procurement" {
		t.Fatalf("task %+v, delegation %+v", task.Metadata, d)
	}

	list, err := acme.ListTasks(ctx, &a2a.ListTasksRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !containsTask(list.Tasks, task.ID) {
		t.Fatalf("ListTasks %+v lacks %s", list.Tasks, task.ID)
	}

	// Nobody else sees it, and nothing tells them it exists.
	globex := e.client(t, e.globex, orgID, binding)
	if list, err := globex.ListTasks(ctx, &a2a.ListTasksRequest{}); err != nil || containsTask(list.Tasks, task.ID) {
		t.Fatalf("globex's ListTasks: %v, %+v", err, list)
	}
	otherOrg := e.client(t, e.acme, "acme-supplies", binding)
	notFound := func(c *a2aclient.Client, id a2a.TaskID) string {
		t.Helper()
		_, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: id})
		if !errors.Is(err, a2a.ErrTaskNotFound) {
			t.Fatalf("GetTask %s: %v, want TaskNotFoundError", id, err)
		}
		_, cerr := c.CancelTask(ctx, &a2a.CancelTaskRequest{ID: id})
		if !errors.Is(cerr, a2a.ErrTaskNotFound) || cerr.Error() != err.Error() {
			t.Fatalf("CancelTask %s: %v, want %v", id, cerr, err)
		}
		return err.Error()
	}
	unknown := notFound(acme, a2a.TaskID(uuid.NewString()))
	for what, got := range map[string]string{
		"globex's GetTask":      notFound(globex, task.ID),
		"another org's path":    notFound(otherOrg, task.ID),
		"an id that is no UUID": notFound(acme, "not-a-task"),
	} {
		if got != unknown {
			t.Fatalf("%s: %q, an unknown task: %q", what, got, unknown)
		}
	}
	if _, err := acme.GetTask(ctx, &a2a.GetTaskRequest{ID: task.ID, Tenant: "globex"}); !errors.Is(err, a2a.ErrUnauthorized) {
		t.Fatalf("GetTask with another tenant: %v, want UnauthorizedError", err)
	}

	// The cancel is asked for; the obligation stays held on its word, and
	// ends only on the supplier's receipt.
	canceled, err := acme.CancelTask(ctx, &a2a.CancelTaskRequest{ID: task.ID})
	if err != nil {
		t.Fatal(err)
	}
	if m := meta(t, canceled); m["obligation_state"] != "held" || m["cancel_requested_at"] == nil {
		t.Fatalf("the cancel's answer: %+v", m)
	}
	task = waitTask(t, acme, task.ID, "the task canceled and compensated", func(task *a2a.Task) bool {
		return task.Status.State == a2a.TaskStateCanceled && meta(t, task)["obligation_state"] == "compensated"
	})
	if hold := meta(t, task)["hold"].(map[string]any); hold["state"] != "returned" {
		t.Fatalf("after the receipt: %+v", meta(t, task))
	}
	// The obligation moved twice: to revocation_pending_compensation when
	// the task ended canceled after the cancel request, and to compensated
	// on the receipt.
	var moves []string
	cancelAt := -1
	for i, ev := range e.Events(t, e.acme, id.String()) {
		if ev.Type == ledger.EventTypeCancelRequested {
			cancelAt = i
		}
		if ev.ObligationTo != "" {
			if cancelAt < 0 {
				t.Fatalf("the obligation moved before the cancel request: %+v", ev)
			}
			moves = append(moves, string(ev.ObligationTo))
		}
	}
	if strings.Join(moves, ",") != "revocation_pending_compensation,compensated" {
		t.Fatalf("the obligation moved %v", moves)
	}
	if _, err := acme.CancelTask(ctx, &a2a.CancelTaskRequest{ID: task.ID}); !errors.Is(err, a2a.ErrTaskNotCancelable) {
		t.Fatalf("a second cancel of the canceled task: %v", err)
	}
	if held := e.budgetHeld(t); held != before {
		t.Fatalf("held %d after the receipt, want %d", held, before)
	}
}

func containsTask(tasks []*a2a.Task, id a2a.TaskID) bool {
	for _, t := range tasks {
		if t.ID == id {
			return true
		}
	}
	return false
}

// TestGatewayRefusals: a message without the ledger extension's data is
// ExtensionSupportRequiredError naming the URI; malformed data is
// InvalidParams; a hold the budget cannot cover carries the REST API's
// problem code; and nothing is held for any of them.
func TestGatewayRefusals(t *testing.T) {
	t.Parallel()
	e := newGatewayEnv(t)
	ctx := context.Background()
	for _, binding := range []a2a.TransportProtocol{a2a.TransportProtocolJSONRPC, a2a.TransportProtocolHTTPJSON} {
		c := e.client(t, e.acme, orgID, binding)
		plain := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("Order 40 laptops"))
		_, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: plain})
		if !errors.Is(err, a2a.ErrExtensionSupportRequired) || !strings.Contains(err.Error(), gateway.ExtensionURI) {
			t.Fatalf("%s: a message without the extension: %v", binding, err)
		}

		bad := ledgerMessage(uuid.NewString(), "Order 40 laptops", 50_000)
		bad.Metadata[gateway.ExtensionURI].(map[string]any)["hold"] = map[string]any{"amount_minor": 12.5, "currency": "EUR"}
		if _, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: bad}); !errors.Is(err, a2a.ErrInvalidParams) {
			t.Fatalf("%s: a fractional amount: %v", binding, err)
		}

		_, err = c.SendMessage(ctx, &a2a.SendMessageRequest{Message: ledgerMessage(uuid.NewString(), "Order 4000 laptops", 5_000_000)})
		if !errors.Is(err, a2a.ErrInvalidParams) {
			t.Fatalf("%s: a hold over the budget: %v", binding, err)
		}
		if m := errorInfoMeta(t, err); m["problem_code"] != "insufficient_funds" || m["problem_status"] != "422" {
			t.Fatalf("%s: the refusal's ErrorInfo metadata %+v", binding, m)
		}
		rest := e.Do(t, http.MethodPost, "/v1/delegations", e.acme, map[string]any{
			"business_operation_id": uuid.NewString(), "org_id": orgID, "task_class": "procurement", "budget_id": "ops",
			"hold": map[string]any{"amount_minor": 5_000_000, "currency": "EUR"}, "dispatch": map[string]any{"message": map[string]any{"parts": []any{map[string]any{"text": "x"}}}},
		})
		rest.Problem(t, http.StatusUnprocessableEntity, "insufficient_funds")
	}
	if held := e.budgetHeld(t); held != 0 {
		t.Fatalf("held %d after refusals only", held)
	}

	// The same messageId with another message is the REST API's
	// idempotency_mismatch, and holds nothing more.
	c := e.client(t, e.acme, orgID, a2a.TransportProtocolJSONRPC)
	id := uuid.NewString()
	send(t, c, ledgerMessage(id, "Order 40 laptops", 50_000))
	_, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: ledgerMessage(id, "Order 41 laptops", 50_000)})
	if !errors.Is(err, a2a.ErrInvalidParams) || errorInfoMeta(t, err)["problem_code"] != "idempotency_mismatch" {
		t.Fatalf("the same messageId with another message: %v", err)
	}
	if held := e.budgetHeld(t); held != 50_000 {
		t.Fatalf("held %d, want the first message's 50000", held)
	}

	// Without an orchestrator's token, each binding refuses in its own
	// shape, before anything is read.
	rpc := e.Do(t, http.MethodPost, "/a2a/orgs/"+orgID+gateway.JSONRPCPath, "",
		map[string]any{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": map[string]any{"id": id}}).Expect(t, http.StatusUnauthorized)
	var rpcErr struct {
		Error struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	rpc.JSON(t, &rpcErr)
	if rpcErr.Error.Code != -31401 || rpc.Header.Get("WWW-Authenticate") == "" {
		t.Fatalf("JSON-RPC without a token: %s %v", rpc.Body, rpc.Header)
	}
	finance := e.NewToken(t, ledger.RoleFinance, "", "finance")
	rest := e.Do(t, http.MethodGet, "/a2a/orgs/"+orgID+gateway.RESTPath+"/tasks", finance, nil).Expect(t, http.StatusForbidden)
	var restErr struct {
		Error struct {
			Status string `json:"status"`
		} `json:"error"`
	}
	rest.JSON(t, &restErr)
	if restErr.Error.Status != "PERMISSION_DENIED" {
		t.Fatalf("HTTP+JSON with a finance token: %s", rest.Body)
	}
}

// extensionURI is the ledger extension's URI, as the gateway declares it.
func extensionURI() string { return gateway.ExtensionURI }
