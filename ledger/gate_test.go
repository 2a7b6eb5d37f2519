package ledger_test

import (
	"fmt"
	"testing"

	"github.com/quittance/quittance/ledger"
)

func TestGateApplies(t *testing.T) {
	t.Parallel()
	gateBoth := []ledger.TaskStatus{ledger.StatusCanceled, ledger.StatusFailed}
	gateCanceled := []ledger.TaskStatus{ledger.StatusCanceled}
	for _, effect := range []bool{false, true} {
		for _, shared := range []bool{false, true} {
			for _, gateOn := range [][]ledger.TaskStatus{nil, gateCanceled, gateBoth} {
				for _, st := range ledger.TaskStatuses {
					inGate := false
					for _, g := range gateOn {
						inGate = inGate || g == st
					}
					want := effect && !shared && inGate
					class := ledger.TaskClass{Name: "c", EffectCapable: effect, GateOn: gateOn}
					org := ledger.Org{ID: "o", SharedCoordinator: shared}
					name := fmt.Sprintf("effect=%v/shared=%v/gate_on=%v/%s", effect, shared, gateOn, st)
					if got := ledger.GateApplies(class, org, st); got != want {
						t.Errorf("%s: GateApplies = %v, want %v", name, got, want)
					}
				}
			}
		}
	}
}

// TestUnknownTaskClassFailsSafe: a class Quittance does not know counts as
// effect-capable and gates on canceled and failed with the default timeout.
func TestUnknownTaskClassFailsSafe(t *testing.T) {
	t.Parallel()
	c := ledger.UnknownTaskClass("teleportation")
	if c.Name != "teleportation" || !c.EffectCapable || c.CompensationTimeout != ledger.DefaultCompensationTimeout {
		t.Fatalf("UnknownTaskClass = %+v", c)
	}
	if ledger.DefaultCompensationTimeout.Hours() != 72 {
		t.Fatalf("default compensation timeout %v, ledger/DESIGN.md §2.2 says 72h", ledger.DefaultCompensationTimeout)
	}
	noCoordinator := ledger.Org{ID: "o"}
	for _, st := range []ledger.TaskStatus{ledger.StatusCanceled, ledger.StatusFailed} {
		if !ledger.GateApplies(c, noCoordinator, st) {
			t.Errorf("unknown class does not gate on %s", st)
		}
		ev, ok := ledger.TerminalStatusEvent(st, ledger.GateApplies(c, noCoordinator, st), ledger.HeldEvidenceNone)
		if !ok || ev != ledger.EventTaskEndedGated {
			t.Errorf("unknown class ending %s raises %q, want %s", st, ev, ledger.EventTaskEndedGated)
		}
	}
	for _, st := range []ledger.TaskStatus{ledger.StatusCompleted, ledger.StatusRejected, ledger.StatusWorking} {
		if ledger.GateApplies(c, noCoordinator, st) {
			t.Errorf("unknown class gates on %s", st)
		}
	}
	// A shared coordinator still lifts the gate.
	if ledger.GateApplies(c, ledger.Org{ID: "o", SharedCoordinator: true}, ledger.StatusCanceled) {
		t.Error("gate applies to an org with a shared coordinator")
	}
	// The returned class must not alias the package default.
	c.GateOn[0] = ledger.StatusCompleted
	if ledger.UnknownTaskClass("x").GateOn[0] != ledger.StatusCanceled || ledger.DefaultGateOn[0] != ledger.StatusCanceled {
		t.Fatal("UnknownTaskClass shares its GateOn slice with DefaultGateOn: one caller's change alters every unknown class")
	}
}
