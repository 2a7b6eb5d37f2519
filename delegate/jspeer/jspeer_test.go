package jspeer_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/compensation/extension"
	"github.com/quittance/quittance/delegate/a2a"
	"github.com/quittance/quittance/delegate/egress"
	"github.com/quittance/quittance/delegate/jspeer"
	"github.com/quittance/quittance/internal/jose"
)

var loopback = egress.Policy{AllowHTTP: true, AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}

// connect fetches the peer's card the way Quittance does and returns a
// client for its preferred JSON-RPC interface.
func connect(t *testing.T, p *jspeer.Peer) (*a2a.Client, a2a.AgentCard) {
	t.Helper()
	hc := egress.NewClient(loopback)
	card, err := a2a.FetchAgentCard(context.Background(), hc, p.CardURL, p.AllowedHosts)
	if err != nil {
		t.Fatalf("fetch card: %v", err)
	}
	iface, err := card.JSONRPCInterface()
	if err != nil {
		t.Fatal(err)
	}
	if iface.ProtocolVersion != "1.0" {
		t.Fatalf("preferred interface speaks %s; want 1.0", iface.ProtocolVersion)
	}
	return a2a.NewClient(hc, iface), card
}

var msgSeq struct {
	sync.Mutex
	n int
}

func send(t *testing.T, c *a2a.Client, text string, immediate bool) a2a.Task {
	t.Helper()
	msgSeq.Lock()
	msgSeq.n++
	id := "msg-" + time.Now().Format("150405.000000") + "-" + string(rune('a'+msgSeq.n%26))
	msgSeq.Unlock()
	res, err := c.SendMessage(context.Background(), a2a.SendRequest{
		Message:           a2a.Message{MessageID: id, Role: a2a.RoleUser, Parts: []a2a.Part{{Text: text}}},
		ReturnImmediately: immediate,
	})
	if err != nil {
		t.Fatalf("send %q: %v", text, err)
	}
	if res.Task == nil {
		t.Fatalf("send %q: no task in the reply", text)
	}
	return *res.Task
}

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
		time.Sleep(20 * time.Millisecond)
	}
}

type receipt struct {
	Outcome        string `json:"outcome"`
	ReceiptID      string `json:"receiptId"`
	TaskID         string `json:"taskId"`
	IdempotencyKey string `json:"idempotencyKey"`
	JWS            string `json:"jws"`
	Reason         string `json:"reason"`
}

func receiptOf(t *testing.T, task a2a.Task) receipt {
	t.Helper()
	for _, a := range task.Artifacts {
		if a.Name == "compensation-receipt" && len(a.Parts) == 1 {
			var r receipt
			if err := json.Unmarshal(a.Parts[0].Data, &r); err != nil {
				t.Fatal(err)
			}
			checkReceiptSchema(t, a.Parts[0].Data, r.JWS)
			return r
		}
	}
	t.Fatalf("task %s (%s) has no compensation-receipt artifact", task.ID, task.Status.State)
	return receipt{}
}

func requestCompensation(t *testing.T, c *a2a.Client, canceled a2a.Task, messageID, key string) a2a.Task {
	t.Helper()
	data, _ := json.Marshal(map[string]any{"compensationRequest": map[string]any{
		"taskId": canceled.ID, "idempotencyKey": key, "reason": "delegation canceled",
	}})
	res, err := c.SendMessage(context.Background(), a2a.SendRequest{
		Message: a2a.Message{
			MessageID: messageID, ContextID: canceled.ContextID, Role: a2a.RoleUser,
			ReferenceTaskIDs: []string{canceled.ID}, Extensions: []string{jspeer.ExtensionURI},
			Parts: []a2a.Part{{Data: data}},
		},
		Extensions: []string{jspeer.ExtensionURI},
	})
	if err != nil {
		t.Fatalf("compensation request: %v", err)
	}
	if res.Task == nil || res.Task.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("compensation reply %+v; want a completed task", res)
	}
	return *res.Task
}

