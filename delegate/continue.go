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
// A2A resumption rule). The answer is queued in the transaction that checks
// the task is interrupted, and sent by the outbox like every other A2A call
// ("message" jobs), in the order the answers were queued. A terminal task
// is never continued: a refinement is a new delegation (context_from).

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

// messageMaxAttempts bounds the delivery attempts of a follow-up message
// whose failures are transient.
const messageMaxAttempts = 10

// Continue queues an orchestrator's answer to the delegation's interrupted
// remote task. A repeat with the same message id and message returns the
// recorded follow-up and created false, sending nothing again; the same id
// with another message is ledger.ErrIdempotencyMismatch. A task that is
// terminal is a task_terminal conflict; one that is not input_required or
// auth_required is task_not_interrupted.
func (w *Worker) Continue(ctx context.Context, p ledger.Principal, id uuid.UUID, in ContinueInput) (FollowUp, bool, error) {
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
	err := w.store.InTx(ctx, func(tx Tx) error {
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
		now := w.now()
		out = FollowUp{
			DelegationID: id, MessageID: in.MessageID, A2AMessageID: FollowUpMessageID(id, in.MessageID),
			RequestHash: sum[:], Payload: in.Message, Status: MessageQueued, CreatedAt: now,
		}
		if err := tx.InsertFollowUp(ctx, out); err != nil {
			return err
		}
		if _, err := ledger.Record(ctx, tx, d, ledger.Change{Type: ledger.EventTypeMessageQueued, Actor: p.Actor(), At: now, Data: map[string]any{
			"message_id": in.MessageID, "a2a_message_id": out.A2AMessageID, "task_id": d.Remote.TaskID, "task_status": string(d.TaskStatus),
		}}); err != nil {
			return err
		}
		created = true
		return tx.EnqueueOutbound(ctx, ledger.OutboundJob{DelegationID: id, Kind: ledger.OutboundMessage, RunAfter: now, At: now})
	})
	if err != nil {
		return FollowUp{}, false, err
	}
	if created {
		w.Wake()
	}
	return out, created, nil
}

// FollowUp returns a follow-up message of a delegation the principal may
// see.
func (w *Worker) FollowUp(ctx context.Context, p ledger.Principal, id uuid.UUID, messageID string) (FollowUp, error) {
	if _, err := ledger.Visible(ctx, w.store, p, id); err != nil {
		return FollowUp{}, err
	}
	return w.store.FollowUp(ctx, id, messageID)
}

// TaskSnapshot returns the latest remote task snapshot of a delegation the
// principal may see; ledger.ErrNotFound when nothing was observed yet.
func (w *Worker) TaskSnapshot(ctx context.Context, p ledger.Principal, id uuid.UUID) (TaskSnapshot, error) {
	if _, err := ledger.Visible(ctx, w.store, p, id); err != nil {
		return TaskSnapshot{}, err
	}
	return w.store.TaskSnapshot(ctx, id)
}

// sendFollowUps sends a delegation's queued follow-up messages, oldest
// first. A transient failure retries the job (and holds back the later
// messages, to keep their order); a refusal fails that message and goes on.
func (w *Worker) sendFollowUps(ctx context.Context, j Job) error {
	d, err := w.store.Delegation(ctx, j.DelegationID)
	if err != nil {
		return err
	}
	queued, err := w.store.QueuedFollowUps(ctx, d.ID)
	if err != nil {
		return err
	}
	if len(queued) == 0 {
		return w.finish(ctx, j, "nothing_queued", nil)
	}
	org, err := w.store.Org(ctx, d.OrgID)
	if err != nil {
		return err
	}
	_, client, iface, err := w.agent(ctx, org)
	if err != nil {
		if Retryable(err) && j.Attempt < messageMaxAttempts {
			return w.retryAt(ctx, j, w.now().Add(w.backoff(j.Attempt)), errorText(err), nil)
		}
		return w.finish(ctx, j, "agent_unavailable", func(tx Tx) error {
			for _, m := range queued {
				if err := w.failFollowUp(ctx, tx, d, m, "agent unavailable: "+errorText(err)); err != nil {
					return err
				}
			}
			return nil
		})
	}
	for _, m := range queued {
		msg, err := parseDispatchMessage(m.Payload)
		if err != nil {
			if err := w.store.InTx(ctx, func(tx Tx) error { return w.failFollowUp(ctx, tx, d, m, errorText(err)) }); err != nil {
				return err
			}
			continue
		}
		msg.MessageID, msg.TaskID, msg.ContextID = m.A2AMessageID, d.Remote.TaskID, d.Remote.ContextID
		res, err := client.SendMessage(ctx, SendRequest{Message: msg, ReturnImmediately: true})
		switch {
		case err == nil:
			err = w.store.InTx(ctx, func(tx Tx) error { return w.recordFollowUpSent(ctx, tx, d.ID, m, res, iface) })
			if err != nil {
				return err
			}
		case Retryable(err) && j.Attempt < messageMaxAttempts:
			return w.retryAt(ctx, j, w.now().Add(w.backoff(j.Attempt)), errorText(err), func(tx Tx) error {
				return tx.AttemptFollowUp(ctx, m, errorText(err), w.now())
			})
		default:
			if err := w.store.InTx(ctx, func(tx Tx) error { return w.failFollowUp(ctx, tx, d, m, errorText(err)) }); err != nil {
				return err
			}
		}
	}
	return w.finish(ctx, j, "sent", nil)
}

