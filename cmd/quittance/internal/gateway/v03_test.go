package gateway_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	a2a03 "github.com/a2aproject/a2a-go/a2a"
	a2aclient03 "github.com/a2aproject/a2a-go/a2aclient"
	agentcard03 "github.com/a2aproject/a2a-go/a2aclient/agentcard"
	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/google/uuid"

	"github.com/quittance/quittance/cmd/quittance/internal/gateway"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
)

// These tests put a2a-go v0.3.3's client (the A2A 0.3 SDK the repository
// pins as its 0.3 peer) in the orchestrator's place: it resolves the
// gateway's card as 0.3 reads it and delegates through the gateway's 0.3
// face to the demo supplier, as gateway_test.go does with a2a-go v2's.

// client03 is an a2a-go v0.3.3 client of the gateway for org (orgID
// when not given), sending token, built from the card a 0.3 resolver reads.
func (e *gwEnv) client03(t *testing.T, token string, org ...string) *a2aclient03.Client {
	t.Helper()
	hc := e.httpClient(token)
	base := e.orgBase(orgID)
	if len(org) > 0 {
		base = e.orgBase(org[0])
	}
	card, err := agentcard03.NewResolver(hc).Resolve(context.Background(), base)
	if err != nil {
		t.Fatalf("a 0.3 client resolves the card: %v", err)
	}
	c, err := a2aclient03.NewFromCard(context.Background(), card, a2aclient03.WithJSONRPCTransport(hc))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Destroy() })
	return c
}

// ledgerMessage03 is a purchase order with the ledger extension's data,
// as a 0.3 message.
func ledgerMessage03(messageID, text string, amountMinor int64) *a2a03.Message {
	m := a2a03.NewMessage(a2a03.MessageRoleUser, a2a03.TextPart{Text: text})
	m.ID = messageID
	m.Metadata = ledgerData(amountMinor)
	return m
}

// meta03 is the ledger extension's metadata of a 0.3 task.
func meta03(t *testing.T, task *a2a03.Task) map[string]any {
	t.Helper()
	m, ok := task.Metadata[gateway.ExtensionURI].(map[string]any)
	if !ok {
		t.Fatalf("task %s has no ledger metadata: %+v", task.ID, task.Metadata)
	}
	return m
}

func send03(t *testing.T, c *a2aclient03.Client, msg *a2a03.Message) *a2a03.Task {
	t.Helper()
	res, err := c.SendMessage(context.Background(), &a2a03.MessageSendParams{Message: msg})
	if err != nil {
		t.Fatalf("message/send: %v", err)
	}
	task, ok := res.(*a2a03.Task)
	if !ok {
		t.Fatalf("message/send answered %T, want a task", res)
	}
	return task
}

// waitTask03 polls tasks/get until ok holds of the task.
func waitTask03(t *testing.T, c *a2aclient03.Client, id a2a03.TaskID, what string, ok func(*a2a03.Task) bool) *a2a03.Task {
	t.Helper()
	get := func() (*a2a03.Task, error) {
		task, err := c.GetTask(context.Background(), &a2a03.TaskQueryParams{ID: id})
		if err != nil {
			return nil, fmt.Errorf("tasks/get %s: %w", id, err)
		}
		return task, nil
	}
	return poll(t, what, get, ok, func(task *a2a03.Task) string {
		return fmt.Sprintf("task %+v, metadata %+v", task.Status, task.Metadata)
	})
}