func verify(t *testing.T, p *jspeer.Peer, token string, kind compensation.TokenKind) compensation.Claims {
	t.Helper()
	keys, err := jose.ParseOrgJWKS(p.JWKS)
	if err != nil {
		t.Fatalf("peer JWKS not registrable: %v", err)
	}
	claims, err := compensation.Verify(compensation.VerifyInput{
		Token: []byte(token), Kind: kind, OrgID: p.OrgID, Keys: keys, LedgerID: p.LedgerID, Now: time.Now(),
	})
	if err != nil {
		t.Fatalf("verify %s: %v", kind, err)
	}
	return claims
}

func TestPeer(t *testing.T) {
	p := jspeer.Start(t, jspeer.WithOrgID("js-supplier"), jspeer.WithLedgerID("ledger-js"))
	c, card := connect(t, p)
	ctx := context.Background()

	t.Run("card", func(t *testing.T) {
		if !card.Streaming || !card.PushNotifications {
			t.Errorf("card streaming=%v push=%v; want both", card.Streaming, card.PushNotifications)
		}
		if _, ok := card.Extension(jspeer.ExtensionURI); !ok {
			t.Error("card does not declare the compensation extension")
		}
	})

	t.Run("send get cancel", func(t *testing.T) {
		task := send(t, c, jspeer.ScenarioWork, true)
		if s := task.Status.State; s != a2a.TaskStateSubmitted && s != a2a.TaskStateWorking {
			t.Errorf("non-blocking send returned %s", s)
		}
		waitState(t, c, task.ID, a2a.TaskStateWorking)
		canceled, err := c.CancelTask(ctx, task.ID, nil)
		if err != nil {
			t.Fatalf("cancel: %v", err)
		}
		if canceled.Status.State != a2a.TaskStateCanceled {
			t.Errorf("cancel returned %s; want canceled", canceled.Status.State)
		}
		waitState(t, c, task.ID, a2a.TaskStateCanceled)
	})

	t.Run("scenarios", func(t *testing.T) {
		for text, want := range map[string]a2a.TaskState{
			jspeer.ScenarioComplete:      a2a.TaskStateCompleted,
			jspeer.ScenarioFail:          a2a.TaskStateFailed,
			jspeer.ScenarioInputRequired: a2a.TaskStateInputRequired,
			jspeer.ScenarioAuthRequired:  a2a.TaskStateAuthRequired,
		} {
			task := send(t, c, text, false)
			if task.Status.State != want {
				t.Errorf("blocking send %q ended %s; want %s", text, task.Status.State, want)
			}
			if text == jspeer.ScenarioAuthRequired {
				msg := task.Status.Message
				if msg == nil || len(msg.Parts) == 0 || !strings.Contains(msg.Parts[0].Text, "https://") {
					t.Errorf("auth_required status message %+v carries no consent URL", msg)
				}
			}
		}
		if _, err := c.GetTask(ctx, "no-such-task"); !errors.Is(err, a2a.ErrTaskNotFound) {
			t.Errorf("get of an unknown task: %v; want TaskNotFound", err)
		}
	})

	t.Run("not cancelable", func(t *testing.T) {
		task := send(t, c, jspeer.ScenarioNotCancelable, true)
		waitState(t, c, task.ID, a2a.TaskStateWorking)
		if _, err := c.CancelTask(ctx, task.ID, nil); !errors.Is(err, a2a.ErrTaskNotCancelable) {
			t.Errorf("cancel of a not_cancelable task: %v; want TaskNotCancelable", err)
		}
		done := send(t, c, jspeer.ScenarioComplete, false)
		if _, err := c.CancelTask(ctx, done.ID, nil); !errors.Is(err, a2a.ErrTaskNotCancelable) {
			t.Errorf("cancel of a completed task: %v; want TaskNotCancelable", err)
		}
	})

	t.Run("subscribe", func(t *testing.T) {
		task := send(t, c, jspeer.ScenarioWork, true)
		waitState(t, c, task.ID, a2a.TaskStateWorking)
		sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		var events []a2a.StreamEvent
		first := true
		for ev, err := range c.Subscribe(sctx, task.ID) {
			if err != nil {
				t.Fatalf("stream: %v", err)
			}
			events = append(events, ev)
			if first {
				first = false
				go c.CancelTask(ctx, task.ID, nil)
			}
		}
		if len(events) < 2 || events[0].TaskID() != task.ID {
			t.Fatalf("stream events %+v; want the task, then updates", events)
		}
		last := events[len(events)-1]
		if last.StatusUpdate == nil || last.StatusUpdate.Status.State != a2a.TaskStateCanceled {
			t.Errorf("stream ended with %+v; want a canceled status update", last)
		}
	})

	t.Run("push", func(t *testing.T) {
		type push struct {
			token, contentType string
			ev                 a2a.StreamEvent
		}
		var mu sync.Mutex
		var got []push
		recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			ev, err := a2a.ParsePushNotification(body)
			if err != nil {
				t.Errorf("push body %s: %v", body, err)
			}
			mu.Lock()
			got = append(got, push{a2a.PushTokenFromRequest(r), r.Header.Get("Content-Type"), ev})
			mu.Unlock()
		}))
		defer recv.Close()

		for _, pc := range []a2a.PushConfig{
			{URL: recv.URL + "/a2a/push/token", Token: "tok-1"},
			{URL: recv.URL + "/a2a/push/bearer", Token: "tok-2", AuthScheme: "Bearer", AuthCredentials: "tok-2"},
		} {
			res, err := c.SendMessage(ctx, a2a.SendRequest{
				Message:           a2a.Message{MessageID: "push-" + pc.Token, Role: a2a.RoleUser, Parts: []a2a.Part{{Text: "work"}}},
				ReturnImmediately: true, Push: &pc,
			})
			if err != nil {
				t.Fatal(err)
			}
			waitState(t, c, res.Task.ID, a2a.TaskStateWorking)
			if _, err := c.CancelTask(ctx, res.Task.ID, nil); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				mu.Lock()
				var canceled bool
				for _, p := range got {
					if p.ev.TaskID() != res.Task.ID {
						continue
					}
					if p.token != pc.Token || !strings.HasSuffix(p.contentType, "json") {
						t.Errorf("push with token %q, Content-Type %q; want token %q", p.token, p.contentType, pc.Token)
					}
					canceled = canceled || (p.ev.StatusUpdate != nil && p.ev.StatusUpdate.Status.State == a2a.TaskStateCanceled)
				}
				mu.Unlock()
				if canceled {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no push reported task %s canceled", res.Task.ID)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}

		// A config registered after the send.
		task := send(t, c, jspeer.ScenarioWork, true)
		if err := c.SetPushConfig(ctx, task.ID, a2a.PushConfig{URL: recv.URL + "/a2a/push/later", Token: "tok-3"}); err != nil {
			t.Fatalf("create push config: %v", err)
		}
		if _, err := c.CancelTask(ctx, task.ID, nil); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			mu.Lock()
			var n int
			for _, p := range got {
				if p.ev.TaskID() == task.ID && p.token == "tok-3" {
					n++
				}
			}
			mu.Unlock()
			if n > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("no push for a config created with CreateTaskPushNotificationConfig")
			}
			time.Sleep(20 * time.Millisecond)
		}
	})

	t.Run("compensation", func(t *testing.T) {
		task := send(t, c, jspeer.ScenarioWork, true)
		waitState(t, c, task.ID, a2a.TaskStateWorking)
		canceled, err := c.CancelTask(ctx, task.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		reply := requestCompensation(t, c, canceled, "comp-"+task.ID, "idem-"+task.ID)
		rc := receiptOf(t, reply)
		if rc.Outcome != jspeer.OutcomeCompensated || rc.TaskID != task.ID || rc.IdempotencyKey != "idem-"+task.ID {
			t.Errorf("receipt %+v", rc)
		}
		claims := verify(t, p, rc.JWS, compensation.KindAck)
		if claims.Issuer != "js-supplier" || claims.Subject != task.ID || claims.IdempotencyKey != rc.IdempotencyKey || claims.ReceiptID != rc.ReceiptID {
			t.Errorf("claims %+v do not match receipt %+v", claims, rc)
		}
		again := receiptOf(t, requestCompensation(t, c, canceled, "comp-again-"+task.ID, "idem-"+task.ID))
		if again != rc {
			t.Errorf("repeat receipt %+v; want the original %+v", again, rc)
		}
	})

	t.Run("compensation pending", func(t *testing.T) {
		task := send(t, c, jspeer.ScenarioCompensationPending, true)
		waitState(t, c, task.ID, a2a.TaskStateWorking)
		canceled, err := c.CancelTask(ctx, task.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := json.Marshal(map[string]any{"compensationRequest": map[string]any{
			"taskId": canceled.ID, "idempotencyKey": "idem-" + task.ID, "reason": "task_canceled",
		}})
		res, err := c.SendMessage(ctx, a2a.SendRequest{
			Message: a2a.Message{
				MessageID: "comp-" + task.ID, ContextID: canceled.ContextID, Role: a2a.RoleUser,
				ReferenceTaskIDs: []string{canceled.ID}, Parts: []a2a.Part{{Data: data}},
			},
			ReturnImmediately: true,
		})
		if err != nil || res.Task == nil {
			t.Fatalf("compensation request: %+v, %v", res, err)
		}
		// While the reversal works (1s), the task is working with the
		// pending receipt alone.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			cur, err := c.GetTask(ctx, res.Task.ID)
			if err != nil {
				t.Fatal(err)
			}
			if cur.Status.State == a2a.TaskStateCompleted {
				break // a slow machine missed the working window; the receipts below still tell
			}
			if cur.Status.State == a2a.TaskStateWorking {
				if rcs := receiptsOf(t, cur); len(rcs) != 1 || rcs[0].Outcome != "pending" || rcs[0].TaskID != task.ID || rcs[0].JWS != "" {
					t.Fatalf("receipts while working %+v; want one pending receipt without a jws", rcs)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("compensation task %s is %s", cur.ID, cur.Status.State)
			}
		}
		done := waitState(t, c, res.Task.ID, a2a.TaskStateCompleted)
		rcs := receiptsOf(t, done)
		if len(rcs) != 2 || rcs[0].Outcome != "pending" || rcs[1].Outcome != jspeer.OutcomeCompensated {
			t.Fatalf("receipts once completed %+v; want the pending one, then the compensated one", rcs)
		}
		verify(t, p, rcs[1].JWS, compensation.KindAck)
	})

	t.Run("compensation not_supported", func(t *testing.T) {
		task := send(t, c, jspeer.ScenarioCompensationNotSupported, true)
		waitState(t, c, task.ID, a2a.TaskStateWorking)
		canceled, err := c.CancelTask(ctx, task.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		rcs := receiptsOf(t, requestCompensation(t, c, canceled, "comp-"+task.ID, "idem-"+task.ID))
		if len(rcs) != 1 || rcs[0].Outcome != "not_supported" || rcs[0].Reason == "" || rcs[0].JWS != "" {
			t.Fatalf("receipts %+v; want one not_supported receipt with a reason", rcs)
		}
		// The peer reports what it received on its output, which may trail
		// its reply: wait for the report briefly.
		var got []string
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if got = p.CompensationRequests(task.ID); len(got) > 0 || time.Now().After(deadline) {
				break
			}
		}
		if len(got) != 1 || got[0] != "comp-"+task.ID {
			t.Errorf("the peer reports compensation requests %v for %s", got, task.ID)
		}
	})

	t.Run("purge on cancel", func(t *testing.T) {
		task := send(t, c, jspeer.ScenarioPurgeOnCancel, true)
		waitState(t, c, task.ID, a2a.TaskStateWorking)
		if _, err := c.CancelTask(ctx, task.ID, nil); !errors.Is(err, a2a.ErrTaskNotFound) {
			t.Fatalf("cancel: %v; want TaskNotFoundError", err)
		}
		if _, err := c.GetTask(ctx, task.ID); !errors.Is(err, a2a.ErrTaskNotFound) {
			t.Errorf("get after the purge: %v; want TaskNotFoundError", err)
		}
		if _, err := c.CancelTask(ctx, task.ID, nil); !errors.Is(err, a2a.ErrTaskNotFound) {
			t.Errorf("repeated cancel: %v; want TaskNotFoundError", err)
		}
		if !p.Purged(task.ID) {
			t.Errorf("the peer does not report task %s purged", task.ID)
		}
	})
}

// receiptsOf returns every compensation receipt on a task, in artifact
// order.
func receiptsOf(t *testing.T, task a2a.Task) []receipt {
	t.Helper()
	var out []receipt
	for _, a := range task.Artifacts {
		if a.Name == "compensation-receipt" && len(a.Parts) == 1 {
			var r receipt
			if err := json.Unmarshal(a.Parts[0].Data, &r); err != nil {
				t.Fatal(err)
			}
			checkReceiptSchema(t, a.Parts[0].Data, r.JWS)
			out = append(out, r)
		}
	}
	return out
}

func TestPeerNoEffects(t *testing.T) {
	p := jspeer.Start(t, jspeer.WithNoEffects())
	c, _ := connect(t, p)
	task := send(t, c, jspeer.ScenarioWork, true)
	canceled, err := c.CancelTask(context.Background(), task.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	rc := receiptOf(t, requestCompensation(t, c, canceled, "comp-1", "idem-1"))
	if rc.Outcome != jspeer.OutcomeNoEffects {
		t.Errorf("outcome %q; want no_effects", rc.Outcome)
	}
	claims := verify(t, p, rc.JWS, compensation.KindDeclaration)
	if claims.Issuer != "js-peer" || claims.Audience != "quittance" || claims.Subject != task.ID {
		t.Errorf("declaration claims %+v", claims)
	}
}

func TestPeerAtomicCancel(t *testing.T) {
	p := jspeer.Start(t, jspeer.WithAtomicCancel())
	c, card := connect(t, p)
	ext, _ := card.Extension(jspeer.ExtensionURI)
	if !strings.Contains(string(ext.Params), `"atomicCancel":true`) {
		t.Errorf("extension params %s; want atomicCancel", ext.Params)
	}
	task := send(t, c, jspeer.ScenarioWork, true)
	waitState(t, c, task.ID, a2a.TaskStateWorking)
	canceled, err := c.CancelTask(context.Background(), task.ID, []string{jspeer.ExtensionURI})
	if err != nil {
		t.Fatal(err)
	}
	verify(t, p, receiptOf(t, canceled).JWS, compensation.KindAck)
}

func TestPeerWorkDuration(t *testing.T) {
	p := jspeer.Start(t, jspeer.WithWorkDuration(200*time.Millisecond))
	c, _ := connect(t, p)
	task := send(t, c, jspeer.ScenarioWork, true)
	waitState(t, c, task.ID, a2a.TaskStateCompleted)
}

// checkReceiptSchema validates a receipt the peer returned, and its jws,
// against the compensation extension's published schemas
// (compensation/extension/v1/README.md).
func checkReceiptSchema(t *testing.T, data []byte, jws string) {
	t.Helper()
	if err := extension.Validate(extension.SchemaReceipt, data); err != nil {
		t.Errorf("receipt %s: %v", data, err)
	}
	if jws != "" {
		if err := extension.ValidateToken(extension.SchemaReceiptToken, jws); err != nil {
			t.Errorf("receipt jws: %v", err)
		}
	}
}
