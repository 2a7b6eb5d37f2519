package pgstore

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/report"
)

// Reads serves the reads that tolerate lag (reconciliation lists, the
// summary, CSV exports, the queue, the console's overview and scorecard)
// from a standby when one is configured (QUITTANCE_READ_DATABASE_URL), and
// everything else from the primary (ledger/DESIGN.md §7, reads from the
// standby). Each read records in its context (report.RecordFreshness)
// where it was served from and the standby's replay lag; a request that
// asked for the primary (report.StrongRead) is served there, and a read
// the standby cannot serve falls back to the primary.
type Reads struct {
	primary *Store
	// standby is nil when no read database is configured.
	standby *Store
	obs     ReadObserver
}

// ReadObserver is told what Reads sees, for the metrics; nil funcs are
// skipped.
type ReadObserver struct {
	// Fallback is called when a read meant for the standby was served by
	// the primary, with reason ReadFallbackUnavailable or ReadFallbackError.
	Fallback func(reason string)
	// Lag is called with each replay lag measured on the standby.
	Lag func(time.Duration)
}

// The reasons a read falls back to the primary, the label values of
// quittance_read_fallbacks_total.
const (
	// ReadFallbackUnavailable: the standby could not be reached or
	// refused to answer (the connection, a restart, a shutdown).
	ReadFallbackUnavailable = "unavailable"
	// ReadFallbackError: the standby answered the read with an error (a
	// query canceled by a recovery conflict, a missing grant).
	ReadFallbackError = "error"
)

// ReadFallbackReasons are every reason, for metrics that start at zero.
var ReadFallbackReasons = []string{ReadFallbackUnavailable, ReadFallbackError}

// NewReads returns the read side over primary and, when standby is not
// nil, the standby pool. Nothing on the standby is written: it is only
// read through the reporting statements.
func NewReads(primary *Store, standby *pgxpool.Pool, obs ReadObserver) *Reads {
	r := &Reads{primary: primary, obs: obs}
	if standby != nil {
		r.standby = New(standby)
	}
	return r
}

// Reports returns the reconciliation reads (report.ReportStore), routed.
func (r *Reads) Reports() report.ReportStore { return routedReports{r} }

// Overview returns the console's overview and scorecard reads, routed.
func (r *Reads) Overview() report.OverviewStore { return routedOverview{r} }

// Cases returns case handling with its queue routed; cases themselves,
// and their changes, stay on the primary.
func (r *Reads) Cases() report.CaseStore {
	return routedCases{CaseStore: r.primary.Cases(), reads: r}
}

// onStandby reports whether ctx's reads go to the standby, and the standby's
// replay lag when they do; err is the standby's when it cannot tell.
func (r *Reads) onStandby(ctx context.Context) (bool, time.Duration, error) {
	if r.standby == nil || report.StrongRead(ctx) {
		return false, 0, nil
	}
	seconds, err := r.standby.reader.q.ReplayLag(ctx)
	if err != nil {
		return true, 0, err
	}
	lag := time.Duration(seconds * float64(time.Second))
	if r.obs.Lag != nil {
		r.obs.Lag(lag)
	}
	return true, lag, nil
}

// fellBack counts a read the standby did not serve because of err.
func (r *Reads) fellBack(err error) {
	if r.obs.Fallback == nil {
		return
	}
	reason := ReadFallbackError
	if errors.Is(err, ledger.ErrUnavailable) {
		reason = ReadFallbackUnavailable
	}
	r.obs.Fallback(reason)
}

// routed runs read on the standby or the primary (see Reads).
func routed[T any](ctx context.Context, r *Reads, read func(*Store) (T, error)) (T, error) {
	standby, lag, err := r.onStandby(ctx)
	if !standby {
		report.RecordFreshness(ctx, report.Freshness{})
		return read(r.primary)
	}
	if err == nil {
		var v T
		if v, err = read(r.standby); err == nil {
			report.RecordFreshness(ctx, report.Freshness{Standby: true, Age: lag})
			return v, nil
		}
	}
	if ctx.Err() != nil {
		// The caller gave up: nothing to fall back for.
		var zero T
		return zero, err
	}
	r.fellBack(err)
	report.RecordFreshness(ctx, report.Freshness{})
	return read(r.primary)
}