// TestGatewayCardFor03: the one card serves both versions. A 0.3 client's
// resolver reads the 0.3 interface (the JSON-RPC URL, preferred), 0.3's
// protocol version, the bearer scheme and the ledger extension, required.
func TestGatewayCardFor03(t *testing.T) {
	t.Parallel()
	e := newGatewayEnv(t)
	card, err := agentcard03.NewResolver(e.httpClient(e.acme)).Resolve(context.Background(), e.orgBase(orgID))
	if err != nil {
		t.Fatal(err)
	}
	url := e.orgBase(orgID) + gateway.JSONRPCPath
	if card.URL != url || card.PreferredTransport != a2a03.TransportProtocolJSONRPC || card.ProtocolVersion != "0.3.0" ||
		len(card.AdditionalInterfaces) != 1 || card.AdditionalInterfaces[0] != (a2a03.AgentInterface{URL: url, Transport: a2a03.TransportProtocolJSONRPC}) {
		t.Fatalf("the card's 0.3 interface: %q %q %q %+v", card.URL, card.PreferredTransport, card.ProtocolVersion, card.AdditionalInterfaces)
	}
	if card.Name != "Demo Supplier" || len(card.Skills) != 1 || !card.Capabilities.Streaming {
		t.Fatalf("the card as 0.3 reads it: %+v", card)
	}
	exts := card.Capabilities.Extensions
	if len(exts) != 1 || exts[0].URI != gateway.ExtensionURI || !exts[0].Required {
		t.Fatalf("extensions %+v", exts)
	}
	scheme, ok := card.SecuritySchemes["bearer"].(a2a03.HTTPAuthSecurityScheme)
	if !ok || !strings.EqualFold(scheme.Scheme, "bearer") || len(card.Security) != 1 {
		t.Fatalf("security %+v %+v", card.SecuritySchemes, card.Security)
	}
	if _, ok := card.Security[0]["bearer"]; !ok {
		t.Fatalf("security %+v", card.Security)
	}
}

// TestGatewayLifecycle03: a2a-go v0.3.3's client delegates a purchase
// order through the gateway's 0.3 face — one hold for a resend of the same
// messageId — follows it with tasks/get and tasks/resubscribe, cancels it
// (the obligation stays held on the cancel's word) and sees it compensated
// on the supplier's receipt; another tenant's task and one that names
// nothing are the same TaskNotFoundError (-32001).
func TestGatewayLifecycle03(t *testing.T) {
	t.Parallel()
	e := newGatewayEnv(t)
	ctx := context.Background()
	acme := e.client03(t, e.acme)
	msgID := "po-v03-" + uuid.NewString()

	task := send03(t, acme, ledgerMessage03(msgID, "Order 40 laptops for the Lyon office", 50_000))
	id, err := uuid.Parse(string(task.ID))
	if err != nil {
		t.Fatalf("task id %q is not the delegation's: %v", task.ID, err)
	}
	m := meta03(t, task)
	if m["delegation_id"] != id.String() || m["obligation_state"] != "held" || m["business_operation_id"] != msgID ||
		task.Status.State != a2a03.TaskStateSubmitted || !strings.HasPrefix(task.ContextID, "quittance-context-") {
		t.Fatalf("the answer: %+v, ledger metadata %+v", task, m)
	}
	if held := e.budgetHeld(t); held != 50_000 {
		t.Fatalf("held %d after the send", held)
	}
	if again := send03(t, acme, ledgerMessage03(msgID, "Order 40 laptops for the Lyon office", 50_000)); again.ID != task.ID {
		t.Fatalf("the resend is task %s, the send %s", again.ID, task.ID)
	}
	if held := e.budgetHeld(t); held != 50_000 {
		t.Fatalf("held %d after the resend, want one hold", held)
	}

	task = waitTask03(t, acme, task.ID, "the remote task working", func(task *a2a03.Task) bool {
		return task.Status.State == a2a03.TaskStateWorking && meta03(t, task)["remote_task_id"] != nil
	})
	text, _ := task.Status.Message.Parts[0].(a2a03.TextPart)
	if task.Status.Message.Role != a2a03.MessageRoleAgent || !strings.Contains(text.Text, "Purchase order PO-") {
		t.Fatalf("status %+v: want the supplier's status message", task.Status)
	}

	// tasks/resubscribe starts from the task as it stands.
	for ev, err := range acme.ResubscribeToTask(ctx, &a2a03.TaskIDParams{ID: task.ID}) {
		if err != nil {
			t.Fatalf("tasks/resubscribe: %v", err)
		}
		if first, ok := ev.(*a2a03.Task); !ok || first.ID != task.ID || first.Status.State != a2a03.TaskStateWorking {
			t.Fatalf("tasks/resubscribe began with %T %+v", ev, ev)
		}
		break
	}

	// Nobody else sees it, and nothing tells them it exists.
	globex := e.client03(t, e.globex)
	notFound := func(c *a2aclient03.Client, id a2a03.TaskID) string {
		t.Helper()
		_, err := c.GetTask(ctx, &a2a03.TaskQueryParams{ID: id})
		if !errors.Is(err, a2a03.ErrTaskNotFound) {
			t.Fatalf("tasks/get %s: %v, want TaskNotFoundError", id, err)
		}
		_, cerr := c.CancelTask(ctx, &a2a03.TaskIDParams{ID: id})
		if !errors.Is(cerr, a2a03.ErrTaskNotFound) || cerr.Error() != err.Error() {
			t.Fatalf("tasks/cancel %s: %v, want %v", id, cerr, err)
		}
		return err.Error()
	}
	unknown := notFound(acme, a2a03.TaskID(uuid.NewString()))
	if got := notFound(globex, task.ID); got != unknown {
		t.Fatalf("globex's tasks/get: %q, an unknown task: %q", got, unknown)
	}
	if got := notFound(acme, "not-a-task"); got != unknown {
		t.Fatalf("an id that is no UUID: %q, an unknown task: %q", got, unknown)
	}

	canceled, err := acme.CancelTask(ctx, &a2a03.TaskIDParams{ID: task.ID})
	if err != nil {
		t.Fatal(err)
	}
	if m := meta03(t, canceled); m["obligation_state"] != "held" || m["cancel_requested_at"] == nil {
		t.Fatalf("the cancel's answer: %+v", m)
	}
	task = waitTask03(t, acme, task.ID, "the task canceled and compensated", func(task *a2a03.Task) bool {
		return task.Status.State == a2a03.TaskStateCanceled && meta03(t, task)["obligation_state"] == "compensated"
	})
	if hold := meta03(t, task)["hold"].(map[string]any); hold["state"] != "returned" {
		t.Fatalf("after the receipt: %+v", meta03(t, task))
	}
	if _, err := acme.CancelTask(ctx, &a2a03.TaskIDParams{ID: task.ID}); !errors.Is(err, a2a03.ErrTaskNotCancelable) {
		t.Fatalf("a second cancel of the canceled task: %v", err)
	}
	if held := e.budgetHeld(t); held != 0 {
		t.Fatalf("held %d after the receipt", held)
	}
}

