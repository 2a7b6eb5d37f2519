package gateway_test

import (
	"context"
	"errors"
	"iter"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"

	"github.com/quittance/quittance/cmd/quittance/internal/gateway"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
)

// v2Peer is a remote agent on a2a-go v2, served by a2asrv's own handler:
// a first message whose text is "input_required" stops its task there,
// asking which cost center to charge; the answer completes it with a
// result artifact. Any other first message works until canceled.
type v2Peer struct {
	mu      sync.Mutex
	answers []string
}

func text(m *a2a.Message) string {
	var out []string
	for _, p := range m.Parts {
		out = append(out, p.Text())
	}
	return strings.Join(out, "\n")
}

func (p *v2Peer) Execute(_ context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		if ec.StoredTask == nil {
			if !yield(a2a.NewSubmittedTask(ec, ec.Message), nil) {
				return
			}
			if text(ec.Message) == "input_required" {
				ask := a2a.NewMessageForTask(a2a.MessageRoleAgent, ec, a2a.NewTextPart("Which cost center should be charged?"))
				yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateInputRequired, ask), nil)
				return
			}
			yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateWorking, nil), nil)
			return
		}
		answer := text(ec.Message)
		p.mu.Lock()
		p.answers = append(p.answers, answer)
		p.mu.Unlock()
		art := a2a.NewArtifactEvent(ec, a2a.NewTextPart("PO-42 charged to "+answer))
		art.Artifact.Name = "result"
		if !yield(art, nil) {
			return
		}
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCompleted, nil), nil)
	}
}

func (p *v2Peer) Cancel(_ context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCanceled, nil), nil)
	}
}

// servePartsDesk serves a v2Peer as org "parts-desk" of e until the test
// ends.
func (e *gwEnv) servePartsDesk(t *testing.T) *v2Peer {
	t.Helper()
	peer := &v2Peer{}
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	mux.Handle("/.well-known/agent-card.json", a2asrv.NewStaticAgentCardHandler(&a2a.AgentCard{
		Name: "Parts desk", Description: "Orders spare parts; asks which cost center to charge.", Version: "1.0.0",
		SupportedInterfaces: []*a2a.AgentInterface{{URL: srv.URL + "/rpc", ProtocolBinding: a2a.TransportProtocolJSONRPC, ProtocolVersion: "1.0"}},
		DefaultInputModes:   []string{"text/plain"}, DefaultOutputModes: []string{"text/plain"},
		Skills: []a2a.AgentSkill{{ID: "parts", Name: "Spare parts", Description: "Orders spare parts.", Tags: []string{"procurement"}}},
	}))
	mux.Handle("/rpc", a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(peer)))
	e.Do(t, http.MethodPut, "/admin/v1/orgs/parts-desk", e.OncallToken, map[string]any{
		"name": "Parts desk", "agent_card_url": srv.URL + "/.well-known/agent-card.json", "allowed_hosts": []string{"127.0.0.1"},
	}).Expect(t, http.StatusCreated)
	for _, tenant := range []string{"acme", "globex"} {
		e.Do(t, http.MethodPut, "/admin/v1/orgs/parts-desk/task-class-policies/"+tenant, e.OncallToken,
			map[string]any{"classes": []string{"read_only", "procurement"}}).Expect(t, http.StatusOK)
	}
	return peer
}

