package pgstore

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/report"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

func (t *tx) DeclaredReleasesOfOrgForUpdate(ctx context.Context, orgID string) ([]ledger.Delegation, error) {
	rows, err := t.q.DelegationListDeclaredReleasesByOrgForUpdate(ctx, orgID)
	if err != nil {
		return nil, fmt.Errorf("lock declared releases of org %s: %w", orgID, err)
	}
	return t.seen(toDelegations(rows)...), nil
}

func (t *tx) UnannouncedRevokedReleasesForUpdate(ctx context.Context, limit int) ([]ledger.Delegation, error) {
	rows, err := t.q.DelegationListUnannouncedRevokedReleasesForUpdate(ctx, int32(min(limit, 1<<30)))
	if err != nil {
		return nil, fmt.Errorf("lock unannounced releases on revoked identities: %w", err)
	}
	return t.seen(toDelegations(rows)...), nil
}

func (t *tx) RevokedReleaseAnnounced(ctx context.Context, delegationID uuid.UUID) (bool, error) {
	ok, err := t.q.RevokedReleaseAnnounced(ctx, uuid.NullUUID{UUID: delegationID, Valid: true})
	if err != nil {
		return false, fmt.Errorf("release on a revoked identity of %s announced: %w", delegationID, interpretError(err))
	}
	return ok, nil
}

func (t *tx) InsertRevokedRelease(ctx context.Context, r report.RevokedRelease) error {
	err := t.q.RevokedReleaseInsert(ctx, dbsqlc.RevokedReleaseInsertParams{
		DelegationID: r.DelegationID, OrgID: r.OrgID, AmountMinor: r.AmountMinor, Currency: r.Currency,
		ReleasedAt: r.ReleasedAt, IdentityRevokedAt: r.IdentityRevokedAt,
	})
	if err != nil {
		return fmt.Errorf("record release on revoked identity of %s: %w", r.DelegationID, interpretError(err))
	}
	return nil
}

func (t *tx) RevokedReleaseForUpdate(ctx context.Context, delegationID uuid.UUID) (report.RevokedRelease, error) {
	row, err := t.q.RevokedReleaseGetForUpdate(ctx, delegationID)
	if err != nil {
		return report.RevokedRelease{}, notFound(err, "release on a revoked identity", delegationID)
	}
	return report.RevokedRelease{
		DelegationID: row.DelegationID, OrgID: row.OrgID, AmountMinor: row.AmountMinor, Currency: row.Currency,
		ReleasedAt: row.ReleasedAt.UTC(), IdentityRevokedAt: row.IdentityRevokedAt.UTC(),
		AcknowledgedAt: derefTime(row.AcknowledgedAt), AcknowledgedBy: row.AcknowledgedBy.UUID, AcknowledgeNote: deref(row.AcknowledgeNote),
	}, nil
}

func (t *tx) AcknowledgeRevokedRelease(ctx context.Context, r report.RevokedRelease) error {
	at := r.AcknowledgedAt
	err := t.q.RevokedReleaseAcknowledge(ctx, dbsqlc.RevokedReleaseAcknowledgeParams{
		DelegationID: r.DelegationID, AcknowledgedAt: &at, AcknowledgedBy: uuid.NullUUID{UUID: r.AcknowledgedBy, Valid: true},
		AcknowledgeNote: optional(r.AcknowledgeNote),
	})
	if err != nil {
		return fmt.Errorf("acknowledge release of %s: %w", r.DelegationID, interpretError(err))
	}
	return nil
}

// RevokedReleaseTotals returns the unacknowledged releases on revoked
// identities by org and currency.
func (r *Reports) RevokedReleaseTotals(ctx context.Context, q report.SummaryQuery) ([]report.RevokedReleaseTotal, error) {
	rows, err := r.store.reader.q.RevokedReleaseTotals(ctx, dbsqlc.RevokedReleaseTotalsParams{OrgID: optional(q.OrgID), Tenant: optional(q.Tenant)})
	if err != nil {
		return nil, fmt.Errorf("total releases on revoked identities: %w", err)
	}
	out := make([]report.RevokedReleaseTotal, len(rows))
	for i, row := range rows {
		out[i] = report.RevokedReleaseTotal{OrgID: row.OrgID, Currency: row.Currency, Count: row.ReleaseCount, AmountMinor: row.AmountMinor}
	}
	return out, nil
}
