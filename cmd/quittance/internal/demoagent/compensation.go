package demoagent

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"
)

// Compensation receipt outcomes (ledger/DESIGN.md §4).
const (
	// OutcomeCompensated means the effects of the task were reversed.
	OutcomeCompensated = "compensated"
	// OutcomeNoEffects means the task committed no effects.
	OutcomeNoEffects = "no_effects"
	// OutcomeFailed means compensation could not be done now.
	OutcomeFailed = "failed"
	// OutcomePending means the reversal is under way; a final receipt
	// follows on the same compensation task.
	OutcomePending = "pending"
	// OutcomeNotSupported means the agent does not compensate the task.
	OutcomeNotSupported = "not_supported"
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

// JWS "typ" values of the receipts' tokens, as compensation.Verify expects.
const (
	typAck         = "compensation-ack+jwt"
	typDeclaration = "no-compensation-required+jwt"
)

// ReceiptArtifactName is the name of the artifact that carries a
// compensation receipt.
const ReceiptArtifactName = "compensation-receipt"

// tokenLifetime is the validity of a receipt's JWS (exp - iat).
const tokenLifetime = 5 * time.Minute

// resignAfter is the age after which a repeated request gets the same
// receipt with a freshly signed JWS, so a retry never receives an expired
// token.
const resignAfter = tokenLifetime / 2

type compensationRequest struct {
	TaskID         string `json:"taskId"`
	IdempotencyKey string `json:"idempotencyKey"`
	Reason         string `json:"reason"`
}

// compensationRequestOf finds the compensationRequest data part of a
// message; ok is false when there is none.
func compensationRequestOf(m message) (req compensationRequest, ok bool, err error) {
	for _, p := range m.Parts {
		if len(p.Data) == 0 {
			continue
		}
		var body struct {
			CompensationRequest *compensationRequest `json:"compensationRequest"`
		}
		if json.Unmarshal(p.Data, &body) != nil || body.CompensationRequest == nil {
			continue
		}
		req = *body.CompensationRequest
		if req.TaskID == "" && len(m.ReferenceTaskIDs) > 0 {
			req.TaskID = m.ReferenceTaskIDs[0]
		}
		if req.TaskID == "" || req.IdempotencyKey == "" {
			return req, true, errParams("compensationRequest needs taskId and idempotencyKey")
		}
		return req, true, nil
	}
	return req, false, nil
}

// receipt is the result of a compensation, kept per idempotency key.
type receipt struct {
	Outcome        string `json:"outcome"`
	ReceiptID      string `json:"receiptId"`
	TaskID         string `json:"taskId"`
	IdempotencyKey string `json:"idempotencyKey"`
	JWS            string `json:"jws,omitempty"`
	Reason         string `json:"reason,omitempty"`

	signedAt time.Time
}

func (r *receipt) artifact() artifact {
	return artifact{
		ArtifactID: "receipt-" + r.ReceiptID, Name: ReceiptArtifactName,
		Description: "Compensation receipt for task " + r.TaskID + ".",
		Parts:       []part{dataPart(r)},
		Extensions:  []string{ExtensionURI},
	}
}

// compensate answers a compensation request with a task that is already
// completed and carries the receipt. The caller holds a.mu.
func (a *Agent) compensate(m message, req compensationRequest, push *pushConfig) (*task, error) {
	target := a.tasks[req.TaskID]
	if target == nil {
		return nil, errTaskNotFound(req.TaskID)
	}
	var rc *receipt
	_, done := a.receipts[req.IdempotencyKey]
	switch {
	case !terminal(target.status.State):
		// Effects of a running task cannot be reversed; the requester
		// should cancel first. Not kept: a later request may succeed.
		rc = &receipt{Outcome: OutcomeFailed, ReceiptID: newID("rcpt-"), TaskID: req.TaskID, IdempotencyKey: req.IdempotencyKey}
	case a.cfg.Compensation == CompensationNotSupported:
		rc = &receipt{Outcome: OutcomeNotSupported, ReceiptID: newID("rcpt-"), TaskID: req.TaskID, IdempotencyKey: req.IdempotencyKey,
			Reason: "purchase orders confirmed in the supplier's ERP cannot be reversed"}
	case a.cfg.Compensation == CompensationPending && !done:
		return a.compensateLater(m, req, target, push), nil
	default:
		var err error
		if rc, err = a.issueReceipt(req.TaskID, req.IdempotencyKey); err != nil {
			return nil, err
		}
	}
	contextID := m.ContextID
	if contextID == "" {
		contextID = target.contextID
	}
	t := a.newTask(contextID, m, push)
	a.addArtifact(t, rc.artifact())
	text := fmt.Sprintf("Compensation %s for task %s (receipt %s).", rc.Outcome, rc.TaskID, rc.ReceiptID)
	if po := a.orders[req.TaskID]; po != nil && po.Reversed {
		text = fmt.Sprintf("Purchase order %s reversed; compensation receipt %s.", po.ID, rc.ReceiptID)
	}
	switch rc.Outcome {
	case OutcomeFailed:
		a.setStatus(t, stateFailed, "Task "+rc.TaskID+" is still running; cancel it before requesting compensation.")
	case OutcomeNotSupported:
		a.setStatus(t, stateCompleted, "Compensation not supported for task "+rc.TaskID+": "+rc.Reason+".")
	default:
		a.setStatus(t, stateCompleted, text)
	}
	return t, nil
}

// compensateLater answers a compensation request with a working task whose
// receipt is pending, and completes it with the final receipt after
// PendingDelay. A request with the same messageId meanwhile finds the same
// task. The caller holds a.mu.
func (a *Agent) compensateLater(m message, req compensationRequest, target *task, push *pushConfig) *task {
	contextID := m.ContextID
	if contextID == "" {
		contextID = target.contextID
	}
	t := a.newTask(contextID, m, push)
	pending := &receipt{Outcome: OutcomePending, ReceiptID: newID("rcpt-"), TaskID: req.TaskID, IdempotencyKey: req.IdempotencyKey,
		Reason: "reversal of the purchase order is under way"}
	a.addArtifact(t, pending.artifact())
	a.setStatus(t, stateWorking, "Reversing the purchase order of task "+req.TaskID+"; the receipt follows.")
	id := t.id
	t.timer = time.AfterFunc(a.cfg.PendingDelay, func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		t := a.tasks[id]
		if t == nil || t.status.State != stateWorking || a.closed {
			return
		}
		rc, err := a.issueReceipt(req.TaskID, req.IdempotencyKey)
		if err != nil {
			a.setStatus(t, stateFailed, "Compensation failed: "+err.Error())
			return
		}
		a.addArtifact(t, rc.artifact())
		a.setStatus(t, stateCompleted, fmt.Sprintf("Compensation %s for task %s (receipt %s).", rc.Outcome, rc.TaskID, rc.ReceiptID))
	})
	return t
}