type routedReports struct{ r *Reads }

// Obligations streams from the standby when it can; it falls back to the
// primary only while no row has been handed to fn (a stream half sent
// cannot be restarted from another server's snapshot).
func (rr routedReports) Obligations(ctx context.Context, q report.ObligationQuery, now time.Time, fn func(report.ObligationRow) error) error {
	r := rr.r
	standby, lag, err := r.onStandby(ctx)
	if !standby {
		report.RecordFreshness(ctx, report.Freshness{})
		return r.primary.Reports().Obligations(ctx, q, now, fn)
	}
	if err == nil {
		sent := false
		err = r.standby.Reports().Obligations(ctx, q, now, func(row report.ObligationRow) error {
			if !sent {
				// Before the first row: the answer's headers go with it.
				report.RecordFreshness(ctx, report.Freshness{Standby: true, Age: lag})
				sent = true
			}
			return fn(row)
		})
		if err == nil && !sent {
			report.RecordFreshness(ctx, report.Freshness{Standby: true, Age: lag})
		}
		if err == nil || sent || ctx.Err() != nil {
			return err
		}
	}
	r.fellBack(err)
	report.RecordFreshness(ctx, report.Freshness{})
	return r.primary.Reports().Obligations(ctx, q, now, fn)
}

func (rr routedReports) ObligationSummary(ctx context.Context, q report.SummaryQuery, now time.Time) ([]report.SummaryRow, error) {
	return routed(ctx, rr.r, func(s *Store) ([]report.SummaryRow, error) { return s.Reports().ObligationSummary(ctx, q, now) })
}

func (rr routedReports) Anomalies(ctx context.Context, q report.AnomalyQuery) ([]report.Anomaly, error) {
	return routed(ctx, rr.r, func(s *Store) ([]report.Anomaly, error) { return s.Reports().Anomalies(ctx, q) })
}

func (rr routedReports) RevokedReleaseTotals(ctx context.Context, q report.SummaryQuery) ([]report.RevokedReleaseTotal, error) {
	return routed(ctx, rr.r, func(s *Store) ([]report.RevokedReleaseTotal, error) { return s.Reports().RevokedReleaseTotals(ctx, q) })
}

func (rr routedReports) TokenRefusalTotals(ctx context.Context, since time.Time) ([]report.TokenRefusalTotal, error) {
	return routed(ctx, rr.r, func(s *Store) ([]report.TokenRefusalTotal, error) { return s.Reports().TokenRefusalTotals(ctx, since) })
}

func (rr routedReports) SharedRemoteTasks(ctx context.Context, limit int) ([]report.SharedRemoteTask, error) {
	return routed(ctx, rr.r, func(s *Store) ([]report.SharedRemoteTask, error) { return s.Reports().SharedRemoteTasks(ctx, limit) })
}

type routedOverview struct{ r *Reads }

func (ro routedOverview) Budgets(ctx context.Context) ([]ledger.Budget, error) {
	return routed(ctx, ro.r, func(s *Store) ([]ledger.Budget, error) { return s.Overview().Budgets(ctx) })
}

func (ro routedOverview) Orgs(ctx context.Context) ([]ledger.Org, error) {
	return routed(ctx, ro.r, func(s *Store) ([]ledger.Org, error) { return s.Overview().Orgs(ctx) })
}

func (ro routedOverview) Scorecard(ctx context.Context, q report.ScorecardQuery, now time.Time) ([]report.Scorecard, error) {
	return routed(ctx, ro.r, func(s *Store) ([]report.Scorecard, error) { return s.Overview().Scorecard(ctx, q, now) })
}

// routedCases is the primary's case store with the queue routed.
type routedCases struct {
	report.CaseStore
	reads *Reads
}

func (rc routedCases) Queue(ctx context.Context, q report.QueueQuery, now time.Time) ([]report.QueueRow, error) {
	return routed(ctx, rc.reads, func(s *Store) ([]report.QueueRow, error) { return s.Cases().Queue(ctx, q, now) })
}
