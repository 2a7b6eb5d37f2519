package compensation

import (
	"context"

	"github.com/google/uuid"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/access"
)

// WriteOffFilter selects write-offs for a listing.
type WriteOffFilter struct {
	// Statuses keeps write-offs in these statuses; empty keeps all.
	Statuses []WriteOffStatus
	// DelegationID keeps one delegation's write-offs; uuid.Nil keeps all.
	DelegationID uuid.UUID
	// Limit bounds the rows: 1 to 500, 100 when zero.
	Limit int
}

// WriteOffs lists write-offs, newest first, to on-call and finance.
func (s *Service) WriteOffs(ctx context.Context, p ledger.Principal, f WriteOffFilter) ([]WriteOff, error) {
	if err := ledger.Authorize(p, ledger.ActionReadReports); err != nil {
		return nil, err
	}
	for _, st := range f.Statuses {
		switch st {
		case WriteOffPendingApproval, WriteOffExecuted, WriteOffVoid, WriteOffRejected:
		default:
			return nil, ledger.Invalid("status", "%q is not a write-off status", st)
		}
	}
	switch {
	case f.Limit == 0:
		f.Limit = 100
	case f.Limit < 1 || f.Limit > 500:
		return nil, ledger.Invalid("limit", "must be between 1 and 500")
	}
	return s.store.WriteOffs(ctx, f)
}

// RejectWriteOff refuses a pending write-off on behalf of a second on-call
// identity, with a reason: the write-off becomes rejected, the obligation
// stays open with its hold, and a write_off_rejected event is appended to
// the delegation's stream. As with an approval, the requester may not
// decide their own (access.ErrSelfApproval), and a write-off that is not pending
// is a conflict (write_off_not_pending).
func (s *Service) RejectWriteOff(ctx context.Context, p ledger.Principal, writeOffID uuid.UUID, reason string) (WriteOffResult, error) {
	if err := ledger.Authorize(p, ledger.ActionDecideWriteOff); err != nil {
		return WriteOffResult{}, err
	}
	if err := checkReason(reason); err != nil {
		return WriteOffResult{}, err
	}
	first, err := s.store.WriteOff(ctx, writeOffID)
	if err != nil {
		return WriteOffResult{}, err
	}
	var (
		out     WriteOffResult
		refused *refusedChange
	)
	err = s.store.InTx(ctx, func(tx Tx) error {
		out, refused = WriteOffResult{}, nil
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
			refused = &refusedChange{d: d, err: err, data: writeOffData(w).Refused("reject", err.Error())}
			return err
		}
		if w.Status != WriteOffPendingApproval {
			return refuse(ledger.Conflict("write_off_not_pending", "write-off %s is %s", w.ID, w.Status))
		}
		if err := access.CheckSecondPerson(ctx, tx, s.dev, p, w.RequestedByID, access.SubjectWriteOff); err != nil {
			return refuse(err)
		}
		w.Status, w.RejectedBy, w.RejectedByID, w.RejectionReason, w.RejectedAt = WriteOffRejected, p.Name, p.ID, reason, now
		if err := tx.RejectWriteOff(ctx, w); err != nil {
			return err
		}
		d.PendingWriteOffID = uuid.Nil
		// The rejecting principal, by name and id (events before
		// migration 00039 name it by name only; the actor names it too).
		data := ledger.WriteOffRejectedData{
			WriteOffRecord: writeOffData(w), RejectedBy: w.RejectedBy, RejectedByID: w.RejectedByID.String(),
			RejectionReason: w.RejectionReason, ObligationState: string(d.ObligationState),
		}
		if d, _, err = ledger.Apply(ctx, tx, d, ledger.Change{Type: ledger.EventTypeWriteOffRejected, Actor: p.Actor(), At: now, Data: data}); err != nil {
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

// DecidableBy reports whether p may approve or reject w: p may decide
// write-offs, w is pending, and p did not request it. The console shows
// the approve and reject controls only then; the service checks the same.
func (w WriteOff) DecidableBy(p ledger.Principal) bool {
	return p.Permits(ledger.ActionDecideWriteOff) && w.Status == WriteOffPendingApproval && !w.requestedBy(p)
}

// requestedBy reports whether p is the write-off's requester. Four-eyes
// compares persons (ledger.Principal.SamePerson): a second credential of
// the requester, any spelling of its name, or another principal of the
// same person (an OpenID Connect identity linked to it) is still the
// requester.
func (w WriteOff) requestedBy(p ledger.Principal) bool {
	return p.SamePerson(w.RequestedByID)
}

// ApprovalThresholds are the largest amounts one on-call principal may
// write off alone, by default and per currency; above its currency's a
// second principal must approve. Each is the configured value until an
// approved change sets another (ledger.EffectiveWriteOffThresholds).
func (s *Service) ApprovalThresholds(ctx context.Context) (ledger.WriteOffThresholds, error) {
	return ledger.EffectiveWriteOffThresholds(ctx, s.store, s.thresholds)
}

// NeedsApproval reports whether a write-off of amount needs a second
// on-call principal's approval under threshold.
func NeedsApproval(amount ledger.Money, threshold int64) bool { return amount.AmountMinor > threshold }

// LedgerID is this ledger's id, the audience every token must name.
func (s *Service) LedgerID() string { return s.ledgerID }

// CanWriteOff reports whether a write-off may be requested for d now: its
// obligation is in a state a write-off applies to, and none is pending.
// RequestWriteOff refuses exactly the others.
func CanWriteOff(d ledger.Delegation) bool {
	return writeOffAllowed(d.ObligationState) && d.PendingWriteOffID == uuid.Nil
}