// TestGatewayStream03: message/stream answers the new task, then status
// updates (final false) as the supplier takes it on and the cancel is
// asked for, and ends with a final status update: canceled.
func TestGatewayStream03(t *testing.T) {
	t.Parallel()
	e := newGatewayEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := e.client03(t, e.acme)
	var (
		id       a2a03.TaskID
		kinds    []string
		last     *a2a03.TaskStatusUpdateEvent
		canceled bool
	)
	cancelOnce := func(state a2a03.TaskState) {
		if state == a2a03.TaskStateWorking && !canceled {
			canceled = true
			if _, err := c.CancelTask(ctx, &a2a03.TaskIDParams{ID: id}); err != nil {
				t.Fatal(err)
			}
		}
	}
	msg := ledgerMessage03("po-stream-"+uuid.NewString(), "Order 12 monitors", 30_000)
	for ev, err := range c.SendStreamingMessage(ctx, &a2a03.MessageSendParams{Message: msg}) {
		if err != nil {
			t.Fatalf("message/stream: %v (after %v)", err, kinds)
		}
		switch ev := ev.(type) {
		case *a2a03.Task:
			kinds = append(kinds, "task:"+string(ev.Status.State))
			id = ev.ID
			cancelOnce(ev.Status.State)
		case *a2a03.TaskStatusUpdateEvent:
			kinds = append(kinds, "status:"+string(ev.Status.State))
			if ev.TaskID != id || last != nil && last.Final {
				t.Fatalf("status update %+v of task %s after %v", ev, id, kinds)
			}
			cancelOnce(ev.Status.State)
			last = ev
		case *a2a03.TaskArtifactUpdateEvent:
			kinds = append(kinds, "artifact")
		}
	}
	t.Logf("the stream: %v", kinds)
	if len(kinds) == 0 || !strings.HasPrefix(kinds[0], "task:") || last == nil || last.Status.State != a2a03.TaskStateCanceled || !last.Final {
		t.Fatalf("the stream: %v", kinds)
	}
	// The stream follows the canceled task's obligation to its end: the
	// final update is the one whose obligation ended, compensated on the
	// supplier's receipt.
	if m, _ := last.Metadata[gateway.ExtensionURI].(map[string]any); m["cancel_requested_at"] == nil || m["obligation_state"] != "compensated" {
		t.Fatalf("the last status update's ledger metadata: %+v", last.Metadata)
	}
}

