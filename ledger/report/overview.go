package report

import (
	"context"
	"slices"
	"time"

	"github.com/quittance/quittance/ledger"
)

// OverviewStore is the read side of the overview and counterparty pages:
// every budget, every org, and the counterparty scorecard's figures.
type OverviewStore interface {
	// Budgets returns every budget, by id.
	Budgets(ctx context.Context) ([]ledger.Budget, error)
	// Orgs returns every registered org, by id.
	Orgs(ctx context.Context) ([]ledger.Org, error)
	// Scorecard returns the scorecard figures of the orgs q selects, one
	// row per org that has any, measured at now.
	Scorecard(ctx context.Context, q ScorecardQuery, now time.Time) ([]Scorecard, error)
}

// Overview answers the console's questions about budgets and
// counterparties. Every method requires ActionReadReports.
type Overview struct {
	store OverviewStore
	storedClock
}

// OverviewConfig wires Overview.
type OverviewConfig struct {
	Store OverviewStore
	Clock ledger.Clock
}

// NewOverview returns Overview.
func NewOverview(cfg OverviewConfig) *Overview {
	return &Overview{store: cfg.Store, storedClock: newStoredClock(cfg.Clock)}
}

// Budgets returns every budget.
func (o *Overview) Budgets(ctx context.Context, p ledger.Principal) ([]ledger.Budget, error) {
	if err := ledger.Authorize(p, ledger.ActionReadReports); err != nil {
		return nil, err
	}
	return o.store.Budgets(ctx)
}

// Orgs returns every registered org.
func (o *Overview) Orgs(ctx context.Context, p ledger.Principal) ([]ledger.Org, error) {
	if err := ledger.Authorize(p, ledger.ActionReadReports); err != nil {
		return nil, err
	}
	return o.store.Orgs(ctx)
}

// ScorecardQuery selects the orgs and the period of a scorecard.
type ScorecardQuery struct {
	// OrgID selects one org; empty selects all.
	OrgID string
	// Since and Until bound the period (Until exclusive) over which
	// acknowledgement times and outcomes are measured. Open exposure and
	// unconfirmed aging are as of now, whatever the period.
	Since, Until time.Time
}

// Scorecard is how one counterparty org treats the obligations it owes.
type Scorecard struct {
	OrgID string
	// Exposure is the org's active holds (held and the three open
	// obligation states), by currency.
	Exposure []ExposureRow
	// Acks is how many obligations were discharged by a compensation
	// ack in the period after waiting for it; AckMedian and AckP90 are the
	// times from the cancel request (or, without one, from the task's
	// gated end) to the ack.
	Acks      int64
	AckMedian time.Duration
	AckP90    time.Duration
	// Resolved is how many gated obligations ended in the period
	// (compensated, released or written off); WrittenOff how many of them
	// were written off.
	Resolved   int64
	WrittenOff int64
	// Unconfirmed is the aging of the org's compensation_unconfirmed
	// obligations now, by time since they became unconfirmed.
	Unconfirmed UnconfirmedAging
}

// WrittenOffShare is the share of resolved obligations that were written
// off, in [0, 1]; zero when none were resolved.
func (s Scorecard) WrittenOffShare() float64 {
	if s.Resolved == 0 {
		return 0
	}
	return float64(s.WrittenOff) / float64(s.Resolved)
}

// ExposureRow is the active holds of one currency.
type ExposureRow struct {
	ledger.Money
	Count int64
}

// UnconfirmedAging counts compensation_unconfirmed obligations by age.
type UnconfirmedAging struct {
	Total                                      int64
	Under1Day, Days1To7, Days7To30, Over30Days int64
	// Oldest is when the oldest of them became unconfirmed.
	Oldest time.Time
}

// maxScorecardPeriod bounds a scorecard's period.
const maxScorecardPeriod = 5 * 366 * 24 * time.Hour

// Scorecard returns the scorecards of the orgs q selects, by org id; a
// zero period is the last 30 days.
func (o *Overview) Scorecard(ctx context.Context, p ledger.Principal, q ScorecardQuery) ([]Scorecard, ScorecardQuery, error) {
	if err := ledger.Authorize(p, ledger.ActionReadReports); err != nil {
		return nil, q, err
	}
	now := o.Now()
	if q.Until.IsZero() {
		// Up to and including now.
		q.Until = now.Add(time.Microsecond)
	}
	if q.Since.IsZero() {
		q.Since = q.Until.Add(-30 * 24 * time.Hour)
	}
	switch {
	case !q.Since.Before(q.Until):
		return nil, q, ledger.Invalid("since", "must be before until")
	case q.Until.Sub(q.Since) > maxScorecardPeriod:
		return nil, q, ledger.Invalid("since", "the period is at most five years")
	}
	rows, err := o.store.Scorecard(ctx, q, now)
	if err != nil {
		return nil, q, err
	}
	slices.SortFunc(rows, func(a, b Scorecard) int {
		switch {
		case a.OrgID < b.OrgID:
			return -1
		case a.OrgID > b.OrgID:
			return 1
		}
		return 0
	})
	return rows, q, nil
}
