package delegate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"regexp"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/ledger"
)

// Continuing an interrupted task. When a remote task stops in
// input_required or auth_required, the orchestrator answers it through
// Quittance with an ordinary A2A message on the same task and context (the
// A2A resumption rule). The Orchestrator queues the answer in the
// transaction that checks the task is interrupted; the Worker sends it like
// every other A2A call ("message" jobs, message.go), in the order the
// answers were queued. A terminal task is never continued: a refinement is
// a new delegation (context_from).

// Statuses of a follow-up message.
const (
	// MessageQueued: waiting in the outbox.
	MessageQueued = "queued"
	// MessageSent: delivered to the remote task.
	MessageSent = "sent"
	// MessageFailed: refused by the remote, or undeliverable; not retried.
	MessageFailed = "failed"
)

// ContinueInput is an orchestrator's answer to an interrupted task.
type ContinueInput struct {
	// MessageID is the orchestrator's id for the answer; continuing is
	// idempotent on it, per delegation.
	MessageID string
	// Message is the message as JSON: {"parts": [...], "metadata": {...}},
	// validated like a dispatched message.
	Message []byte
}

// FollowUp is a follow-up message on a delegation's remote task.
type FollowUp struct {
	// DelegationID is the delegation.
	DelegationID uuid.UUID
	// MessageID is the orchestrator's id.
	MessageID string
	// A2AMessageID is the messageId sent to the remote: derived from the
	// delegation and MessageID, the same on every attempt.
	A2AMessageID string
	// RequestHash fingerprints the message, to tell a repeat from a reuse.
	RequestHash []byte
	// Payload is the message JSON as queued.
	Payload []byte
	// Status is queued, sent or failed.
	Status string
	// Attempts counts delivery attempts.
	Attempts int
	// Error says why the last attempt failed.
	Error string
	// ResultState is the remote task state the send answered with.
	ResultState ledger.TaskStatus
	// CreatedAt is when it was queued; SentAt when it was delivered.
	CreatedAt time.Time
	SentAt    time.Time
}

// FollowUpMessageID is the A2A messageId of follow-up messageID of
// delegation id.
func FollowUpMessageID(id uuid.UUID, messageID string) string {
	sum := sha256.Sum256([]byte("quittance/message/v1:" + id.String() + ":" + messageID))
	return "quittance-msg-" + hex.EncodeToString(sum[:16])
}

var messageIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$`)

// Continue queues an orchestrator's answer to the delegation's interrupted
// remote task. A repeat with the same message id and message returns the
// recorded follow-up and created false, sending nothing again; the same id
// with another message is ledger.ErrIdempotencyMismatch. A task that is
// terminal is a task_terminal conflict; one that is not input_required or
// auth_required is task_not_interrupted.
func (o *Orchestrator) Continue(ctx context.Context, p ledger.Principal, id uuid.UUID, in ContinueInput) (FollowUp, bool, error) {
	if p.Role != ledger.RoleOrchestrator {
		return FollowUp{}, false, ledger.ErrForbidden
	}
	if !messageIDPattern.MatchString(in.MessageID) {
		return FollowUp{}, false, ledger.Invalid("message_id", "must be 1-200 characters of letters, digits, '.', '_', ':' or '-', starting with a letter or digit")
	}
	if _, err := parseDispatchMessage(in.Message); err != nil {
		return FollowUp{}, false, ledger.Invalid("message", "%v", err)
	}
	sum := sha256.Sum256(in.Message)
	var (
		out     FollowUp
		created bool
	)
	err := o.store.InTx(ctx, func(tx OrchestratorTx) error {
		created = false
		d, err := ledger.LockVisible(ctx, tx, p, id)
		if err != nil {
			return err
		}
		existing, err := tx.FollowUp(ctx, id, in.MessageID)
		if err == nil {
			if string(existing.RequestHash) != string(sum[:]) {
				return ledger.ErrIdempotencyMismatch
			}
			out = existing
			return nil
		} else if !errors.Is(err, ledger.ErrNotFound) {
			return err
		}
		switch {
		case d.TaskStatus.Terminal():
			return ledger.Conflict("task_terminal", "the remote task is %s and cannot be continued; send a refinement as a new delegation with context_from", d.TaskStatus)
		case d.TaskStatus != ledger.StatusInputRequired && d.TaskStatus != ledger.StatusAuthRequired:
			return ledger.Conflict("task_not_interrupted", "the remote task is %s; only input_required and auth_required tasks take a follow-up message", d.TaskStatus)
		case d.Remote.TaskID == "":
			return ledger.Conflict("task_not_dispatched", "the delegation has no remote task yet")
		}
		org, err := tx.Org(ctx, d.OrgID)
		if err != nil {
			return err
		}
		if org.AgentCardURL == "" {
			return ledger.Conflict("org_has_no_agent", "org %s has no registered agent card to send the message to", org.ID)
		}
		now := o.now()
		out = FollowUp{
			DelegationID: id, MessageID: in.MessageID, A2AMessageID: FollowUpMessageID(id, in.MessageID),
			RequestHash: sum[:], Payload: in.Message, Status: MessageQueued, CreatedAt: now,
		}
		if err := tx.InsertFollowUp(ctx, out); err != nil {
			return err
		}
		if _, err := ledger.Record(ctx, tx, d, ledger.Change{Type: ledger.EventTypeMessageQueued, Actor: p.Actor(), At: now, Data: ledger.MessageQueuedData{
			MessageID: in.MessageID, A2AMessageID: out.A2AMessageID, TaskID: d.Remote.TaskID, TaskStatus: string(d.TaskStatus),
		}}); err != nil {
			return err
		}
		created = true
		return tx.EnqueueOutbound(ctx, ledger.OutboundJob{DelegationID: id, Kind: ledger.OutboundMessage, RunAfter: now, At: now})
	})
	if err != nil {
		return FollowUp{}, false, err
	}
	if created && o.wake != nil {
		o.wake()
	}
	return out, created, nil
}
