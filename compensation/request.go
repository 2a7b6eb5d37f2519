package compensation

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/ledger"
)

// Compensation over A2A (ledger/DESIGN.md §4). Quittance asks a remote org's agent
// to compensate a task with an ordinary A2A message, and the agent answers
// with a task whose "compensation-receipt" artifact says what it did. This
// file builds the request and judges the receipt; the delegate package makes
// the calls.

// ExtensionURI is the A2A extension of compensation requests and receipts.
// Requests list it in Message.extensions and in the A2A-Extensions header;
// an agent card declaring it with params.atomicCancel true returns a receipt
// in its cancel replies.
const ExtensionURI = "https://quittance.dev/a2a/compensation/v1"

// ReceiptArtifactName is the name (or id) of the artifact that carries a
// compensation receipt as a data part.
const ReceiptArtifactName = "compensation-receipt"

// CompensationRequest is the content of a compensation request's data part,
// under the "compensationRequest" member.
type CompensationRequest struct {
	// TaskID is the remote task whose effects are to be compensated.
	TaskID string `json:"taskId"`
	// IdempotencyKey is the delegation's stable compensation key; the
	// receipt must echo it.
	IdempotencyKey string `json:"idempotencyKey"`
	// Reason says why compensation is sought ("task_canceled", "task_failed").
	Reason string `json:"reason"`
}

// RequestFor returns the compensation request for delegation d, whose
// remote task ended while the gate applied.
func RequestFor(d ledger.Delegation) CompensationRequest {
	key := d.Compensation.IdempotencyKey
	if key == "" {
		key = ledger.CompensationKey(d)
	}
	return CompensationRequest{TaskID: d.Remote.TaskID, IdempotencyKey: key, Reason: "task_" + string(d.TaskStatus)}
}

// Data returns the request as the JSON value of an A2A data part:
// {"compensationRequest": {"taskId", "idempotencyKey", "reason"}}.
func (r CompensationRequest) Data() json.RawMessage {
	b, err := json.Marshal(map[string]CompensationRequest{"compensationRequest": r})
	if err != nil {
		panic(fmt.Sprintf("encode compensation request: %v", err))
	}
	return b
}

// RequestMessageID is the A2A messageId of the round-th compensation request
// for delegation id. It depends on nothing else, so a request resent after a
// timeout or a crash carries the same id and the remote can deduplicate it;
// a new round starts only after the remote definitively failed the previous
// one.
func RequestMessageID(id uuid.UUID, round int) string {
	sum := sha256.Sum256([]byte("quittance/compensation-request/v1:" + id.String()))
	return fmt.Sprintf("qcr-%s-%d", hex.EncodeToString(sum[:12]), round)
}

// ReceiptOutcome is what the remote org says it did.
type ReceiptOutcome string

// The receipt outcomes.
const (
	// ReceiptCompensated: the effects of the task were reversed.
	ReceiptCompensated ReceiptOutcome = "compensated"
	// ReceiptNoEffects: the task committed no effects; only a verified
	// signed declaration (jws) makes this evidence.
	ReceiptNoEffects ReceiptOutcome = "no_effects"
	// ReceiptFailed: the remote tried and could not compensate (yet).
	ReceiptFailed ReceiptOutcome = "failed"
	// ReceiptNotSupported: the remote does not compensate this task.
	ReceiptNotSupported ReceiptOutcome = "not_supported"
)

// RemoteReceipt is a compensation receipt as the remote agent returned it,
// in a "compensation-receipt" artifact.
type RemoteReceipt struct {
	// Outcome is what the remote did.
	Outcome ReceiptOutcome `json:"outcome"`
	// ReceiptID is the remote's id of the receipt.
	ReceiptID string `json:"receiptId,omitempty"`
	// TaskID is the task the receipt is about: the delegated task.
	TaskID string `json:"taskId"`
	// IdempotencyKey echoes the request's key.
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
	// JWS is an optional compact JWS: a compensation-ack+jwt for
	// compensated, a no-compensation-required+jwt for no_effects.
	JWS string `json:"jws,omitempty"`
	// ReversedAmountMinor is how much of the hold a compensated receipt
	// says was reversed (a non-negative integer; nil: the whole hold).
	ReversedAmountMinor *int64 `json:"reversedAmountMinor,omitempty"`
	// Raw is the receipt's JSON as received.
	Raw json.RawMessage `json:"-"`
}

// maxReceiptBytes caps a receipt's JSON.
const maxReceiptBytes = 64 << 10

