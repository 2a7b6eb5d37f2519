package delegate_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/delegate/internal/jspeer"
	"github.com/quittance/quittance/ledger"
)

// TestJSPeerContinueInterruptedTask answers an input_required task of the
// official JS SDK agent through Quittance and sees it complete; the answer
// is sent once however often it is repeated.
func TestJSPeerContinueInterruptedTask(t *testing.T) {
	t.Parallel()
	for _, scenario := range []string{jspeer.ScenarioInputRequired, jspeer.ScenarioAuthRequired} {
		t.Run(scenario, func(t *testing.T) {
			t.Parallel()
			e := newJSEnv(t, jsOptions{push: true})
			d := e.dispatch(t, "op-"+scenario, scenario)
			d = e.waitFor(t, d.ID, "dispatch", func(d ledger.Delegation) bool { return d.Remote.TaskID != "" })
			// A push can outrun the dispatch reply; what the poller would
			// do later, do now.
			now := time.Now()
			if err := e.store.A2A().InTx(context.Background(), func(tx delegate.Tx) error {
				return tx.EnqueueOutbound(context.Background(), ledger.OutboundJob{
					DelegationID: d.ID, Kind: ledger.OutboundObserve, Payload: []byte(`{"source":"poll"}`), RunAfter: now, At: now,
				})
			}); err != nil {
				t.Fatal(err)
			}
			e.w.Wake()
			d = e.waitFor(t, d.ID, scenario, func(d ledger.Delegation) bool { return string(d.TaskStatus) == scenario })
			snap, err := e.w.TaskSnapshot(context.Background(), e.orch, d.ID)
			if err != nil || snap.StatusMessage == nil || snap.StatusMessage.Text == "" {
				t.Fatalf("snapshot %+v, %v", snap, err)
			}
			if scenario == jspeer.ScenarioAuthRequired && !strings.Contains(snap.StatusMessage.Text, "https://consent.example.test/") {
				t.Fatalf("consent URL missing from %q", snap.StatusMessage.Text)
			}
			msg := json.RawMessage(`{"parts":[{"text":"CC-42"}]}`)
			first, created, err := e.w.Continue(context.Background(), e.orch, d.ID, delegate.ContinueInput{MessageID: "a1", Message: msg})
			if err != nil || !created {
				t.Fatalf("continue: %v (created %v)", err, created)
			}
			again, created, err := e.w.Continue(context.Background(), e.orch, d.ID, delegate.ContinueInput{MessageID: "a1", Message: msg})
			if err != nil || created || again.A2AMessageID != first.A2AMessageID {
				t.Fatalf("repeat: %+v, %v, created %v", again, err, created)
			}
			d = e.waitFor(t, d.ID, "settled", func(d ledger.Delegation) bool { return d.ObligationState == ledger.ObligationSettled })
			_, _, err = e.w.Continue(context.Background(), e.orch, d.ID, delegate.ContinueInput{MessageID: "a2", Message: msg})
			var conflict *ledger.ConflictError
			if !errors.As(err, &conflict) || conflict.Code != "task_terminal" {
				t.Fatalf("continuing a completed task: %v", err)
			}
			sent := 0
			for _, ev := range e.events(t, d) {
				if ev.Type == delegate.EventTypeMessageSent {
					sent++
				}
			}
			if sent != 1 {
				t.Fatalf("%d messages sent, want 1", sent)
			}
		})
	}
}
