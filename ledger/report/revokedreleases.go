package report

import (
	"context"
	"time"

	"github.com/quittance/quittance/ledger"

	"github.com/google/uuid"
)

// RevokedRelease is an obligation that was released on a declaration of
// an org whose identity was revoked afterwards. The declaration proved no
// effects only while the identity was trusted (§3), so the release is
// surfaced for finance — in the anomalies, the reconciliation summary and
// the reporting views — until finance acknowledges it.
type RevokedRelease struct {
	DelegationID uuid.UUID
	OrgID        string
	AmountMinor  int64
	Currency     string
	// ReleasedAt is when the obligation was released.
	ReleasedAt time.Time
	// IdentityRevokedAt is when the org's identity was revoked.
	IdentityRevokedAt time.Time
	// AcknowledgedAt, AcknowledgedBy and AcknowledgeNote are set once
	// finance acknowledged it.
	AcknowledgedAt  time.Time
	AcknowledgedBy  uuid.UUID
	AcknowledgeNote string
}

// Acknowledged reports whether finance acknowledged the release.
func (r RevokedRelease) Acknowledged() bool { return !r.AcknowledgedAt.IsZero() }

// RevokedReleaseTotal is the unacknowledged releases on revoked identities
// of one org in one currency.
type RevokedReleaseTotal struct {
	OrgID       string
	Currency    string
	Count       int64
	AmountMinor int64
}

// RevokedReleaseTotals returns the unacknowledged releases on revoked
// identities by org and currency, for the reconciliation summary (its
// OrgID and Tenant filters apply; States does not).
func (r *Reports) RevokedReleaseTotals(ctx context.Context, p ledger.Principal, q SummaryQuery) ([]RevokedReleaseTotal, error) {
	if err := ledger.Authorize(p, ledger.ActionReadReports); err != nil {
		return nil, err
	}
	return r.store.RevokedReleaseTotals(ctx, q)
}