// TestGatewayContinuation: a task that stops in input_required is
// answered with SendMessage on its id, as any A2A client continues a
// task; Quittance delivers the answer to the org's agent once, and the
// task completes with the agent's artifact. Only an interrupted task of
// the caller's takes an answer.
func TestGatewayContinuation(t *testing.T) {
	t.Parallel()
	e := newGatewayEnv(t, apitest.Worker{PollAfter: 100 * time.Millisecond})
	peer := e.servePartsDesk(t)
	ctx := context.Background()
	for _, binding := range []a2a.TransportProtocol{a2a.TransportProtocolJSONRPC, a2a.TransportProtocolHTTPJSON} {
		acme := e.client(t, e.acme, "parts-desk", binding)
		name := strings.ToLower(strings.ReplaceAll(string(binding), "+", "-"))
		task := send(t, acme, ledgerMessage("parts-"+name, "input_required", 20_000))
		task = waitTask(t, acme, task.ID, "the task asking for input", func(task *a2a.Task) bool {
			return task.Status.State == a2a.TaskStateInputRequired
		})
		if task.Status.Message == nil || text(task.Status.Message) != "Which cost center should be charged?" {
			t.Fatalf("%s: status %+v: want the agent's question", binding, task.Status)
		}

		answer := a2a.NewMessageForTask(a2a.MessageRoleUser, task, a2a.NewTextPart("CC-42"))
		answer.ID = "answer-" + name
		globex := e.client(t, e.globex, "parts-desk", binding)
		if _, err := globex.SendMessage(ctx, &a2a.SendMessageRequest{Message: answer}); !errors.Is(err, a2a.ErrTaskNotFound) {
			t.Fatalf("%s: globex answers acme's task: %v", binding, err)
		}
		for range 2 { // a resend of the answer is the same answer
			res, err := acme.SendMessage(ctx, &a2a.SendMessageRequest{Message: answer})
			if err != nil {
				t.Fatalf("%s: the answer: %v", binding, err)
			}
			if got, ok := res.(*a2a.Task); !ok || got.ID != task.ID {
				t.Fatalf("%s: the answer's reply %+v, want task %s", binding, res, task.ID)
			}
		}
		task = waitTask(t, acme, task.ID, "the task completed", func(task *a2a.Task) bool {
			return task.Status.State == a2a.TaskStateCompleted && len(task.Artifacts) == 1
		})
		if got := text(&a2a.Message{Parts: task.Artifacts[0].Parts}); got != "PO-42 charged to CC-42" || task.Artifacts[0].Name != "result" {
			t.Fatalf("%s: artifacts %+v", binding, task.Artifacts[0])
		}
		if m := meta(t, task); m["obligation_state"] != "settled" || m["hold"].(map[string]any)["state"] != "consumed" {
			t.Fatalf("%s: after the completion: %+v", binding, m)
		}

		// A terminal task takes no answer, nor does one that works.
		again := a2a.NewMessageForTask(a2a.MessageRoleUser, task, a2a.NewTextPart("CC-43"))
		_, err := acme.SendMessage(ctx, &a2a.SendMessageRequest{Message: again})
		if !errors.Is(err, a2a.ErrInvalidRequest) || errorInfoMeta(t, err)["problem_code"] != "task_terminal" {
			t.Fatalf("%s: an answer to the completed task: %v", binding, err)
		}
		// (read_only: its cancel at the end needs no compensation, so the
		// agent has no task left running when the test ends.)
		order := ledgerMessage("parts-working-"+name, "Order 3 gaskets", 1_000)
		order.Metadata[gateway.ExtensionURI].(map[string]any)["task_class"] = "read_only"
		working := sendWorking(t, acme, order)
		_, err = acme.SendMessage(ctx, &a2a.SendMessageRequest{Message: a2a.NewMessageForTask(a2a.MessageRoleUser, working, a2a.NewTextPart("CC-44"))})
		if !errors.Is(err, a2a.ErrInvalidRequest) || errorInfoMeta(t, err)["problem_code"] != "task_not_interrupted" {
			t.Fatalf("%s: an answer to a working task: %v", binding, err)
		}
		if _, err := acme.CancelTask(ctx, &a2a.CancelTaskRequest{ID: working.ID}); err != nil {
			t.Fatal(err)
		}
		waitTask(t, acme, working.ID, "the working task canceled", func(task *a2a.Task) bool {
			return task.Status.State == a2a.TaskStateCanceled && meta(t, task)["obligation_state"] == "released"
		})
	}
	peer.mu.Lock()
	defer peer.mu.Unlock()
	if strings.Join(peer.answers, ",") != "CC-42,CC-42" {
		t.Fatalf("the agent got the answers %v: want one per task", peer.answers)
	}
}
