package compensation

import (
	"time"

	"github.com/quittance/quittance/ledger"
)

// Every remote task accounted for (ledger/DESIGN.md §3): no compensation
// evidence discharges an obligation until each remote task the agent
// created for it is accounted for. The rule lives here, read by
// ApplyEvidence, so every channel obeys it; the A2A workers find and
// record the tasks (delegate/remotetasks.go).

// RemoteTaskPurpose says which message created an extra remote task.
type RemoteTaskPurpose string

// The purposes of extra remote tasks.
const (
	// PurposeDispatch: the delegation's dispatch, or a task in the
	// delegation's own context whose message the agent did not say.
	PurposeDispatch RemoteTaskPurpose = "dispatch"
	// PurposeCompensation: a compensation request of the delegation.
	PurposeCompensation RemoteTaskPurpose = "compensation"
)

// RemoteTask is an extra remote task of a delegation: one its org's agent
// created besides the task recorded on the delegation and the compensation
// task Quittance follows.
type RemoteTask struct {
	TaskID    string
	Purpose   RemoteTaskPurpose
	ContextID string
	// FoundBy says how it was found: list_tasks, push, stream.
	FoundBy string
	// Status is its last known status ("unknown" until observed).
	Status ledger.TaskStatus
	// FoundAt is when it was recorded.
	FoundAt time.Time
	// CancelSentAt is when Quittance last asked the agent to cancel it.
	CancelSentAt time.Time
	// NamedRound is the latest compensation request round that named it
	// (0: none yet).
	NamedRound int
	// Compensation is where the compensation of the task itself stands,
	// once the delegation's tracked task completed (ExtraTaskCompensation).
	Compensation ExtraTaskCompensation
}

// Accounted reports whether the task no longer keeps the obligation open
// for evidence answering compensation request round: it is terminal and
// that request (or an earlier one, under the same idempotency key) named
// it. Round 0 is evidence that answers no particular request (a posted ack
// or declaration, a receipt in a cancel reply): any request sent so far
// that named the task counts, since the org was then told of it.
func (t RemoteTask) Accounted(round int) bool {
	return t.Status.Terminal() && t.NamedRound >= 1 && (round == 0 || t.NamedRound <= round)
}

// EvidenceFacts is what deciding evidence for a delegation reads besides
// the locked delegation, in one read (ReceiptTx.EvidenceFacts).
type EvidenceFacts struct {
	// Stored is the evidence accepted under the delegation's compensation
	// idempotency key; meaningful only when Found.
	Stored ledger.StoredEvidence
	Found  bool
	// RemoteTasks are the delegation's extra remote tasks, oldest first.
	RemoteTasks []RemoteTask
	// ResolvedByPerson says an on-call person named the delegation's remote
	// task when its dispatch was unknown (a dispatch_resolved event found
	// by oncall): its first terminal status does not release
	// (applyTaskEnd).
	ResolvedByPerson bool
}

// openTasks lists the extra tasks that keep the obligation open for
// evidence answering round (see RemoteTask.Accounted), and among them
// those that request round (or an earlier one) never named: evidence of
// that round cannot cover them, and only a new round can.
func openTasks(tasks []RemoteTask, round int) (open, unnamed []string) {
	for _, t := range tasks {
		if t.Accounted(round) {
			continue
		}
		open = append(open, t.TaskID)
		if t.NamedRound < 1 || (round > 0 && t.NamedRound > round) {
			unnamed = append(unnamed, t.TaskID)
		}
	}
	return open, unnamed
}

// taskIDs lists the ids of tasks.
func taskIDs(tasks []RemoteTask) []string {
	ids := make([]string, 0, len(tasks))
	for _, t := range tasks {
		ids = append(ids, t.TaskID)
	}
	return ids
}

// compensationPending reports whether the obligation waits for
// compensation evidence.
func compensationPending(s ledger.ObligationState) bool {
	return s == ledger.ObligationRevocationPendingCompensation || s == ledger.ObligationCompensationUnconfirmed
}