// ParseRemoteReceipt parses the data of a compensation-receipt part: the
// receipt object itself, or one wrapped as {"compensationReceipt": {...}}.
func ParseRemoteReceipt(data []byte) (RemoteReceipt, error) {
	if len(data) > maxReceiptBytes {
		return RemoteReceipt{}, fmt.Errorf("compensation receipt: more than %d bytes", maxReceiptBytes)
	}
	var wrapped struct {
		Receipt json.RawMessage `json:"compensationReceipt"`
	}
	if err := json.Unmarshal(data, &wrapped); err != nil {
		return RemoteReceipt{}, fmt.Errorf("compensation receipt: %w", err)
	}
	raw := data
	if len(wrapped.Receipt) > 0 && !bytes.Equal(wrapped.Receipt, []byte("null")) {
		raw = wrapped.Receipt
	}
	var r RemoteReceipt
	if err := json.Unmarshal(raw, &r); err != nil {
		return RemoteReceipt{}, fmt.Errorf("compensation receipt: %w", err)
	}
	switch r.Outcome {
	case ReceiptCompensated, ReceiptNoEffects, ReceiptFailed, ReceiptNotSupported:
	default:
		return RemoteReceipt{}, fmt.Errorf("compensation receipt: unknown outcome %q", r.Outcome)
	}
	if r.TaskID == "" {
		return RemoteReceipt{}, errors.New("compensation receipt: no taskId")
	}
	if n := r.ReversedAmountMinor; n != nil && (*n < 0 || r.Outcome != ReceiptCompensated) {
		return RemoteReceipt{}, errors.New("compensation receipt: reversedAmountMinor is a non-negative integer, on a compensated receipt only")
	}
	r.Raw = bytes.Clone(raw)
	return r, nil
}

// ReceiptInput is what a receipt is judged against.
type ReceiptInput struct {
	// Delegation is the delegation the receipt is for.
	Delegation ledger.Delegation
	// Org is the delegation's org, as registered.
	Org ledger.Org
	// Receipt is the receipt.
	Receipt RemoteReceipt
	// LedgerID is this ledger's id, the "aud" of a receipt's JWS.
	LedgerID string
	// Now is the time the receipt is judged at.
	Now time.Time
	// Atomic is set for a receipt in a cancel reply (atomic cancel and
	// compensate): no request carried the idempotency key, so the receipt's
	// key (and its jws's) is not checked.
	Atomic bool
}

// ReceiptVerdict is the judgment of a receipt.
type ReceiptVerdict struct {
	// Event is the obligation event the receipt proves —
	// ledger.EventCompensationAck or ledger.EventDeclarationVerified — or ""
	// when it proves nothing, in which case Problem says why.
	Event ledger.ObligationEvent
	// Claims are the verified claims of the receipt's JWS, if it had one.
	Claims *Claims
	// ReversedAmountMinor is how much of the hold a compensated receipt
	// proves reversed, checked against the hold; nil: the whole hold.
	ReversedAmountMinor *int64
	// Problem says why the receipt proves nothing; safe to record.
	Problem string
}

// JudgeReceipt decides what a receipt returned on Quittance's own call to the
// org's registered agent proves (ledger/DESIGN.md §3, §4). It must be about the
// delegation's task and echo its idempotency key. "compensated" is an ack:
// channel-authenticated, unless the org requires signed receipts, when a jws
// of type compensation-ack+jwt must verify against the org's keys. A jws
// that is present is always verified. "no_effects" proves something only
// with a jws of type no-compensation-required+jwt that verifies. "failed"
// and "not_supported" prove nothing. Nothing from an org whose identity is
// revoked proves anything.
func JudgeReceipt(in ReceiptInput) ReceiptVerdict {
	d, r := in.Delegation, in.Receipt
	refuse := func(format string, args ...any) ReceiptVerdict {
		return ReceiptVerdict{Problem: fmt.Sprintf(format, args...)}
	}
	if in.Org.IdentityRevoked() {
		return refuse("the org's identity is revoked; its receipts prove nothing")
	}
	if r.TaskID != d.Remote.TaskID {
		return refuse("the receipt is about another task")
	}
	// A receipt in a cancel reply answers no request, so it cannot echo the
	// delegation's key: it is bound to the task alone (taskId, and sub in
	// its jws) and to the channel of Quittance's own cancel call.
	key := ledger.CompensationKey(d)
	if !in.Atomic && r.IdempotencyKey != key {
		return refuse("the receipt does not carry the delegation's compensation idempotency key")
	}
	switch r.Outcome {
	case ReceiptCompensated:
		if r.JWS == "" {
			if in.Org.RequireSignedReceipts {
				return refuse("the org requires signed receipts and this one has no jws")
			}
			return reversedVerdict(in, ReceiptVerdict{Event: ledger.EventCompensationAck})
		}
		claims, problem := verifyReceiptJWS(in, KindAck)
		if problem != "" {
			return refuse("%s", problem)
		}
		if !in.Atomic && claims.IdempotencyKey != key {
			return refuse("the receipt's jws does not carry the delegation's compensation idempotency key")
		}
		return reversedVerdict(in, ReceiptVerdict{Event: ledger.EventCompensationAck, Claims: &claims})
	case ReceiptNoEffects:
		if r.JWS == "" {
			return refuse("a no_effects receipt proves nothing without a signed declaration")
		}
		claims, problem := verifyReceiptJWS(in, KindDeclaration)
		if problem != "" {
			return refuse("%s", problem)
		}
		return ReceiptVerdict{Event: ledger.EventDeclarationVerified, Claims: &claims}
	case ReceiptFailed, ReceiptNotSupported:
		return refuse("the remote answered %s", r.Outcome)
	}
	return refuse("unknown receipt outcome %q", r.Outcome)
}