// issueReceipt returns the receipt for an idempotency key, reversing the
// task's purchase order the first time. A repeat with the same key returns
// the same receipt (re-signed once its token is half-way to expiry); the
// same key for another task is refused. The caller holds a.mu.
func (a *Agent) issueReceipt(taskID, key string) (*receipt, error) {
	now := a.cfg.Now()
	if rc, ok := a.receipts[key]; ok {
		if rc.TaskID != taskID {
			return nil, errParams("idempotencyKey was already used for another task")
		}
		if now.Sub(rc.signedAt) > resignAfter {
			if err := a.sign(rc, now); err != nil {
				return nil, err
			}
		}
		return rc, nil
	}
	rc := &receipt{Outcome: OutcomeNoEffects, ReceiptID: newID("rcpt-"), TaskID: taskID, IdempotencyKey: key}
	if po := a.orders[taskID]; po != nil {
		rc.Outcome = OutcomeCompensated
		if !po.Reversed {
			po.Reversed, po.ReversedAt = true, now
		}
	}
	if err := a.sign(rc, now); err != nil {
		return nil, err
	}
	a.receipts[key] = rc
	return rc, nil
}

// sign sets a receipt's JWS: a compensation ack for a compensated task, a
// no-compensation-required declaration for one without effects.
func (a *Agent) sign(rc *receipt, now time.Time) error {
	typ := typDeclaration
	claims := map[string]any{
		"iss": a.cfg.OrgID, "aud": a.cfg.LedgerID, "sub": rc.TaskID, "jti": rand.Text(),
		"iat": now.Unix(), "exp": now.Add(tokenLifetime).Unix(),
	}
	if rc.Outcome == OutcomeCompensated {
		typ = typAck
		claims["idempotency_key"] = rc.IdempotencyKey
		claims["receipt_id"] = rc.ReceiptID
	}
	jws, err := signCompact(a.key, map[string]any{"alg": "EdDSA", "kid": a.kid, "typ": typ}, claims)
	if err != nil {
		return err
	}
	rc.JWS, rc.signedAt = jws, now
	return nil
}

// signCompact returns the compact JWS of claims under header, signed with
// Ed25519.
func signCompact(key ed25519.PrivateKey, header, claims map[string]any) (string, error) {
	h, err := json.Marshal(header)
	if err != nil {
		return "", fmt.Errorf("encode JWS header: %w", err)
	}
	c, err := json.Marshal(claims)
	if err != nil {
		return "", fmt.Errorf("encode JWS claims: %w", err)
	}
	input := base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(c)
	return input + "." + base64.RawURLEncoding.EncodeToString(ed25519.Sign(key, []byte(input))), nil
}

// atomicCancelKey is the idempotency key of a receipt issued with a cancel:
// metadata[ExtensionURI].idempotencyKey of the CancelTask request when the
// requester sent one, else "cancel:" and the task id.
func atomicCancelKey(metadata json.RawMessage, taskID string) string {
	var md map[string]struct {
		IdempotencyKey string `json:"idempotencyKey"`
	}
	if json.Unmarshal(metadata, &md) == nil {
		if k := md[ExtensionURI].IdempotencyKey; k != "" {
			return k
		}
	}
	return "cancel:" + taskID
}
