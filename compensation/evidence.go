package compensation

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/quittance/quittance/ledger"
)

// CodeEvidenceConflict is the refusal code of verified evidence that carries
// the delegation's compensation idempotency key with another payload than
// the evidence already accepted for that key: another receipt id, or the
// other kind (an ack after a declaration).
const CodeEvidenceConflict = "evidence_conflict"

// Evidence is one piece of compensation evidence as a channel received it,
// already verified by that channel (Verify for a posted token, JudgeReceipt
// for an A2A receipt).
type Evidence struct {
	// Kind is what the evidence proves: ledger.EventCompensationAck or
	// ledger.EventDeclarationVerified.
	Kind ledger.ObligationEvent
	// Channel is how it arrived.
	Channel ledger.EvidenceChannel
	// Claims are the verified claims of its signed token (a posted token,
	// or a receipt's jws); nil for a channel-authenticated receipt.
	Claims *Claims
	// Receipt is the A2A receipt it came in; nil for a posted token.
	Receipt *RemoteReceipt
	// Token is the signed token verbatim; empty when there is none.
	Token []byte
	// Actor is who the evidence is recorded as coming from.
	Actor string
	// ReversedAmountMinor is how much of the hold an ack says was
	// reversed (the token's reversed_amount_minor claim, or the receipt's
	// reversedAmountMinor as JudgeReceipt settled it); nil: the whole hold.
	ReversedAmountMinor *int64
}

