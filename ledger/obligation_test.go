package ledger_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/quittance/quittance/ledger"
)

// transition is one allowed row of ledger/DESIGN.md §2.2's transition table.
type transition struct {
	to     ledger.ObligationState
	reason string
}

// allowedTransitions is ledger/DESIGN.md §2.2's table, written out independently
// of the implementation: every pair not listed here must be refused.
var allowedTransitions = map[ledger.ObligationState]map[ledger.ObligationEvent]transition{
	ledger.ObligationHeld: {
		ledger.EventTaskCompleted:        {ledger.ObligationSettled, ledger.ReasonCompleted},
		ledger.EventTaskRejected:         {ledger.ObligationReleased, ledger.ReasonRejectedBeforeWork},
		ledger.EventTaskEndedUngated:     {ledger.ObligationReleased, ledger.ReasonGateNotRequired},
		ledger.EventTaskEndedCompensated: {ledger.ObligationCompensated, ledger.ReasonAtomicCompensation},
		ledger.EventTaskEndedGated:       {ledger.ObligationRevocationPendingCompensation, ledger.ReasonCompensationRequired},
		ledger.EventTaskEndedAcked:       {ledger.ObligationCompensated, ledger.ReasonCompensationAcked},
		ledger.EventTaskEndedDeclared:    {ledger.ObligationReleased, ledger.ReasonNoCompensationDeclared},
		ledger.EventIdentityRevoked:      {ledger.ObligationEscalated, ledger.ReasonIdentityRevoked},
	},
	ledger.ObligationRevocationPendingCompensation: {
		ledger.EventCompensationAck:         {ledger.ObligationCompensated, ledger.ReasonCompensationAcked},
		ledger.EventDeclarationVerified:     {ledger.ObligationReleased, ledger.ReasonNoCompensationDeclared},
		ledger.EventCompensationUnconfirmed: {ledger.ObligationCompensationUnconfirmed, ledger.ReasonCompensationUnconfirm},
		ledger.EventIdentityRevoked:         {ledger.ObligationEscalated, ledger.ReasonIdentityRevoked},
		ledger.EventWriteOffApproved:        {ledger.ObligationWrittenOff, ledger.ReasonWrittenOff},
	},
	ledger.ObligationCompensationUnconfirmed: {
		ledger.EventCompensationAck:     {ledger.ObligationCompensated, ledger.ReasonCompensationAcked},
		ledger.EventDeclarationVerified: {ledger.ObligationReleased, ledger.ReasonNoCompensationDeclared},
		ledger.EventIdentityRevoked:     {ledger.ObligationEscalated, ledger.ReasonIdentityRevoked},
		ledger.EventWriteOffApproved:    {ledger.ObligationWrittenOff, ledger.ReasonWrittenOff},
	},
	ledger.ObligationEscalated: {
		ledger.EventWriteOffApproved: {ledger.ObligationWrittenOff, ledger.ReasonWrittenOff},
	},
}

func TestObligationStatesAndEventsAreComplete(t *testing.T) {
	t.Parallel()
	if got := len(ledger.ObligationStates); got != 8 {
		t.Fatalf("ObligationStates has %d states, ledger/DESIGN.md §2.2 names 8", got)
	}
	if got := len(ledger.ObligationEvents); got != 12 {
		t.Fatalf("ObligationEvents has %d events, want 12", got)
	}
	terminal := map[ledger.ObligationState]bool{
		ledger.ObligationSettled: true, ledger.ObligationReleased: true,
		ledger.ObligationCompensated: true, ledger.ObligationWrittenOff: true,
	}
	for _, s := range ledger.ObligationStates {
		if s.Terminal() != terminal[s] {
			t.Errorf("%s.Terminal() = %v, want %v", s, s.Terminal(), terminal[s])
		}
		got, err := ledger.ParseObligationState(string(s))
		if err != nil || got != s {
			t.Errorf("ParseObligationState(%q) = %q, %v", s, got, err)
		}
	}
	for _, bad := range []string{"", "HELD", "Held", "pending", "held "} {
		if _, err := ledger.ParseObligationState(bad); err == nil {
			t.Errorf("ParseObligationState(%q) accepted", bad)
		}
	}
}

func TestObligationHoldState(t *testing.T) {
	t.Parallel()
	want := map[ledger.ObligationState]ledger.HoldState{
		ledger.ObligationHeld:                          ledger.HoldActive,
		ledger.ObligationRevocationPendingCompensation: ledger.HoldActive,
		ledger.ObligationCompensationUnconfirmed:       ledger.HoldActive,
		ledger.ObligationEscalated:                     ledger.HoldActive,
		ledger.ObligationSettled:                       ledger.HoldConsumed,
		ledger.ObligationReleased:                      ledger.HoldReturned,
		ledger.ObligationCompensated:                   ledger.HoldReturned,
		ledger.ObligationWrittenOff:                    ledger.HoldLost,
	}
	for _, s := range ledger.ObligationStates {
		if got := s.Hold(); got != want[s] {
			t.Errorf("%s.Hold() = %s, want %s", s, got, want[s])
		}
	}
}

