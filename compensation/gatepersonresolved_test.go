package compensation

import (
	"testing"

	"github.com/quittance/quittance/ledger"
)

// TestGatePersonResolved: after a person named the task, every end that
// would release is a gated end, answered by the compensation evidence
// received early if any; completed and gated ends are left alone, and
// without a person's resolution nothing changes.
func TestGatePersonResolved(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		person bool
		event  ledger.ObligationEvent
		held   ledger.HeldEvidence
		want   ledger.ObligationEvent
	}{
		{true, ledger.EventTaskRejected, ledger.HeldEvidenceNone, ledger.EventTaskEndedGated},
		{true, ledger.EventTaskEndedUngated, ledger.HeldEvidenceNone, ledger.EventTaskEndedGated},
		{true, ledger.EventTaskRejected, ledger.HeldEvidenceAck, ledger.EventTaskEndedAcked},
		{true, ledger.EventTaskEndedUngated, ledger.HeldEvidenceDeclaration, ledger.EventTaskEndedDeclared},
		{true, ledger.EventTaskCompleted, ledger.HeldEvidenceNone, ledger.EventTaskCompleted},
		{true, ledger.EventTaskEndedGated, ledger.HeldEvidenceNone, ledger.EventTaskEndedGated},
		{false, ledger.EventTaskRejected, ledger.HeldEvidenceNone, ledger.EventTaskRejected},
		{false, ledger.EventTaskEndedUngated, ledger.HeldEvidenceAck, ledger.EventTaskEndedUngated},
	} {
		data := &ledger.TaskStatusChangedData{}
		got := gatePersonResolved(EvidenceFacts{ResolvedByPerson: c.person}, c.event, c.held, data)
		if got != c.want {
			t.Errorf("resolved by person %v, %s with %s held: %s, want %s", c.person, c.event, c.held, got, c.want)
		}
		if marked := data.ResolvedByPerson; marked != (got != c.event) {
			t.Errorf("resolved by person %v, %s: data %v", c.person, c.event, data)
		}
	}
}
