package compensation

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/report"
)

// maxNoteLen bounds finance's acknowledgement note.
const maxNoteLen = 4096

// surfaceDeclaredReleases records, in the revocation's transaction, every
// obligation of org released on one of its declarations: a
// released_on_revoked_identity event on each delegation and a row finance
// acknowledges. The releases stand (the money was returned to the budget),
// but what justified them no longer proves anything. It returns how many.
func surfaceDeclaredReleases(ctx context.Context, tx Tx, org ledger.Org, actor string, now time.Time) (int, error) {
	released, err := tx.Revocation().DeclaredReleasesOfOrgForUpdate(ctx, org.ID)
	if err != nil {
		return 0, err
	}
	for _, d := range released {
		if err := tx.Revocation().InsertRevokedRelease(ctx, report.RevokedRelease{
			DelegationID: d.ID, OrgID: org.ID, AmountMinor: d.Hold.AmountMinor, Currency: d.Hold.Currency,
			ReleasedAt: d.UpdatedAt, IdentityRevokedAt: now,
		}); err != nil {
			return 0, err
		}
		if _, err := ledger.Record(ctx, tx, d, ledger.Change{
			Type: ledger.EventTypeReleasedOnRevokedIdentity, Actor: actor, At: now,
			Data: ledger.ReleasedOnRevokedIdentityData{
				OrgID: org.ID, RevocationReason: org.IdentityRevokedReason,
				AmountMinor: d.Hold.AmountMinor, Currency: d.Hold.Currency,
			},
		}); err != nil {
			return 0, fmt.Errorf("surface release of delegation %s: %w", d.ID, err)
		}
	}
	return len(released), nil
}

// AcknowledgeRevokedRelease records finance's acknowledgement of an
// obligation released on a declaration of an identity revoked since, with
// a note, as a revoked_release_acknowledged event: from then on it is no
// longer listed among the anomalies, the summary or the reporting view.
// Only finance may (ActionAcknowledgeRevokedRelease). A delegation with no
// such release is ledger.ErrNotFound; acknowledging twice is a conflict
// (release_already_acknowledged).
func (s *Service) AcknowledgeRevokedRelease(ctx context.Context, p ledger.Principal, delegationID uuid.UUID, note string) (report.RevokedRelease, error) {
	if err := ledger.Authorize(p, ledger.ActionAcknowledgeRevokedRelease); err != nil {
		return report.RevokedRelease{}, err
	}
	if strings.TrimSpace(note) == "" || len(note) > maxNoteLen {
		return report.RevokedRelease{}, ledger.Invalid("note", "is required, at most %d characters", maxNoteLen)
	}
	var r report.RevokedRelease
	err := s.store.InTx(ctx, func(tx Tx) error {
		now := s.now()
		d, err := tx.DelegationForUpdate(ctx, delegationID)
		if err != nil {
			return err
		}
		if r, err = tx.Revocation().RevokedReleaseForUpdate(ctx, delegationID); errors.Is(err, ledger.ErrNotFound) {
			return fmt.Errorf("delegation %s has no release on a revoked identity: %w", delegationID, ledger.ErrNotFound)
		} else if err != nil {
			return err
		}
		if r.Acknowledged() {
			return ledger.Conflict("release_already_acknowledged", "delegation %s's release was acknowledged at %s", delegationID, r.AcknowledgedAt.Format(time.RFC3339))
		}
		r.AcknowledgedAt, r.AcknowledgedBy, r.AcknowledgeNote = now, p.ID, note
		if err := tx.Revocation().AcknowledgeRevokedRelease(ctx, r); err != nil {
			return err
		}
		_, err = ledger.Record(ctx, tx, d, ledger.Change{
			Type: ledger.EventTypeRevokedReleaseAcknowledged, Actor: p.Actor(), At: now,
			Data: ledger.RevokedReleaseAcknowledgedData{OrgID: r.OrgID, AmountMinor: r.AmountMinor, Currency: r.Currency, Note: note},
		})
		return err
	})
	return r, err
}
