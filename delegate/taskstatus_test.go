package delegate

import (
	"testing"

	"github.com/quittance/quittance/delegate/a2a"
	"github.com/quittance/quittance/ledger"
)

// TestTaskStatesAreLedgerStatuses holds the A2A client's task states and
// the ledger's task statuses together: taskStatus carries a state's name
// over unchanged, which is right only while every state is a status of the
// same name and every status a state.
func TestTaskStatesAreLedgerStatuses(t *testing.T) {
	t.Parallel()
	if len(a2a.TaskStates) != len(ledger.TaskStatuses) {
		t.Fatalf("%d A2A task states, %d ledger task statuses", len(a2a.TaskStates), len(ledger.TaskStatuses))
	}
	for _, s := range a2a.TaskStates {
		want, err := ledger.ParseTaskStatus(string(s))
		if got := taskStatus(s); err != nil || got != want {
			t.Errorf("taskStatus(%q) = %q; the ledger reads it as %q, %v", s, got, want, err)
		}
		if taskStatus(s).Terminal() != s.Terminal() {
			t.Errorf("%q: terminal for the ledger %v, for A2A %v", s, taskStatus(s).Terminal(), s.Terminal())
		}
	}
}
