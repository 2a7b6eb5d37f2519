// Command go is an orchestrating agent on a2a-go v2's client delegating a
// purchase order through Quittance's A2A gateway, as GATEWAY.md's
// walk-through runs it: it resolves the gateway's card for the org with
// its bearer token, builds its client from the card, and sends, resends,
// follows and cancels one purchase order, then waits for the supplier's
// receipt. Each step prints one JSON line of facts that do not change from
// run to run.
//
// It reads QUITTANCE_URL, ORCH_TOKEN, BUDGET_ID and RUN (a word that makes
// the message id unique), and ORG (default demo-supplier).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
)

// ledgerExtension is the URI of Quittance's ledger extension.
const ledgerExtension = "https://quittance.dev/a2a/ledger/v1"

// bearer adds the orchestrator's token to every request.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "orchestrator:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	org := os.Getenv("ORG")
	if org == "" {
		org = "demo-supplier"
	}
	hc := &http.Client{Transport: bearer{token: os.Getenv("ORCH_TOKEN")}, Timeout: 30 * time.Second}
	card, err := agentcard.NewResolver(hc).Resolve(ctx, os.Getenv("QUITTANCE_URL")+"/a2a/orgs/"+org)
	if err != nil {
		return fmt.Errorf("resolve the gateway's card: %w", err)
	}
	client, err := a2aclient.NewFromCard(ctx, card, a2aclient.WithJSONRPCTransport(hc), a2aclient.WithRESTTransport(hc))
	if err != nil {
		return err
	}

	// The purchase order: an ordinary A2A message with the ledger's data
	// under the extension's URI. The message id is A2A's idempotency key.
	msg := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("Order 40 laptops for the Lyon office"))
	msg.ID = "po-go-" + os.Getenv("RUN")
	msg.Metadata = map[string]any{ledgerExtension: map[string]any{
		"budget_id": os.Getenv("BUDGET_ID"), "task_class": "procurement",
		"hold": map[string]any{"amount_minor": 125000, "currency": "EUR"},
	}}
	sent, err := sendTask(ctx, client, msg)
	if err != nil {
		return err
	}
	resent, err := sendTask(ctx, client, msg) // a retry: the same task, no second hold
	if err != nil {
		return err
	}
	print("sent", map[string]any{"same_task": resent.ID == sent.ID, "obligation": ledgerOf(sent)["obligation_state"]})

	working, err := waitFor(ctx, client, sent.ID, func(t *a2a.Task) bool { return t.Status.State == a2a.TaskStateWorking })
	if err != nil {
		return err
	}
	print("working", map[string]any{"state": working.Status.State, "remote_task": ledgerOf(working)["remote_task_id"] != nil})

	canceled, err := client.CancelTask(ctx, &a2a.CancelTaskRequest{ID: sent.ID})
	if err != nil {
		return err
	}
	print("cancel", map[string]any{"obligation": ledgerOf(canceled)["obligation_state"], "hold": holdState(canceled)})

	done, err := waitFor(ctx, client, sent.ID, func(t *a2a.Task) bool { return ledgerOf(t)["obligation_state"] == "compensated" })
	if err != nil {
		return err
	}
	print("receipt", map[string]any{"state": done.Status.State, "obligation": ledgerOf(done)["obligation_state"], "hold": holdState(done)})
	return nil
}

// sendTask sends msg and returns the task the gateway answers with.
func sendTask(ctx context.Context, client *a2aclient.Client, msg *a2a.Message) (*a2a.Task, error) {
	res, err := client.SendMessage(ctx, &a2a.SendMessageRequest{Message: msg})
	if err != nil {
		return nil, err
	}
	task, ok := res.(*a2a.Task)
	if !ok {
		return nil, fmt.Errorf("the gateway answered %T, not a task", res)
	}
	return task, nil
}

// waitFor reads the task every second until ok holds, for two minutes.
func waitFor(ctx context.Context, client *a2aclient.Client, id a2a.TaskID, ok func(*a2a.Task) bool) (*a2a.Task, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		task, err := client.GetTask(ctx, &a2a.GetTaskRequest{ID: id})
		if err != nil {
			return nil, err
		}
		if ok(task) {
			return task, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("task %s: %w", id, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// ledgerOf is the ledger's view of a task, under the extension's URI.
func ledgerOf(t *a2a.Task) map[string]any {
	m, _ := t.Metadata[ledgerExtension].(map[string]any)
	return m
}

func holdState(t *a2a.Task) any {
	hold, _ := ledgerOf(t)["hold"].(map[string]any)
	return hold["state"]
}

func print(step string, facts map[string]any) {
	facts["step"] = step
	b, _ := json.Marshal(facts)
	fmt.Println(string(b))
}
