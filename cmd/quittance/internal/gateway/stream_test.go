package gateway_test

import (
	"context"
	"errors"
	"iter"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
)

// drain reads a stream to its end (30 s at most) and returns its events.
func drain(t *testing.T, what string, events iter.Seq2[a2a.Event, error]) []a2a.Event {
	t.Helper()
	var out []a2a.Event
	for ev, err := range events {
		if err != nil {
			t.Fatalf("%s: the stream failed after %d events: %v", what, len(out), err)
		}
		out = append(out, ev)
	}
	if len(out) == 0 {
		t.Fatalf("%s: an empty stream", what)
	}
	return out
}

// lastStatus is the state of the last status a stream told.
func lastStatus(events []a2a.Event) (a2a.TaskStatus, map[string]any) {
	var st a2a.TaskStatus
	var meta map[string]any
	for _, ev := range events {
		switch e := ev.(type) {
		case *a2a.Task:
			st, meta = e.Status, e.Metadata
		case *a2a.TaskStatusUpdateEvent:
			st, meta = e.Status, e.Metadata
		}
	}
	return st, meta
}

// TestGatewayStreams: SendStreamingMessage streams a new task until it
// stops for input, and the answer's stream follows it to its completion
// with the agent's artifact; SubscribeToTask of an ended task is the
// task alone; another tenant's subscription is TaskNotFoundError. Over
// both bindings, with a2a-go v2's client, against an a2a-go v2 agent.
func TestGatewayStreams(t *testing.T) {
	t.Parallel()
	e := newGatewayEnv(t, apitest.Worker{PollAfter: 100 * time.Millisecond})
	e.servePartsDesk(t)
	for _, binding := range []a2a.TransportProtocol{a2a.TransportProtocolJSONRPC, a2a.TransportProtocolHTTPJSON} {
		name := strings.ToLower(strings.ReplaceAll(string(binding), "+", "-"))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		acme := e.client(t, e.acme, "parts-desk", binding)

		events := drain(t, name+" send", acme.SendStreamingMessage(ctx, &a2a.SendMessageRequest{Message: ledgerMessage("stream-"+name, "input_required", 5_000)}))
		task, ok := events[0].(*a2a.Task)
		if !ok {
			t.Fatalf("%s: the stream began with %T, want the task", binding, events[0])
		}
		st, _ := lastStatus(events)
		if st.State != a2a.TaskStateInputRequired || st.Message == nil || text(st.Message) != "Which cost center should be charged?" {
			t.Fatalf("%s: the stream ended at %+v", binding, st)
		}
		for _, ev := range events[1:] {
			if u, ok := ev.(*a2a.TaskStatusUpdateEvent); !ok || u.TaskID != task.ID || u.ContextID != task.ContextID {
				t.Fatalf("%s: event %T %+v", binding, ev, ev)
			}
		}

		answer := a2a.NewMessageForTask(a2a.MessageRoleUser, task, a2a.NewTextPart("CC-7"))
		answer.ID = "stream-answer-" + name
		events = drain(t, name+" answer", acme.SendStreamingMessage(ctx, &a2a.SendMessageRequest{Message: answer}))
		// The artifact is in the stream's first task when Quittance had
		// it before the stream began (the answer's reply may carry it), in
		// an artifact update when it came after.
		var artifact string
		for _, ev := range events {
			switch u := ev.(type) {
			case *a2a.Task:
				for _, a := range u.Artifacts {
					artifact = text(&a2a.Message{Parts: a.Parts})
				}
			case *a2a.TaskArtifactUpdateEvent:
				if u.TaskID == task.ID && u.LastChunk {
					artifact = text(&a2a.Message{Parts: u.Artifact.Parts})
				}
			}
		}
		st, m := lastStatus(events)
		ledgerMeta, _ := m[extensionURI()].(map[string]any)
		if artifact != "PO-42 charged to CC-7" || st.State != a2a.TaskStateCompleted || ledgerMeta["obligation_state"] != "settled" {
			t.Fatalf("%s: the answer's stream: artifact %q, status %+v, metadata %+v", binding, artifact, st, m)
		}

		events = drain(t, name+" subscribe", acme.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: task.ID}))
		if len(events) != 1 || events[0].(*a2a.Task).Status.State != a2a.TaskStateCompleted {
			t.Fatalf("%s: a subscription to the completed task: %+v", binding, events)
		}
		globex := e.client(t, e.globex, "parts-desk", binding)
		for _, err := range globex.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: task.ID}) {
			if !errors.Is(err, a2a.ErrTaskNotFound) {
				t.Fatalf("%s: globex subscribes to acme's task: %v", binding, err)
			}
			break
		}
	}
}

// TestGatewayStreamEndsWithItsClient: a subscriber that stops reading a
// task still working ends its stream (the package's leak check holds the
// server to it).
func TestGatewayStreamEndsWithItsClient(t *testing.T) {
	t.Parallel()
	e := newGatewayEnv(t)
	acme := e.client(t, e.acme, orgID, a2a.TransportProtocolJSONRPC)
	task := sendWorking(t, acme, ledgerMessage("po-stream-"+t.Name(), "Order 2 desks", 10_000))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := 0
	for ev, err := range acme.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: task.ID}) {
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := ev.(*a2a.Task); !ok || got.Status.State != a2a.TaskStateWorking {
			t.Fatalf("the subscription began with %+v", ev)
		}
		n++
		break
	}
	if n != 1 {
		t.Fatalf("%d events", n)
	}
}