// ApplyEvidence is the one evidence path (ledger/DESIGN.md §3): every
// channel — signed tokens posted over HTTP (Submit), receipts on
// Quittance's own A2A compensation requests and receipts in a cancel reply
// (the delegate workers) — hands its verified evidence to it, inside the
// transaction that locked d. In this order, so that every refusal comes
// before anything is written and a caller may go on with its transaction:
//
//  1. Correlation: the evidence must be about d's task (sub, taskId), from
//     d's org (iss), and carry d's compensation idempotency key (an ack's
//     claim, a requested receipt's echo); a receipt in a cancel reply
//     answers no request and is bound to the task alone.
//  2. The jti of a signed token: the identical token accepted before is a
//     duplicate; another token reusing the jti is token_replayed.
//  3. Idempotency on the compensation idempotency key: evidence already
//     accepted for the key with the same payload (kind and receipt id) is
//     a duplicate — the original result, nothing changes; with another
//     payload it is evidence_conflict, which the caller records as an
//     evidence_conflict event.
//  4. The jti is claimed.
//  5. The obligation decides: waiting for compensation
//     (revocation_pending_compensation, compensation_unconfirmed), the
//     evidence is applied through ledger.Apply and a pending write-off is
//     voided; held (the task has not ended as far as the ledger knows), it
//     is stored as received and applied when the gating terminal status
//     is observed (ledger.ObserveTaskStatus); ended, it is recorded as
//     late_evidence and never applied; escalated, it is refused
//     (evidence_not_expected).
//
// Every outcome but late evidence leaves the evidence in the
// compensation_evidence row of d, which is what makes step 3 possible.
func (s *Service) ApplyEvidence(ctx context.Context, tx ReceiptTx, d ledger.Delegation, ev Evidence, now time.Time) (EvidenceResult, error) {
	if ev.Kind != ledger.EventCompensationAck && ev.Kind != ledger.EventDeclarationVerified {
		return EvidenceResult{}, fmt.Errorf("apply evidence: %q proves nothing", ev.Kind)
	}
	if err := correlate(d, ev); err != nil {
		return EvidenceResult{}, err
	}
	if ev.Kind == ledger.EventCompensationAck {
		if err := CheckReversedAmount(d, ev.ReversedAmountMinor); err != nil {
			return EvidenceResult{}, err
		}
	}
	var sum []byte
	if ev.Claims != nil {
		s := sha256.Sum256(ev.Token)
		sum = s[:]
		used, err := tx.UsedToken(ctx, d.OrgID, ev.Claims.JTI)
		switch {
		case err == nil && used.DelegationID == d.ID && bytes.Equal(used.TokenSHA256, sum):
			return EvidenceResult{Delegation: d, Outcome: OutcomeDuplicate}, nil
		case err == nil:
			return EvidenceResult{}, Refuse(CodeTokenReplayed, "this jti was already used by the issuing org")
		case !errors.Is(err, ledger.ErrNotFound):
			return EvidenceResult{}, err
		}
	}
	payload := payloadSum(ev)
	stored, err := tx.CompensationEvidence(ctx, d.ID)
	found := err == nil
	if err != nil && !errors.Is(err, ledger.ErrNotFound) {
		return EvidenceResult{}, err
	}
	if found && !bytes.Equal(stored.PayloadSHA256, payload) {
		return EvidenceResult{}, Refuse(CodeEvidenceConflict, fmt.Sprintf(
			"evidence with this compensation idempotency key was already accepted (%s, %s) and says something else",
			stored.Kind, stored.Status))
	}
	_, _, transErr := ledger.NextObligation(d.ObligationState, ev.Kind)
	early := d.ObligationState == ledger.ObligationHeld
	if !found && transErr != nil && !early && !d.ObligationState.Terminal() {
		return EvidenceResult{}, Refuse(CodeEvidenceNotExpected, fmt.Sprintf("the obligation is %s and not waiting for compensation evidence", d.ObligationState))
	}
	if ev.Claims != nil {
		inserted, err := tx.InsertUsedToken(ctx, UsedToken{OrgID: d.OrgID, JTI: ev.Claims.JTI, DelegationID: d.ID, TokenSHA256: sum, UsedAt: now})
		if err != nil {
			return EvidenceResult{}, err
		}
		if !inserted {
			return EvidenceResult{}, Refuse(CodeTokenReplayed, "this jti was already used by the issuing org")
		}
	}
	if found {
		return EvidenceResult{Delegation: d, Outcome: OutcomeDuplicate}, nil
	}

	data := evidenceDataOf(ev, sum)
	if transErr != nil && !early {
		// Ended: recorded and surfaced, never applied.
		data["obligation_state"] = string(d.ObligationState)
		contradicts := d.ObligationState == ledger.ObligationWrittenOff
		data["contradicts_write_off"] = contradicts
		if _, err := ledger.Record(ctx, tx, d, ledger.Change{
			Type: ledger.EventTypeLateEvidence, Actor: ev.Actor, At: now, Data: data, Evidence: string(ev.Token),
		}); err != nil {
			return EvidenceResult{}, err
		}
		return EvidenceResult{Delegation: d, Outcome: OutcomeLateEvidence, ContradictsWriteOff: contradicts}, nil
	}
	receipt, err := receiptJSON(ev, sum, now)
	if err != nil {
		return EvidenceResult{}, err
	}
	dataJSON, err := json.Marshal(data)
	if err != nil {
		return EvidenceResult{}, err
	}
	row := ledger.StoredEvidence{
		DelegationID: d.ID, IdempotencyKey: ledger.CompensationKey(d), Kind: ev.Kind, Channel: ev.Channel,
		PayloadSHA256: payload, Status: ledger.EvidenceApplied, Receipt: receipt, Data: dataJSON,
		Token: string(ev.Token), ReceivedAt: now, DecidedAt: now,
	}
	if early {
		row.Status, row.DecidedAt = ledger.EvidenceReceived, time.Time{}
		if err := tx.PutCompensationEvidence(ctx, row); err != nil {
			return EvidenceResult{}, err
		}
		if _, err := ledger.Record(ctx, tx, d, ledger.Change{
			Type: ledger.EventTypeEvidenceReceived, Actor: ev.Actor, At: now, Data: data, Evidence: string(ev.Token),
		}); err != nil {
			return EvidenceResult{}, err
		}
		return EvidenceResult{Delegation: d, Outcome: OutcomeReceived}, nil
	}
	if err := tx.PutCompensationEvidence(ctx, row); err != nil {
		return EvidenceResult{}, err
	}
	d.Compensation.Receipt = receipt
	typ := ledger.EventTypeCompensationAcked
	if ev.Kind == ledger.EventDeclarationVerified {
		typ = ledger.EventTypeNoCompensationDeclared
	}
	d, err = s.dischargeWithPending(ctx, tx, d, ledger.Change{
		Type: typ, Actor: ev.Actor, At: now, Obligation: ev.Kind, Data: data, Evidence: string(ev.Token),
		ReversedAmountMinor: ev.ReversedAmountMinor,
	})
	if err != nil {
		return EvidenceResult{}, err
	}
	return EvidenceResult{Delegation: d, Outcome: OutcomeApplied}, nil
}

