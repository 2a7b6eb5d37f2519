package demoagent

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/quittance/quittance/compensation/kit"
)

// The compensation modes of Config.Compensation.
const (
	// CompensationImmediate reverses the purchase order at once.
	CompensationImmediate = "immediate"
	// CompensationPending answers pending, then the final receipt after
	// Config.PendingDelay.
	CompensationPending = "pending"
	// CompensationNotSupported answers not_supported.
	CompensationNotSupported = "not_supported"
)

// DefaultPendingDelay is how long a pending compensation works unless
// Config.PendingDelay says otherwise.
const DefaultPendingDelay = 5 * time.Second

// resignAfter is the age after which a repeated request gets the same
// receipt with a freshly signed JWS, so a retry never receives an expired
// token.
const resignAfter = kit.TokenLifetime / 2

// compensationRequestOf finds the compensation request of a message with
// the kit a remote org would use (kit.RequestFrom), reading the message as
// the a2a-go v2 type the kit takes; ok is false when there is none.
func compensationRequestOf(m message) (req kit.Request, ok bool, err error) {
	if !slices.ContainsFunc(m.Parts, func(p part) bool { return len(p.Data) > 0 }) {
		return kit.Request{}, false, nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return kit.Request{}, false, err
	}
	var msg a2a.Message
	if err := json.Unmarshal(b, &msg); err != nil {
		return kit.Request{}, false, errParams("message: " + err.Error())
	}
	req, ok, err = kit.RequestFrom(&msg)
	if err != nil {
		return req, true, errParams(err.Error())
	}
	return req, ok, nil
}

// receipt is the result of a compensation, kept per idempotency key.
type receipt struct {
	kit.Receipt

	signedAt time.Time
}

func (r *receipt) artifact() artifact {
	return artifact{
		ArtifactID: "receipt-" + r.ReceiptID, Name: kit.ReceiptArtifactName,
		Description: "Compensation receipt for task " + string(r.TaskID) + ".",
		Parts:       []part{dataPart(r.Receipt)},
		Extensions:  []string{kit.URI},
	}
}

// compensate answers a compensation request with a task that is already
// completed and carries the receipt. The caller holds a.mu.
func (a *Agent) compensate(m message, req kit.Request, push *pushConfig) (*task, error) {
	taskID := string(req.TaskID)
	target := a.tasks[taskID]
	if target == nil {
		return nil, errTaskNotFound(taskID)
	}
	var (
		rc  *receipt
		err error
	)
	_, done := a.receipts[req.IdempotencyKey]
	switch {
	case !terminal(target.status.State):
		// Effects of a running task cannot be reversed; the requester
		// should cancel first. Not kept: a later request may succeed.
		rc, err = a.newReceipt(req, kit.Result{Outcome: kit.Failed, ReceiptID: newID("rcpt-"),
			Reason: "the task is still running; cancel it first"})
	case a.cfg.Compensation == CompensationNotSupported:
		rc, err = a.newReceipt(req, kit.Result{Outcome: kit.NotSupported, ReceiptID: newID("rcpt-"),
			Reason: "purchase orders confirmed in the supplier's ERP cannot be reversed"})
	case a.cfg.Compensation == CompensationPending && !done:
		return a.compensateLater(m, req, target, push)
	default:
		rc, err = a.issueReceipt(req)
	}
	if err != nil {
		return nil, err
	}
	contextID := m.ContextID
	if contextID == "" {
		contextID = target.contextID
	}
	t := a.newTask(contextID, m, push)
	a.addArtifact(t, rc.artifact())
	text := fmt.Sprintf("Compensation %s for task %s (receipt %s).", rc.Outcome, taskID, rc.ReceiptID)
	if po := a.orders[taskID]; po != nil && po.Reversed {
		text = fmt.Sprintf("Purchase order %s reversed; compensation receipt %s.", po.ID, rc.ReceiptID)
	}
	switch rc.Outcome {
	case kit.Failed:
		a.setStatus(t, stateFailed, "Task "+taskID+" is still running; cancel it before requesting compensation.")
	case kit.NotSupported:
		a.setStatus(t, stateCompleted, "Compensation not supported for task "+taskID+": "+rc.Reason+".")
	default:
		a.setStatus(t, stateCompleted, text)
	}
	return t, nil
}

