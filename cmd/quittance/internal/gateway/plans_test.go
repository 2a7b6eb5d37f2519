package gateway_test

import (
	"context"
	"testing"
	"time"

	a2a03 "github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/google/uuid"

	"github.com/quittance/quittance/cmd/quittance/internal/demoagent"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
)

// TestGatewayPlansUseIndexes plans, as the httpapi tests plan the API's
// (TestWritePathPlansUseIndexes), every statement the gateway sends for an
// orchestrator on both bindings: a send with a push config, GetTask while
// Quittance dispatches it to the demo supplier, the push configs read, CancelTask until the supplier's receipt compensates it,
// the pushes delivered and a subscription to the ended task, and the same
// through the v0.3 binding. Against
// tables of tens of thousands of rows, a sequential scan of one that grows
// with the ledger fails it. ListTasks is left out: it is a list read, not
// a task's path, and its count (DelegationCount), whose optional filters
// leave a generic plan no index, reads the whole of delegations; that is
// the list reads' to fix.
func TestGatewayPlansUseIndexes(t *testing.T) {
	t.Parallel()
	rt := &apitest.Recorder{}
	e := newGatewayEnvWith(t, apitest.Worker{Webhooks: true}, demoagent.Config{}, apitest.WithRecorder(rt), apitest.WithPrivateCluster())
	recv := newPushReceiver(t)
	e.CheckPlansOf(t, rt, orgID, "ops", "the gateway", func() {
		for _, binding := range []a2a.TransportProtocol{a2a.TransportProtocolJSONRPC, a2a.TransportProtocolHTTPJSON} {
			gatewayLifecycle(t, e, recv, binding)
		}
		gatewayLifecycle03(t, e)
	})
}

// gatewayLifecycle is what TestGatewayPlansUseIndexes records on one
// binding.
func gatewayLifecycle(t *testing.T, e *gwEnv, recv *pushReceiver, binding a2a.TransportProtocol) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	acme := e.client(t, e.acme, orgID, binding)
	token := "plans-" + uuid.NewString()
	recv.expect(token, "")
	res, err := acme.SendMessage(ctx, &a2a.SendMessageRequest{
		Message: ledgerMessage(uuid.NewString(), "Order 40 laptops for the Lyon office", 10_000),
		Config:  &a2a.SendMessageConfig{PushConfig: &a2a.PushConfig{URL: recv.url, Token: token}},
	})
	if err != nil {
		t.Fatal(err)
	}
	task := res.(*a2a.Task)
	waitTask(t, acme, task.ID, "the remote task working", func(task *a2a.Task) bool {
		return task.Status.State == a2a.TaskStateWorking && meta(t, task)["remote_task_id"] != nil
	})
	if _, err := acme.ListTaskPushConfigs(ctx, &a2a.ListTaskPushConfigRequest{TaskID: task.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := acme.CancelTask(ctx, &a2a.CancelTaskRequest{ID: task.ID}); err != nil {
		t.Fatal(err)
	}
	waitTask(t, acme, task.ID, "the task canceled and compensated", func(task *a2a.Task) bool {
		return task.Status.State == a2a.TaskStateCanceled && meta(t, task)["obligation_state"] == "compensated"
	})
	recv.wait(token, "the task canceled", func(p *a2a.Task) bool { return p.ID == task.ID && p.Status.State == a2a.TaskStateCanceled })
	drain(t, "subscribe", acme.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: task.ID}))
}

// gatewayLifecycle03 is what TestGatewayPlansUseIndexes records through
// the v0.3 binding: a send, a push config set and read, tasks/get while
// the task is dispatched, a resubscription, and a cancel until the
// supplier's receipt compensates it, pushed.
func gatewayLifecycle03(t *testing.T, e *gwEnv) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	recv := newPush03Receiver(t, "plans-"+uuid.NewString())
	c := e.client03(t, e.acme)
	task := send03(t, c, ledgerMessage03(uuid.NewString(), "Order 40 laptops for the Lyon office", 10_000))
	if _, err := c.SetTaskPushConfig(ctx, &a2a03.TaskPushConfig{TaskID: task.ID, Config: a2a03.PushConfig{ID: "po-desk", URL: recv.url, Token: recv.token}}); err != nil {
		t.Fatal(err)
	}
	waitTask03(t, c, task.ID, "the remote task working", func(task *a2a03.Task) bool {
		return task.Status.State == a2a03.TaskStateWorking && meta03(t, task)["remote_task_id"] != nil
	})
	if _, err := c.GetTaskPushConfig(ctx, &a2a03.GetTaskPushConfigParams{TaskID: task.ID, ConfigID: "po-desk"}); err != nil {
		t.Fatal(err)
	}
	for _, err := range c.ResubscribeToTask(ctx, &a2a03.TaskIDParams{ID: task.ID}) {
		if err != nil {
			t.Fatalf("tasks/resubscribe: %v", err)
		}
		break
	}
	if _, err := c.CancelTask(ctx, &a2a03.TaskIDParams{ID: task.ID}); err != nil {
		t.Fatal(err)
	}
	recv.wait(recv.token, "the task compensated", func(p *a2a03.Task) bool {
		return p.ID == task.ID && p.Status.State == a2a03.TaskStateCanceled && meta03(t, p)["obligation_state"] == "compensated"
	})
}