// TestNextObligationEveryPair walks all 8 × 10 (state, event) pairs.
func TestNextObligationEveryPair(t *testing.T) {
	t.Parallel()
	allowed := 0
	for _, from := range ledger.ObligationStates {
		for _, ev := range ledger.ObligationEvents {
			t.Run(fmt.Sprintf("%s/%s", from, ev), func(t *testing.T) {
				t.Parallel()
				to, reason, err := ledger.NextObligation(from, ev)
				want, ok := allowedTransitions[from][ev]
				if ok {
					if err != nil {
						t.Fatalf("NextObligation(%s, %s) refused: %v; ledger/DESIGN.md §2.2 allows → %s", from, ev, err, want.to)
					}
					if to != want.to || reason != want.reason {
						t.Fatalf("NextObligation(%s, %s) = %s (%s), want %s (%s)", from, ev, to, reason, want.to, want.reason)
					}
					return
				}
				var te *ledger.TransitionError
				if !errors.As(err, &te) {
					t.Fatalf("NextObligation(%s, %s) = %q, %q, %v; want a *TransitionError", from, ev, to, reason, err)
				}
				if te.From != from || te.Event != ev {
					t.Fatalf("TransitionError = {%s %s}, want {%s %s}", te.From, te.Event, from, ev)
				}
				if to != "" || reason != "" {
					t.Fatalf("refused transition returned state %q reason %q", to, reason)
				}
				if te.Error() == "" {
					t.Fatal("TransitionError has no message")
				}
			})
			if _, ok := allowedTransitions[from][ev]; ok {
				allowed++
			}
		}
	}
	if allowed != 18 {
		t.Fatalf("the expected table has %d allowed transitions, ledger/DESIGN.md §2.2 has 18", allowed)
	}
}

// TestNextObligationTerminalStatesAreFinal: nothing moves a terminal
// obligation, and no transition leaves the hold active except into an
// open state (invariant 1).
func TestNextObligationTerminalStatesAreFinal(t *testing.T) {
	t.Parallel()
	for _, from := range ledger.ObligationStates {
		for _, ev := range ledger.ObligationEvents {
			to, _, err := ledger.NextObligation(from, ev)
			if from.Terminal() && err == nil {
				t.Errorf("terminal %s moved to %s on %s", from, to, ev)
			}
			// Invariant 2: the only event time raises moves only
			// revocation_pending_compensation → compensation_unconfirmed.
			if ev == ledger.EventCompensationUnconfirmed && err == nil &&
				(from != ledger.ObligationRevocationPendingCompensation || to != ledger.ObligationCompensationUnconfirmed) {
				t.Errorf("deadline moved %s → %s", from, to)
			}
			if ev == ledger.EventCompensationUnconfirmed && err == nil && to.Hold() != ledger.HoldActive {
				t.Errorf("deadline moved the hold out of active (%s → %s)", from, to)
			}
		}
	}
}

func TestHoldMoveEveryPair(t *testing.T) {
	t.Parallel()
	for _, from := range ledger.ObligationStates {
		for _, to := range ledger.ObligationStates {
			var (
				want   ledger.BudgetMoveKind
				wantOK bool
			)
			if from.Hold() == ledger.HoldActive {
				switch to {
				case ledger.ObligationSettled:
					want, wantOK = ledger.MoveSpend, true
				case ledger.ObligationReleased, ledger.ObligationCompensated:
					want, wantOK = ledger.MoveReturn, true
				case ledger.ObligationWrittenOff:
					want, wantOK = ledger.MoveWriteOff, true
				}
			}
			got, ok := ledger.HoldMove(from, to)
			if got != want || ok != wantOK {
				t.Errorf("HoldMove(%s, %s) = %q, %v; want %q, %v", from, to, got, ok, want, wantOK)
			}
		}
	}
}

// TestHoldMoveMatchesEveryAllowedTransition: each allowed transition moves
// the hold exactly when it takes the hold out of active.
func TestHoldMoveMatchesEveryAllowedTransition(t *testing.T) {
	t.Parallel()
	for from, evs := range allowedTransitions {
		for ev, tr := range evs {
			_, ok := ledger.HoldMove(from, tr.to)
			if ok != (tr.to.Hold() != ledger.HoldActive) {
				t.Errorf("%s -%s-> %s: HoldMove ok = %v", from, ev, tr.to, ok)
			}
		}
	}
}

func TestTerminalStatusEventEveryCombination(t *testing.T) {
	t.Parallel()
	for _, st := range ledger.TaskStatuses {
		for _, gated := range []bool{false, true} {
			for _, held := range ledger.HeldEvidences {
				var (
					want   ledger.ObligationEvent
					wantOK = true
				)
				switch st {
				case ledger.StatusCompleted:
					want = ledger.EventTaskCompleted
				case ledger.StatusRejected:
					want = ledger.EventTaskRejected
				case ledger.StatusCanceled, ledger.StatusFailed:
					switch {
					case !gated:
						want = ledger.EventTaskEndedUngated
					case held == ledger.HeldEvidenceAtomicAck:
						want = ledger.EventTaskEndedCompensated
					case held == ledger.HeldEvidenceAck:
						want = ledger.EventTaskEndedAcked
					case held == ledger.HeldEvidenceDeclaration:
						want = ledger.EventTaskEndedDeclared
					default:
						want = ledger.EventTaskEndedGated
					}
				default:
					wantOK = false
				}
				got, ok := ledger.TerminalStatusEvent(st, gated, held)
				if got != want || ok != wantOK {
					t.Errorf("TerminalStatusEvent(%s, gated=%v, held=%q) = %q, %v; want %q, %v", st, gated, held, got, ok, want, wantOK)
				}
				if ok != st.Terminal() {
					t.Errorf("TerminalStatusEvent(%s) ok = %v but Terminal() = %v", st, ok, st.Terminal())
				}
				if ok {
					// Every event a terminal status raises is allowed from held.
					if _, _, err := ledger.NextObligation(ledger.ObligationHeld, got); err != nil {
						t.Errorf("held cannot take %s raised by %s: %v", got, st, err)
					}
				}
			}
		}
	}
}