// compensateLater answers a compensation request with a working task whose
// receipt is pending, and completes it with the final receipt after
// PendingDelay. A request with the same messageId meanwhile finds the same
// task. The caller holds a.mu.
func (a *Agent) compensateLater(m message, req kit.Request, target *task, push *pushConfig) (*task, error) {
	pending, err := a.newReceipt(req, kit.Result{Outcome: kit.Pending, ReceiptID: newID("rcpt-"),
		Reason: "reversal of the purchase order is under way"})
	if err != nil {
		return nil, err
	}
	contextID := m.ContextID
	if contextID == "" {
		contextID = target.contextID
	}
	t := a.newTask(contextID, m, push)
	a.addArtifact(t, pending.artifact())
	a.setStatus(t, stateWorking, "Reversing the purchase order of task "+string(req.TaskID)+"; the receipt follows.")
	id := t.id
	t.timer = time.AfterFunc(a.cfg.PendingDelay, func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		t := a.tasks[id]
		if t == nil || t.status.State != stateWorking || a.closed {
			return
		}
		rc, err := a.issueReceipt(req)
		if err != nil {
			a.setStatus(t, stateFailed, "Compensation failed: "+err.Error())
			return
		}
		a.addArtifact(t, rc.artifact())
		a.setStatus(t, stateCompleted, fmt.Sprintf("Compensation %s for task %s (receipt %s).", rc.Outcome, rc.TaskID, rc.ReceiptID))
	})
	return t, nil
}

// issueReceipt returns the receipt for an idempotency key, reversing the
// task's purchase order the first time: compensated when the task placed
// one, no_effects when it did not. A repeat with the same key returns the
// same receipt (re-signed once its token is half-way to expiry); the same
// key for another task is refused. The caller holds a.mu.
func (a *Agent) issueReceipt(req kit.Request) (*receipt, error) {
	if rc, ok := a.receipts[req.IdempotencyKey]; ok {
		if rc.TaskID != req.TaskID {
			return nil, errParams("idempotencyKey was already used for another task")
		}
		if a.cfg.Now().Sub(rc.signedAt) > resignAfter {
			fresh, err := a.newReceipt(req, kit.Result{Outcome: rc.Outcome, ReceiptID: rc.ReceiptID})
			if err != nil {
				return nil, err
			}
			*rc = *fresh
		}
		return rc, nil
	}
	res := kit.Result{Outcome: kit.NoEffects, ReceiptID: newID("rcpt-")}
	if po := a.orders[string(req.TaskID)]; po != nil {
		res.Outcome = kit.Compensated
		if !po.Reversed {
			po.Reversed, po.ReversedAt = true, a.cfg.Now()
		}
	}
	rc, err := a.newReceipt(req, res)
	if err != nil {
		return nil, err
	}
	a.receipts[req.IdempotencyKey] = rc
	return rc, nil
}

// newReceipt is the receipt of res for req, made by the org's kit.Signer:
// a compensated receipt carries a signed ack, a no_effects one a signed
// declaration, the others no token.
func (a *Agent) newReceipt(req kit.Request, res kit.Result) (*receipt, error) {
	r, err := a.signer.Receipt(req, res)
	if err != nil {
		return nil, err
	}
	return &receipt{Receipt: r, signedAt: a.cfg.Now()}, nil
}

// atomicCancelKey is the idempotency key of a receipt issued with a cancel:
// metadata[kit.URI].idempotencyKey of the CancelTask request when the
// requester sent one, else "cancel:" and the task id.
func atomicCancelKey(metadata json.RawMessage, taskID string) string {
	var md map[string]struct {
		IdempotencyKey string `json:"idempotencyKey"`
	}
	if json.Unmarshal(metadata, &md) == nil {
		if k := md[kit.URI].IdempotencyKey; k != "" {
			return k
		}
	}
	return "cancel:" + taskID
}
