package delegate

import (
	"context"

	"github.com/google/uuid"

	"github.com/quittance/quittance/delegate/a2a"
	"github.com/quittance/quittance/ledger"
)

// Sending follow-up messages: the "message" jobs of the outbox, which
// deliver what the Orchestrator queued (continue.go), oldest first.

// messageMaxAttempts bounds the delivery attempts of a follow-up message
// whose failures are transient.
const messageMaxAttempts = 10

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
		if a2a.Retryable(err) && j.Attempt < messageMaxAttempts {
			return w.retryAt(ctx, j, w.now().Add(w.backoff.Wait(j.Attempt)), errorText(err), nil)
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
		res, err := client.SendMessage(ctx, a2a.SendRequest{Message: msg, ReturnImmediately: true})
		switch {
		case err == nil:
			err = w.store.InTx(ctx, func(tx Tx) error { return w.recordFollowUpSent(ctx, tx, d.ID, m, res, iface) })
			if err != nil {
				return err
			}
		case a2a.Retryable(err) && j.Attempt < messageMaxAttempts:
			return w.retryAt(ctx, j, w.now().Add(w.backoff.Wait(j.Attempt)), errorText(err), func(tx Tx) error {
				return tx.Outbox().AttemptFollowUp(ctx, m, errorText(err), w.now())
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
	if err := tx.Outbox().FinishFollowUp(ctx, m, now); err != nil {
		return err
	}
	return record(ctx, tx, d, ledger.EventTypeMessageFailed, now, ledger.MessageFailedData{
		MessageID: m.MessageID, A2AMessageID: m.A2AMessageID, Error: problem,
	})
}

// recordFollowUpSent records a delivered follow-up message and what the
// remote answered: the task's status and snapshot.
func (w *Worker) recordFollowUpSent(ctx context.Context, tx Tx, id uuid.UUID, m FollowUp, res a2a.SendResult, iface a2a.AgentInterface) error {
	d, err := tx.DelegationForUpdate(ctx, id)
	if err != nil {
		return err
	}
	now := w.now()
	m.Status, m.Error = MessageSent, ""
	data := ledger.MessageSentData{MessageID: m.MessageID, A2AMessageID: m.A2AMessageID, TaskID: d.Remote.TaskID}
	if res.Task != nil {
		m.ResultState = taskStatus(res.Task.Status.State)
		data.TaskState = ptr(string(res.Task.Status.State))
	}
	if err := tx.Outbox().FinishFollowUp(ctx, m, now); err != nil {
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