// correlate checks that ev is about d: its task, its org and, where the
// evidence answers Quittance's request, its compensation idempotency key.
func correlate(d ledger.Delegation, ev Evidence) error {
	key := ledger.CompensationKey(d)
	if c := ev.Claims; c != nil {
		if c.Subject != d.Remote.TaskID || c.Issuer != d.OrgID {
			return Refuse(CodeTokenDelegationUnknown, "no delegation matches the token's iss and sub")
		}
		if ev.Channel != ledger.ChannelAtomicCancel && (c.Kind == KindAck || c.IdempotencyKey != "") && c.IdempotencyKey != key {
			return Refuse(CodeTokenIdempotencyKeyMismatch, "claim idempotency_key is not this delegation's compensation idempotency key")
		}
	}
	if r := ev.Receipt; r != nil {
		if r.TaskID != d.Remote.TaskID {
			return Refuse(CodeTokenDelegationUnknown, "the receipt is about another task")
		}
		if ev.Channel != ledger.ChannelAtomicCancel && r.IdempotencyKey != key {
			return Refuse(CodeTokenIdempotencyKeyMismatch, "the receipt does not carry the delegation's compensation idempotency key")
		}
	}
	if ev.Claims == nil && ev.Receipt == nil {
		return Refuse(CodeTokenMalformed, "evidence carries neither a signed token nor a receipt")
	}
	return nil
}

// receiptID is the receipt id the evidence asserts: the signed claim's,
// else the A2A receipt's.
func receiptID(ev Evidence) string {
	if ev.Claims != nil && ev.Claims.ReceiptID != "" {
		return ev.Claims.ReceiptID
	}
	if ev.Receipt != nil {
		return ev.Receipt.ReceiptID
	}
	return ""
}

// payloadSum is the sha256 of what ev asserts — its kind and receipt id —
// so the same assertion re-signed with a new jti, or sent again on another
// channel, has the same payload.
func payloadSum(ev Evidence) []byte {
	asserted := map[string]string{"kind": string(ev.Kind), "receipt_id": receiptID(ev)}
	if n := ev.ReversedAmountMinor; n != nil {
		asserted["reversed_amount_minor"] = strconv.FormatInt(*n, 10)
	}
	b, err := json.Marshal(asserted)
	if err != nil {
		panic(fmt.Sprintf("encode evidence payload: %v", err))
	}
	sum := sha256.Sum256(b)
	return sum[:]
}

// evidenceDataOf is the event data of evidence: what the token claims (as
// evidenceData), and for a receipt its outcome, id and task.
func evidenceDataOf(ev Evidence, sum []byte) map[string]any {
	data := map[string]any{"channel": string(ev.Channel)}
	if r := ev.Receipt; r != nil {
		data["outcome"], data["receipt_id"], data["task_id"] = string(r.Outcome), r.ReceiptID, r.TaskID
	}
	if ev.Claims != nil {
		for k, v := range evidenceData(ev.Claims.Kind, *ev.Claims, sum) {
			data[k] = v
		}
	}
	if n := ev.ReversedAmountMinor; n != nil {
		data[ledger.ReversedAmountKey] = *n
	}
	return data
}

// receiptJSON is what the delegation shows as compensation.receipt: an A2A
// receipt as the agent returned it, or a posted token's Receipt.
func receiptJSON(ev Evidence, sum []byte, now time.Time) (json.RawMessage, error) {
	if ev.Receipt != nil {
		return ev.Receipt.Raw, nil
	}
	return json.Marshal(Receipt{
		Kind: string(ev.Claims.Kind), ReceiptID: ev.Claims.ReceiptID, JTI: ev.Claims.JTI,
		TokenSHA256: hex.EncodeToString(sum), ReceivedAt: now,
	})
}

// RecordRefusedEvidence appends, in tx, the event a refusal of verified
// evidence leaves on d's chain: evidence_conflict for a conflict, with the
// verified token, so finance can see what the org said the second time;
// receipt_refused for any other refusal of an A2A receipt. A posted token
// refused for another reason is no event: Submit counts it (see
// ledger.TokenRefusal). The
// caller runs it after the refused transaction rolled back, or in the same
// one (ApplyEvidence writes nothing before it refuses).
func RecordRefusedEvidence(ctx context.Context, tx ledger.EventAppender, d ledger.Delegation, ev Evidence, ref *RefusalError, now time.Time) error {
	data := map[string]any{"code": ref.Code, "detail": ref.Detail, "channel": string(ev.Channel), "kind": string(ev.Kind)}
	c := ledger.Change{Type: ledger.EventTypeReceiptRefused, Actor: ev.Actor, At: now, Data: data}
	if ref.Code == CodeEvidenceConflict {
		c.Type, c.Evidence = ledger.EventTypeEvidenceConflict, string(ev.Token)
		data["receipt_id"] = receiptID(ev)
		if len(ev.Token) > 0 {
			sum := sha256.Sum256(ev.Token)
			data["token_sha256"] = hex.EncodeToString(sum[:])
		}
	}
	_, err := ledger.Record(ctx, tx, d, c)
	return err
}