func verifyReceiptJWS(in ReceiptInput, kind TokenKind) (Claims, string) {
	if len(in.Org.JWKS) == 0 {
		return Claims{}, "the org has no registered keys to verify the receipt's jws"
	}
	keys, err := ParseOrgJWKS(in.Org.JWKS)
	if err != nil {
		return Claims{}, "the org's registered keys do not parse"
	}
	claims, err := Verify(VerifyInput{
		Token: []byte(in.Receipt.JWS), Kind: kind, OrgID: in.Org.ID, Keys: keys, LedgerID: in.LedgerID, Now: in.Now,
	})
	if err != nil {
		var ref *RefusalError
		if errors.As(err, &ref) {
			return Claims{}, "the receipt's jws is refused: " + ref.Code
		}
		return Claims{}, "the receipt's jws cannot be verified"
	}
	if claims.Subject != in.Delegation.Remote.TaskID {
		return Claims{}, "the receipt's jws is about another task"
	}
	return claims, ""
}

// ApplyRemoteReceipt records, inside tx, a receipt that JudgeReceipt found to
// prove v.Event, and returns the delegation after it. The receipt is stored
// on the delegation (compensation.receipt), its jws verbatim as the event's
// evidence, and a verified jws's jti as used by the org (a jws already used
// for another receipt is refused with token_replayed). A pending write-off
// is voided. When the obligation has already ended, the receipt is recorded
// as late_evidence and not applied; when it is not waiting for compensation,
// the receipt is refused with evidence_not_expected.
func (s *Service) ApplyRemoteReceipt(ctx context.Context, tx ReceiptTx, d ledger.Delegation, r RemoteReceipt, v ReceiptVerdict, actor string, now time.Time) (ledger.Delegation, error) {
	if v.Event != ledger.EventCompensationAck && v.Event != ledger.EventDeclarationVerified {
		return ledger.Delegation{}, fmt.Errorf("apply compensation receipt: verdict proves nothing (%s)", v.Problem)
	}
	data := map[string]any{"channel": "a2a", "outcome": string(r.Outcome), "receipt_id": r.ReceiptID, "task_id": r.TaskID}
	if v.Claims != nil {
		sum := sha256.Sum256([]byte(r.JWS))
		for k, val := range evidenceData(v.Claims.Kind, *v.Claims, sum[:]) {
			data[k] = val
		}
		if _, err := claimJTI(ctx, tx, d, v.Claims.JTI, sum[:], now); err != nil {
			return ledger.Delegation{}, err
		}
	}
	typ := ledger.EventTypeCompensationAcked
	if v.Event == ledger.EventDeclarationVerified {
		typ = ledger.EventTypeNoCompensationDeclared
	}
	if _, _, err := ledger.NextObligation(d.ObligationState, v.Event); err != nil {
		if !d.ObligationState.Terminal() {
			return ledger.Delegation{}, Refuse(CodeEvidenceNotExpected, fmt.Sprintf("the obligation is %s and not waiting for compensation evidence", d.ObligationState))
		}
		data["obligation_state"] = string(d.ObligationState)
		data["contradicts_write_off"] = d.ObligationState == ledger.ObligationWrittenOff
		_, err := ledger.Record(ctx, tx, d, ledger.Change{Type: ledger.EventTypeLateEvidence, Actor: actor, At: now, Data: data, Evidence: r.JWS})
		return d, err
	}
	d.Compensation.Receipt = r.Raw
	return s.dischargeWithPending(ctx, tx, d, ledger.Change{
		Type: typ, Actor: actor, At: now, Obligation: v.Event, Data: data, Evidence: r.JWS,
		ReversedAmountMinor: v.ReversedAmountMinor,
	})
}
