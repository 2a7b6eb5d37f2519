package compensation

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/access"
)

const (
	maxReasonLen    = 4096
	maxReferenceLen = 256
)

func checkReason(reason string) error {
	if strings.TrimSpace(reason) == "" || len(reason) > maxReasonLen {
		return ledger.Invalid("reason", "is required, at most %d characters", maxReasonLen)
	}
	return nil
}

// writeOffAllowed reports whether the state machine lets an obligation in
// state st be written off: only while compensation is being sought, is
// unconfirmed, or the org was escalated.
func writeOffAllowed(st ledger.ObligationState) bool {
	_, _, err := ledger.NextObligation(st, ledger.EventWriteOffApproved)
	return err == nil
}

// RevokeIdentity marks the org's agent identity revoked and, in the same
// transaction, moves every open obligation with that org (held,
// revocation_pending_compensation, compensation_unconfirmed) to escalated,
// one event each, holds intact, and surfaces every obligation already
// released on the org's declarations (surfaceDeclaredReleases). Tokens
// signed by a revoked org are refused from then on. It returns the org and how many obligations it escalated.
// Revoking an already revoked identity is a conflict (identity_already_revoked).
func (s *Service) RevokeIdentity(ctx context.Context, p ledger.Principal, orgID, reason string) (ledger.Org, int, error) {
	if err := ledger.Authorize(p, ledger.ActionRevokeIdentity); err != nil {
		return ledger.Org{}, 0, err
	}
	if err := checkReason(reason); err != nil {
		return ledger.Org{}, 0, err
	}
	var (
		org       ledger.Org
		escalated int
	)
	err := s.store.InTx(ctx, func(tx Tx) error {
		escalated = 0
		now := s.now()
		var err error
		org, err = tx.Revocation().OrgForUpdate(ctx, orgID)
		if err != nil {
			return err
		}
		if org.IdentityRevoked() {
			return ledger.Conflict("identity_already_revoked", "org %s's identity was revoked at %s", org.ID, org.IdentityRevokedAt.Format(time.RFC3339))
		}
		org.IdentityRevokedAt, org.IdentityRevokedReason, org.UpdatedAt = now, reason, now
		if err := tx.Revocation().PutOrg(ctx, org); err != nil {
			return err
		}
		open, err := tx.Revocation().OpenDelegationsOfOrgForUpdate(ctx, org.ID)
		if err != nil {
			return err
		}
		for _, d := range open {
			if _, _, err := ledger.Apply(ctx, tx, d, ledger.Change{
				Type: ledger.EventTypeIdentityRevoked, Actor: p.Actor(), At: now, Obligation: ledger.EventIdentityRevoked,
				Data: ledger.IdentityRevokedData{OrgID: org.ID, RevocationReason: reason},
			}); err != nil {
				return fmt.Errorf("escalate delegation %s: %w", d.ID, err)
			}
			escalated++
		}
		surfaced, err := surfaceDeclaredReleases(ctx, tx, org, p.Actor(), now)
		if err != nil {
			return err
		}
		_, err = ledger.Append(ctx, tx, ledger.Event{Stream: "org:" + org.ID, Type: ledger.EventTypeOrgIdentityRevoked, At: now, Actor: p.Actor()},
			ledger.OrgIdentityRevokedData{Reason: reason, Escalated: escalated, ReleasedOnRevokedIdentity: surfaced})
		return err
	})
	if err != nil {
		return ledger.Org{}, 0, err
	}
	return org, escalated, nil
}

// WriteOffInput is an on-call request to write an obligation off.
type WriteOffInput struct {
	// Reason is why the loss is accepted; required.
	Reason string
	// Reference is an optional external reference (ticket, incident).
	Reference string
}

// WriteOffResult is a write-off and its delegation afterwards.
type WriteOffResult struct {
	// WriteOff is the write-off.
	WriteOff WriteOff
	// Delegation is the delegation after the request or approval.
	Delegation ledger.Delegation
}

