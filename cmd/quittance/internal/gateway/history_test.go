package gateway_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/google/uuid"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/delegate"
)

// TestGatewayTaskHistory: a task's history is the conversation Quittance
// recorded: the dispatched message (with the client's metadata, not the
// ledger extension's entry) under the messageId it was sent with, the
// agent's question as observed, the answer. historyLength keeps the last
// messages (none for 0) on GetTask and on SendMessage's configuration;
// ListTasks carries history only when asked. Over both bindings.
func TestGatewayTaskHistory(t *testing.T) {
	t.Parallel()
	e := newGatewayEnv(t, apitest.Worker{PollAfter: 100 * time.Millisecond})
	e.servePartsDesk(t)
	ctx := context.Background()
	for _, binding := range []a2a.TransportProtocol{a2a.TransportProtocolJSONRPC, a2a.TransportProtocolHTTPJSON} {
		name := strings.ToLower(strings.ReplaceAll(string(binding), "+", "-"))
		acme := e.client(t, e.acme, "parts-desk", binding)
		order := ledgerMessage("history-"+name, "input_required", 5_000)
		order.Metadata["cost-center-hint"] = "ops"
		none := 0
		res, err := acme.SendMessage(ctx, &a2a.SendMessageRequest{Message: order, Config: &a2a.SendMessageConfig{HistoryLength: &none}})
		if err != nil {
			t.Fatal(err)
		}
		task := res.(*a2a.Task)
		if len(task.History) != 0 {
			t.Fatalf("%s: historyLength 0 answered %d messages", binding, len(task.History))
		}
		task = waitTask(t, acme, task.ID, "the task asking for input", func(task *a2a.Task) bool { return task.Status.State == a2a.TaskStateInputRequired })
		got := conversation(task.History)
		if want := "user:input_required|agent:Which cost center should be charged?"; got != want {
			t.Fatalf("%s: history %q, want %q", binding, got, want)
		}
		sent := task.History[0]
		if sent.ID != delegate.DispatchMessageID(mustUUID(t, task.ID)) || sent.Metadata["cost-center-hint"] != "ops" || sent.Metadata[extensionURI()] != nil {
			t.Fatalf("%s: the dispatched message in history: id %q, metadata %+v", binding, sent.ID, sent.Metadata)
		}
		for _, m := range task.History {
			if m.TaskID != task.ID || m.ContextID != task.ContextID {
				t.Fatalf("%s: a history message of task %q context %q", binding, m.TaskID, m.ContextID)
			}
		}

		answer := a2a.NewMessageForTask(a2a.MessageRoleUser, task, a2a.NewTextPart("CC-9"))
		answer.ID = "history-answer-" + name
		if _, err := acme.SendMessage(ctx, &a2a.SendMessageRequest{Message: answer}); err != nil {
			t.Fatal(err)
		}
		task = waitTask(t, acme, task.ID, "the task completed", func(task *a2a.Task) bool { return task.Status.State == a2a.TaskStateCompleted })
		full := conversation(task.History)
		if !strings.HasPrefix(full, "user:input_required|agent:Which cost center should be charged?|user:CC-9") {
			t.Fatalf("%s: history after the answer %q", binding, full)
		}
		if id := task.History[2].ID; id != delegate.FollowUpMessageID(mustUUID(t, task.ID), answer.ID) {
			t.Fatalf("%s: the answer in history has id %q", binding, id)
		}
		two := 2
		last, err := acme.GetTask(ctx, &a2a.GetTaskRequest{ID: task.ID, HistoryLength: &two})
		if err != nil {
			t.Fatal(err)
		}
		parts := strings.Split(full, "|")
		if got, want := conversation(last.History), strings.Join(parts[len(parts)-2:], "|"); got != want {
			t.Fatalf("%s: historyLength 2: %q, want %q", binding, got, want)
		}
		if bare, err := acme.GetTask(ctx, &a2a.GetTaskRequest{ID: task.ID, HistoryLength: &none}); err != nil || len(bare.History) != 0 {
			t.Fatalf("%s: historyLength 0: %v, %d messages", binding, err, len(bare.History))
		}

		list, err := acme.ListTasks(ctx, &a2a.ListTasksRequest{})
		if err != nil || len(list.Tasks) == 0 || len(list.Tasks[0].History) != 0 {
			t.Fatalf("%s: ListTasks without historyLength: %v %+v", binding, err, list)
		}
		list, err = acme.ListTasks(ctx, &a2a.ListTasksRequest{HistoryLength: &two})
		if err != nil || len(list.Tasks) == 0 || list.Tasks[0].ID != task.ID || conversation(list.Tasks[0].History) != conversation(last.History) {
			t.Fatalf("%s: ListTasks with historyLength 2: %v %+v", binding, err, list)
		}
	}
}

// conversation is role:text of each message, joined by |.
func conversation(history []*a2a.Message) string {
	var out []string
	for _, m := range history {
		role := "user"
		if m.Role == a2a.MessageRoleAgent {
			role = "agent"
		}
		out = append(out, role+":"+text(m))
	}
	return strings.Join(out, "|")
}

// mustUUID is a task id as the delegation id it is.
func mustUUID(t *testing.T, id a2a.TaskID) uuid.UUID {
	t.Helper()
	u, err := uuid.Parse(string(id))
	if err != nil {
		t.Fatalf("task id %q: %v", id, err)
	}
	return u
}