// failFollowUp records that a follow-up message will not be delivered.
func (w *Worker) failFollowUp(ctx context.Context, tx Tx, d ledger.Delegation, m FollowUp, problem string) error {
	now := w.now()
	m.Status, m.Error = MessageFailed, problem
	if err := tx.FinishFollowUp(ctx, m, now); err != nil {
		return err
	}
	return record(ctx, tx, d, ledger.EventTypeMessageFailed, now, map[string]any{
		"message_id": m.MessageID, "a2a_message_id": m.A2AMessageID, "error": problem,
	})
}

// recordFollowUpSent records a delivered follow-up message and what the
// remote answered: the task's status and snapshot.
func (w *Worker) recordFollowUpSent(ctx context.Context, tx Tx, id uuid.UUID, m FollowUp, res SendResult, iface AgentInterface) error {
	d, err := tx.DelegationForUpdate(ctx, id)
	if err != nil {
		return err
	}
	now := w.now()
	m.Status, m.Error = MessageSent, ""
	data := map[string]any{"message_id": m.MessageID, "a2a_message_id": m.A2AMessageID, "task_id": d.Remote.TaskID}
	if res.Task != nil {
		m.ResultState = res.Task.Status.State
		data["task_state"] = string(res.Task.Status.State)
	}
	if err := tx.FinishFollowUp(ctx, m, now); err != nil {
		return err
	}
	if err := record(ctx, tx, d, ledger.EventTypeMessageSent, now, data); err != nil {
		return err
	}
	if res.Task == nil || res.Task.ID != d.Remote.TaskID {
		return nil
	}
	return w.recordTask(ctx, tx, d, *res.Task, "message", now)
}

// recordTask records, in tx with d locked, what a fetched or returned task
// says: its snapshot, its status (through ledger.ObserveTaskStatus) and
// when it was observed. source names where the task came from.
func (w *Worker) recordTask(ctx context.Context, tx Tx, d ledger.Delegation, task Task, source string, now time.Time) error {
	if err := w.putSnapshot(ctx, tx, d.ID, func(s TaskSnapshot) TaskSnapshot {
		return s.ApplyTask(task, source, now, w.cfg.Snapshot)
	}); err != nil {
		return err
	}
	if _, err := ledger.ObserveTaskStatus(ctx, tx, d, observation(task, source), workerActor, now); err != nil {
		return err
	}
	return tx.MarkObserved(ctx, d.ID, now)
}

// putSnapshot updates the delegation's task snapshot inside tx (the row is
// locked, so concurrent updates apply in turn).
func (w *Worker) putSnapshot(ctx context.Context, tx Tx, id uuid.UUID, fn func(TaskSnapshot) TaskSnapshot) error {
	cur, err := tx.TaskSnapshotForUpdate(ctx, id)
	if err != nil && !errors.Is(err, ledger.ErrNotFound) {
		return err
	}
	return tx.PutTaskSnapshot(ctx, id, fn(cur), w.now())
}