// RequestWriteOff writes off an obligation in revocation_pending_compensation,
// compensation_unconfirmed or escalated. At or below the approval threshold
// in force for its currency (ledger.EffectiveWriteOffThresholds, read in the same transaction)
// it executes at once (ledger.EventWriteOffApproved: the hold becomes the
// budget's written_off); above it the write-off waits, pending_approval, for
// a different on-call identity (ApproveWriteOff). Any other state is a
// conflict (write_off_not_allowed), as is a second pending write-off
// (write_off_pending); refusals are recorded as write_off_refused events.
func (s *Service) RequestWriteOff(ctx context.Context, p ledger.Principal, delegationID uuid.UUID, in WriteOffInput) (WriteOffResult, error) {
	if err := ledger.Authorize(p, ledger.ActionRequestWriteOff); err != nil {
		return WriteOffResult{}, err
	}
	if err := checkReason(in.Reason); err != nil {
		return WriteOffResult{}, err
	}
	if len(in.Reference) > maxReferenceLen {
		return WriteOffResult{}, ledger.Invalid("reference", "is at most %d characters", maxReferenceLen)
	}
	var (
		out     WriteOffResult
		refused *refusedChange
	)
	err := s.store.InTx(ctx, func(tx Tx) error {
		out, refused = WriteOffResult{}, nil
		now := s.now()
		d, err := tx.DelegationForUpdate(ctx, delegationID)
		if err != nil {
			return err
		}
		if !writeOffAllowed(d.ObligationState) {
			err := ledger.Conflict("write_off_not_allowed", "an obligation in state %s cannot be written off", d.ObligationState)
			refused = &refusedChange{d: d, err: err, data: ledger.WriteOffRefusedData{Request: "write_off", Reason: in.Reason, ObligationState: string(d.ObligationState)}}
			return err
		}
		if d.PendingWriteOffID != uuid.Nil {
			return ledger.Conflict("write_off_pending", "write-off %s already awaits approval", d.PendingWriteOffID)
		}
		id, err := uuid.NewV7()
		if err != nil {
			return err
		}
		w := WriteOff{
			ID: id, DelegationID: d.ID, Amount: d.Hold, Reason: in.Reason, Reference: in.Reference,
			Status: WriteOffPendingApproval, RequestedBy: p.Name, RequestedByID: p.ID, CreatedAt: now,
		}
		thresholds, err := ledger.EffectiveWriteOffThresholds(ctx, tx, s.thresholds)
		if err != nil {
			return err
		}
		threshold := thresholds.For(w.Amount.Currency)
		if NeedsApproval(w.Amount, threshold.Minor) {
			data := ledger.WriteOffRequestedData{WriteOffRecord: writeOffData(w), ApprovalThresholdMinor: threshold.Minor}
			if err := tx.InsertWriteOff(ctx, w); err != nil {
				return err
			}
			d.PendingWriteOffID = w.ID
			if d, _, err = ledger.Apply(ctx, tx, d, ledger.Change{Type: ledger.EventTypeWriteOffRequested, Actor: p.Actor(), At: now, Data: data}); err != nil {
				return err
			}
			out = WriteOffResult{WriteOff: w, Delegation: d}
			return nil
		}
		w.Status, w.ExecutedAt = WriteOffExecuted, now
		if err := tx.InsertWriteOff(ctx, w); err != nil {
			return err
		}
		if d, err = executeWriteOff(ctx, tx, d, w, writeOffApproval{Rule: "not_required", ThresholdMinor: &threshold.Minor}, p.Actor()); err != nil {
			return err
		}
		out = WriteOffResult{WriteOff: w, Delegation: d}
		return nil
	})
	if err != nil {
		s.recordRefused(ctx, p, refused)
		return WriteOffResult{}, err
	}
	return out, nil
}