// TestGatewayRefusals03: a 0.3 message without the ledger extension's
// data is refused — InvalidParams, 0.3 having no
// ExtensionSupportRequiredError — naming the extension, and holds nothing;
// the ledger extension activated with X-A2A-Extensions is echoed there;
// a 1.0 method sent as another version is VersionNotSupportedError; a 0.3
// request without a token is 401.
func TestGatewayRefusals03(t *testing.T) {
	t.Parallel()
	e := newGatewayEnv(t)
	c := e.client03(t, e.acme)
	plain := a2a03.NewMessage(a2a03.MessageRoleUser, a2a03.TextPart{Text: "Order 40 laptops"})
	_, err := c.SendMessage(context.Background(), &a2a03.MessageSendParams{Message: plain})
	if !errors.Is(err, a2a03.ErrInvalidParams) || !strings.Contains(err.Error(), gateway.ExtensionURI) {
		t.Fatalf("a message without the extension: %v", err)
	}
	var answer struct {
		Error struct {
			Code int            `json:"code"`
			Data map[string]any `json:"data"`
		} `json:"error"`
	}
	rpc := func(token, version string, req map[string]any) *http.Response {
		t.Helper()
		body, _ := json.Marshal(req)
		r, _ := http.NewRequest(http.MethodPost, e.orgBase(orgID)+gateway.JSONRPCPath, bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("X-A2A-Extensions", "https://example.com/other/v1, "+gateway.ExtensionURI)
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		if version != "" {
			r.Header.Set("A2A-Version", version)
		}
		resp, err := e.Client.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	resp := rpc(e.acme, "", map[string]any{"jsonrpc": "2.0", "id": "x1", "method": "message/send", "params": map[string]any{
		"message": map[string]any{"kind": "message", "messageId": uuid.NewString(), "role": "user", "parts": []any{map[string]any{"kind": "text", "text": "x"}}},
	}})
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil || answer.Error.Code != -32602 ||
		answer.Error.Data["reason"] != "EXTENSION_SUPPORT_REQUIRED" || answer.Error.Data["extension"] != gateway.ExtensionURI {
		t.Fatalf("the refusal on the wire: %+v (%v)", answer, err)
	}
	if got := resp.Header.Get("X-A2A-Extensions"); got != gateway.ExtensionURI {
		t.Fatalf("X-A2A-Extensions %q: want the ledger extension echoed, alone", got)
	}
	resp = rpc(e.acme, "0.3", map[string]any{"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": map[string]any{"id": uuid.NewString()}})
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil || answer.Error.Code != -32009 {
		t.Fatalf("a 1.0 method as A2A 0.3: %+v (%v)", answer, err)
	}
	if resp := rpc("", "", map[string]any{"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": map[string]any{"id": uuid.NewString()}}); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a 0.3 request without a token: %d", resp.StatusCode)
	}
	if held := e.budgetHeld(t); held != 0 {
		t.Fatalf("held %d after refusals only", held)
	}
}

// TestGateway03PartsAre10Parts: a 0.3 message's text, data and file parts
// (a URI and bytes) are the 1.0 message's: the same messageId sent again
// by a2a-go v2's client with the 1.0 parts is the same task, one hold,
// while one file name changed is the REST API's idempotency_mismatch.
func TestGateway03PartsAre10Parts(t *testing.T) {
	t.Parallel()
	e := newGatewayEnv(t)
	msgID := "po-parts-" + uuid.NewString()
	m03 := ledgerMessage03(msgID, "Order 40 laptops", 50_000)
	m03.Parts = append(m03.Parts,
		a2a03.DataPart{Data: map[string]any{"sku": "LAP-14", "qty": float64(40)}},
		a2a03.FilePart{File: a2a03.FileURI{URI: "https://buyer.example/po-42.pdf", FileMeta: a2a03.FileMeta{MimeType: "application/pdf", Name: "po-42.pdf"}}},
		a2a03.FilePart{File: a2a03.FileBytes{Bytes: base64.StdEncoding.EncodeToString([]byte("deliver to dock 3")), FileMeta: a2a03.FileMeta{MimeType: "text/plain", Name: "note.txt"}}},
	)
	task := send03(t, e.client03(t, e.acme), m03)

	m10 := func(name string) *a2a.Message {
		m := ledgerMessage(msgID, "Order 40 laptops", 50_000)
		pdf := a2a.NewFileURLPart("https://buyer.example/po-42.pdf", "application/pdf")
		pdf.Filename = "po-42.pdf"
		note := a2a.NewRawPart([]byte("deliver to dock 3"))
		note.MediaType, note.Filename = "text/plain", name
		m.Parts = append(m.Parts, a2a.NewDataPart(map[string]any{"sku": "LAP-14", "qty": 40}), pdf, note)
		return m
	}
	v2 := e.client(t, e.acme, orgID, a2a.TransportProtocolJSONRPC)
	if again := send(t, v2, m10("note.txt")); string(again.ID) != string(task.ID) {
		t.Fatalf("the 1.0 message is task %s, the 0.3 one %s", again.ID, task.ID)
	}
	_, err := v2.SendMessage(context.Background(), &a2a.SendMessageRequest{Message: m10("other.txt")})
	if !errors.Is(err, a2a.ErrInvalidParams) || errorInfoMeta(t, err)["problem_code"] != "idempotency_mismatch" {
		t.Fatalf("the same messageId with another file name: %v", err)
	}
	if held := e.budgetHeld(t); held != 50_000 {
		t.Fatalf("held %d, want one hold", held)
	}
}

// TestGatewayContinuation03: a 0.3 client answers a task that stopped in
// input-required with message/stream on its id: the stream begins at the
// interruption it answers, does not end there, and brings the agent's
// artifact and the final status, completed; the agent gets the answer once.
func TestGatewayContinuation03(t *testing.T) {
	t.Parallel()
	e := newGatewayEnv(t, apitest.Worker{PollAfter: 100 * time.Millisecond})
	peer := e.servePartsDesk(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	acme := e.client03(t, e.acme, "parts-desk")
	task := send03(t, acme, ledgerMessage03("parts-v03", "input_required", 20_000))
	task = waitTask03(t, acme, task.ID, "the task asking for input", func(task *a2a03.Task) bool {
		return task.Status.State == a2a03.TaskStateInputRequired
	})
	if ask, _ := task.Status.Message.Parts[0].(a2a03.TextPart); ask.Text != "Which cost center should be charged?" {
		t.Fatalf("status %+v: want the agent's question", task.Status)
	}

	answer := a2a03.NewMessageForTask(a2a03.MessageRoleUser, task, a2a03.TextPart{Text: "CC-42"})
	var (
		kinds []string
		last  *a2a03.TaskStatusUpdateEvent
		art   *a2a03.Artifact
	)
	for ev, err := range acme.SendStreamingMessage(ctx, &a2a03.MessageSendParams{Message: answer}) {
		if err != nil {
			t.Fatalf("message/stream: %v (after %v)", err, kinds)
		}
		switch ev := ev.(type) {
		case *a2a03.Task:
			kinds = append(kinds, "task:"+string(ev.Status.State))
		case *a2a03.TaskStatusUpdateEvent:
			kinds = append(kinds, "status:"+string(ev.Status.State))
			if last != nil && last.Final {
				t.Fatalf("status update %+v after the final one: %v", ev, kinds)
			}
			last = ev
		case *a2a03.TaskArtifactUpdateEvent:
			kinds = append(kinds, "artifact")
			art = ev.Artifact
		}
	}
	t.Logf("the answer's stream: %v", kinds)
	if len(kinds) == 0 || kinds[0] != "task:input-required" || last == nil || last.Status.State != a2a03.TaskStateCompleted || !last.Final {
		t.Fatalf("the answer's stream: %v", kinds)
	}
	// The artifact is on the stream when Quittance observed it before the
	// completion (the answer's reply may carry the completion alone); the
	// task has it once Quittance read the task again.
	task = waitTask03(t, acme, task.ID, "the obligation settled and the artifact", func(task *a2a03.Task) bool {
		return meta03(t, task)["obligation_state"] == "settled" && len(task.Artifacts) == 1
	})
	if result, _ := task.Artifacts[0].Parts[0].(a2a03.TextPart); result.Text != "PO-42 charged to CC-42" || task.Artifacts[0].Name != "result" ||
		art != nil && art.ID != task.Artifacts[0].ID {
		t.Fatalf("the task's artifact %+v (streamed: %+v)", task.Artifacts[0], art)
	}
	peer.mu.Lock()
	defer peer.mu.Unlock()
	if strings.Join(peer.answers, ",") != "CC-42" {
		t.Fatalf("the agent got the answers %v", peer.answers)
	}
}

// TestGatewayRefinement03: a 0.3 client refines a task as a 1.0 one does:
// a new message in the task's contextId, referring to it, is a delegation
// linked to it, in the same context; a reference to another tenant's task
// is refused as one to no task, with the REST problem's code.
func TestGatewayRefinement03(t *testing.T) {
	t.Parallel()
	e := newGatewayEnv(t)
	acme := e.client03(t, e.acme)
	first := send03(t, acme, ledgerMessage03(uuid.NewString(), "Order 40 laptops for the Lyon office", 50_000))
	first = waitTask03(t, acme, first.ID, "the first task working", func(task *a2a03.Task) bool { return task.Status.State == a2a03.TaskStateWorking })

	more := ledgerMessage03(uuid.NewString(), "Add 40 docking stations to that order", 8_000)
	more.ContextID, more.ReferenceTasks = first.ContextID, []a2a03.TaskID{first.ID}
	second := send03(t, acme, more)
	if second.ContextID != first.ContextID {
		t.Fatalf("the refinement's context %q, the first task's %q", second.ContextID, first.ContextID)
	}
	var d struct {
		Links *struct {
			ContextFrom string   `json:"context_from"`
			References  []string `json:"references"`
		} `json:"links"`
	}
	e.Do(t, http.MethodGet, "/v1/delegations/"+string(second.ID), e.acme, nil).Expect(t, http.StatusOK).JSON(t, &d)
	if d.Links == nil || d.Links.ContextFrom != string(first.ID) || len(d.Links.References) != 1 || d.Links.References[0] != string(first.ID) {
		t.Fatalf("the refinement's links %+v", d.Links)
	}
	waitTask03(t, acme, second.ID, "the refinement working", func(task *a2a03.Task) bool {
		return task.Status.State == a2a03.TaskStateWorking && task.ContextID == first.ContextID
	})

	theirs := send(t, e.client(t, e.globex, orgID, a2a.TransportProtocolJSONRPC), ledgerMessage(uuid.NewString(), "Order 2 chairs", 1_000))
	refusals := map[string]string{}
	for what, ref := range map[string]a2a03.TaskID{"globex's task": a2a03.TaskID(theirs.ID), "no task": a2a03.TaskID(uuid.NewString())} {
		m := ledgerMessage03(uuid.NewString(), "Add 2 chairs", 1_000)
		m.ReferenceTasks = []a2a03.TaskID{ref}
		_, err := acme.SendMessage(context.Background(), &a2a03.MessageSendParams{Message: m})
		if !errors.Is(err, a2a03.ErrInvalidParams) {
			t.Fatalf("a reference to %s: %v", what, err)
		}
		refusals[what] = strings.ReplaceAll(err.Error(), string(ref), "ID")
	}
	if refusals["globex's task"] != refusals["no task"] {
		t.Fatalf("a reference to another tenant's task is told apart from one to no task: %q", refusals)
	}
}

// push03Receiver is a 0.3 orchestrator's push endpoint on loopback: it
// takes pushes carrying its token in X-A2A-Notification-Token, signed as
// every push is, whose body is a 0.3 task, as a2a-go v0.3's push sender
// posts it.
type push03Receiver struct {
	*pushLog[*a2a03.Task]
	token string
}

func newPush03Receiver(t *testing.T, token string) *push03Receiver {
	r := &push03Receiver{token: token}
	r.pushLog = newPushLog(t, r.take)
	r.serve("/push")
	return r
}

// take is the task of a push that carries the receiver's token, is
// signed with it and is a 0.3 task, or why it is not.
func (r *push03Receiver) take(req *http.Request, body []byte) (token string, task *a2a03.Task, refused string) {
	task = &a2a03.Task{}
	switch {
	case req.Header.Get("X-A2A-Notification-Token") != r.token:
		return "", nil, "token " + req.Header.Get("X-A2A-Notification-Token")
	case verifyPushSignature(r.token, req.Header, body) != nil:
		return "", nil, "signature"
	case json.Unmarshal(body, task) != nil || !strings.Contains(string(body), `"kind":"task"`):
		return "", nil, "body " + string(body)
	}
	return r.token, task, ""
}

// TestGatewayPush03: a 0.3 client registers a push config on its task
// with tasks/pushNotificationConfig/set, and is pushed the task as 0.3
// speaks it — the 0.3 task, X-A2A-Notification-Token — signed as every
// push is, as the task works, is canceled and is compensated; it reads the
// config back without its token.
func TestGatewayPush03(t *testing.T) {
	t.Parallel()
	e := newGatewayEnv(t, apitest.Worker{Webhooks: true})
	ctx := context.Background()
	recv := newPush03Receiver(t, "v03-"+uuid.NewString())
	c := e.client03(t, e.acme)
	task := send03(t, c, ledgerMessage03(uuid.NewString(), "Order 40 laptops for the Lyon office", 10_000))
	set, err := c.SetTaskPushConfig(ctx, &a2a03.TaskPushConfig{TaskID: task.ID, Config: a2a03.PushConfig{ID: "po-desk", URL: recv.url, Token: recv.token}})
	if err != nil || set.Config.Token != recv.token || set.TaskID != task.ID {
		t.Fatalf("tasks/pushNotificationConfig/set: %+v %v", set, err)
	}
	recv.wait(recv.token, "the task working", func(p *a2a03.Task) bool { return p.ID == task.ID && p.Status.State == a2a03.TaskStateWorking })
	got, err := c.GetTaskPushConfig(ctx, &a2a03.GetTaskPushConfigParams{TaskID: task.ID, ConfigID: "po-desk"})
	if err != nil || got.Config.URL != recv.url || got.Config.Token != "" {
		t.Fatalf("the config read back: %+v %v", got, err)
	}
	if _, err := c.CancelTask(ctx, &a2a03.TaskIDParams{ID: task.ID}); err != nil {
		t.Fatal(err)
	}
	recv.wait(recv.token, "the task compensated", func(p *a2a03.Task) bool {
		m, _ := p.Metadata[gateway.ExtensionURI].(map[string]any)
		return p.ID == task.ID && p.Status.State == a2a03.TaskStateCanceled && m["obligation_state"] == "compensated"
	})
}