// ApproveWriteOff executes a pending write-off on behalf of a second on-call
// principal. The requesting principal may not approve its own
// (access.ErrSelfApproval), whichever of its credentials it presents. A write-off that is not
// pending is a conflict (write_off_not_pending). When the obligation has
// meanwhile left the states a write-off applies to (an ack arrived), the
// write-off is voided — committed, with a write_off_voided event — and the
// approval is refused as a conflict (write_off_not_allowed).
func (s *Service) ApproveWriteOff(ctx context.Context, p ledger.Principal, writeOffID uuid.UUID) (WriteOffResult, error) {
	if err := ledger.Authorize(p, ledger.ActionDecideWriteOff); err != nil {
		return WriteOffResult{}, err
	}
	// Lock order is delegation, then write-off, as everywhere else.
	first, err := s.store.WriteOff(ctx, writeOffID)
	if err != nil {
		return WriteOffResult{}, err
	}
	var (
		out     WriteOffResult
		refused *refusedChange
		voided  error
	)
	err = s.store.InTx(ctx, func(tx Tx) error {
		out, refused, voided = WriteOffResult{}, nil, nil
		now := s.now()
		d, err := tx.DelegationForUpdate(ctx, first.DelegationID)
		if err != nil {
			return err
		}
		w, err := tx.WriteOffForUpdate(ctx, writeOffID)
		if err != nil {
			return err
		}
		refuse := func(err error) error {
			refused = &refusedChange{d: d, err: err, data: writeOffData(w).Refused("approve", err.Error())}
			return err
		}
		if w.Status != WriteOffPendingApproval {
			return refuse(ledger.Conflict("write_off_not_pending", "write-off %s is %s", w.ID, w.Status))
		}
		if err := access.CheckSecondPerson(ctx, tx, s.dev, p, w.RequestedByID, access.SubjectWriteOff); err != nil {
			return refuse(err)
		}
		// The write-off leaves pending either way below.
		d.PendingWriteOffID = uuid.Nil
		if !writeOffAllowed(d.ObligationState) {
			w.Status = WriteOffVoid
			if err := tx.UpdateWriteOff(ctx, w); err != nil {
				return err
			}
			data := ledger.WriteOffVoidedData{WriteOffRecord: writeOffData(w), ObligationState: string(d.ObligationState),
				VoidReason: "obligation no longer open for write-off at approval"}
			if _, _, err := ledger.Apply(ctx, tx, d, ledger.Change{Type: ledger.EventTypeWriteOffVoided, Actor: p.Actor(), At: now, Data: data}); err != nil {
				return err
			}
			voided = ledger.Conflict("write_off_not_allowed", "the obligation is %s; write-off %s was voided", d.ObligationState, w.ID)
			return nil
		}
		w.Status, w.ApprovedBy, w.ApprovedByID, w.ExecutedAt = WriteOffExecuted, p.Name, p.ID, now
		if err := tx.UpdateWriteOff(ctx, w); err != nil {
			return err
		}
		if d, err = executeWriteOff(ctx, tx, d, w, writeOffApproval{Rule: "four_eyes"}, p.Actor()); err != nil {
			return err
		}
		out = WriteOffResult{WriteOff: w, Delegation: d}
		return nil
	})
	if err != nil {
		s.recordRefused(ctx, p, refused)
		return WriteOffResult{}, err
	}
	if voided != nil {
		return WriteOffResult{}, voided
	}
	return out, nil
}

// GetWriteOff returns a write-off to on-call or finance.
func (s *Service) GetWriteOff(ctx context.Context, p ledger.Principal, id uuid.UUID) (WriteOff, error) {
	if err := ledger.Authorize(p, ledger.ActionReadReports); err != nil {
		return WriteOff{}, err
	}
	return s.store.WriteOff(ctx, id)
}

// dischargeWithPending applies c, evidence that discharges d's obligation,
// and voids d's pending write-off, if any, in tx: the delegation is
// written without its pending write-off, and the write-off is voided with
// its own event.
func (s *Service) dischargeWithPending(ctx context.Context, tx ReceiptTx, d ledger.Delegation, c ledger.Change) (ledger.Delegation, error) {
	pending := d.PendingWriteOffID
	d.PendingWriteOffID = uuid.Nil
	d, _, err := ledger.Apply(ctx, tx, d, c)
	if err != nil {
		return ledger.Delegation{}, err
	}
	if pending != uuid.Nil {
		if err := s.voidPending(ctx, tx, d, pending, c); err != nil {
			return ledger.Delegation{}, err
		}
	}
	return d, nil
}

// voidPending voids write-off id that was pending on d, because evidence
// (discharge, the change applied) discharged the obligation first.
func (s *Service) voidPending(ctx context.Context, tx ReceiptTx, d ledger.Delegation, id uuid.UUID, discharge ledger.Change) error {
	actor, now, why := discharge.Actor, discharge.At, "obligation discharged by "+string(discharge.Type)
	w, err := tx.WriteOffForUpdate(ctx, id)
	if err != nil {
		return err
	}
	w.Status = WriteOffVoid
	if err := tx.UpdateWriteOff(ctx, w); err != nil {
		return err
	}
	data := ledger.WriteOffVoidedData{WriteOffRecord: writeOffData(w), ObligationState: string(d.ObligationState), VoidReason: why}
	_, err = ledger.Record(ctx, tx, d, ledger.Change{Type: ledger.EventTypeWriteOffVoided, Actor: actor, At: now, Data: data})
	return err
}

// refusedChange is an on-call request refused inside a transaction, to be
// recorded after the rollback.
type refusedChange struct {
	d    ledger.Delegation
	err  error
	data ledger.WriteOffRefusedData
}

// recordRefused appends a write_off_refused event for a refusal, in its own
// transaction. Failing to record is logged; the refusal stands.
func (s *Service) recordRefused(ctx context.Context, p ledger.Principal, r *refusedChange) {
	if r == nil {
		return
	}
	code := "forbidden"
	var conflict *ledger.ConflictError
	switch {
	case errors.As(r.err, &conflict):
		code = conflict.Code
	case errors.Is(r.err, access.ErrSelfApproval):
		code = "self_approval"
	case errors.Is(r.err, access.ErrIdentityNotLinked):
		code = "identity_not_linked"
	}
	r.data.Code = code
	err := s.store.InTx(ctx, func(tx Tx) error {
		_, err := ledger.Record(ctx, tx, r.d, ledger.Change{Type: ledger.EventTypeWriteOffRefused, Actor: p.Actor(), At: s.now(), Data: r.data})
		return err
	})
	if err != nil {
		s.log.ErrorContext(ctx, "record write-off refusal", "delegation_id", r.d.ID.String(), "error", err)
	}
}

func writeOffData(w WriteOff) ledger.WriteOffRecord {
	data := ledger.WriteOffRecord{
		WriteOffID: w.ID.String(), Status: string(w.Status), Reason: w.Reason, Reference: w.Reference,
		AmountMinor: w.Amount.AmountMinor, Currency: w.Amount.Currency, RequestedBy: w.RequestedBy,
		RequestedByID: w.RequestedByID.String(),
	}
	if w.ApprovedBy != "" {
		data.ApprovedBy = w.ApprovedBy
		data.ApprovedByID = w.ApprovedByID.String()
	}
	return data
}

// writeOffApproval is how an executed write-off was approved: Rule is
// "not_required" (under ThresholdMinor, the approval threshold then) or
// "four_eyes" (a second on-call identity).
type writeOffApproval struct {
	Rule           string
	ThresholdMinor *int64
}

// executeWriteOff applies an executed write-off w to its delegation d: the
// one way a hold moves to written_off, whether the write-off needed no
// approval or a second on-call identity approved it.
// It is recorded on behalf of actor at w.ExecutedAt.
func executeWriteOff(ctx context.Context, tx Tx, d ledger.Delegation, w WriteOff, a writeOffApproval, actor string) (ledger.Delegation, error) {
	data := ledger.WriteOffExecutedData{WriteOffRecord: writeOffData(w), Approval: a.Rule, ApprovalThresholdMinor: a.ThresholdMinor}
	d, _, err := ledger.Apply(ctx, tx, d, ledger.Change{
		Type: ledger.EventTypeWriteOffExecuted, Actor: actor, At: w.ExecutedAt, Obligation: ledger.EventWriteOffApproved, Data: data,
	})
	return d, err
}
