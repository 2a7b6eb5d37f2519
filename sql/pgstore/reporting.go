package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/report"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

// reportPageSize is how many obligations one round trip fetches while a
// listing is streamed: memory stays bounded whatever the table's size.
const reportPageSize = 500

// Reports implements report.ReportStore.
type Reports struct {
	store *Store
}

// Reports returns the store's reporting read side.
func (s *Store) Reports() *Reports { return &Reports{store: s} }

var _ report.ReportStore = (*Reports)(nil)

func stateStrings(states []ledger.ObligationState) []string {
	out := make([]string, len(states))
	for i, s := range states {
		out[i] = string(s)
	}
	return out
}

func eventTypeStrings(types []ledger.EventType) []string {
	out := make([]string, len(types))
	for i, t := range types {
		out[i] = string(t)
	}
	return out
}

// Obligations streams the obligations q selects to fn in (created_at, id)
// order. It pages through one read-only, repeatable-read transaction, so
// the whole stream is one consistent snapshot and at most one page is in
// memory at a time.
func (r *Reports) Obligations(ctx context.Context, q report.ObligationQuery, now time.Time, fn func(report.ObligationRow) error) error {
	tx, err := r.store.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("begin report transaction: %w", readOnlyError(err))
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
	queries := newQueries(tx)
	p := dbsqlc.ObligationPageParams{
		States:              stateStrings(q.States),
		OrgID:               optional(q.OrgID),
		Tenant:              optional(q.Tenant),
		DispatchUnknownOnly: q.Condition == report.ConditionDispatchUnknown,
		TaskNotFoundOnly:    q.Condition == report.ConditionTaskNotFound,
	}
	if q.OlderThan > 0 {
		before := now.Add(-q.OlderThan)
		p.CreatedBefore = &before
	}
	after := q.After
	remaining := q.Limit
	for {
		size := reportPageSize
		if q.Limit > 0 && remaining < size {
			size = remaining
		}
		p.MaxRows = int32(size)
		p.AfterCreatedAt, p.AfterID = nil, uuid.Nil
		if !after.IsZero() {
			at := after.CreatedAt
			p.AfterCreatedAt, p.AfterID = &at, after.ID
		}
		rows, err := queries.ObligationPage(ctx, p)
		if err != nil {
			return fmt.Errorf("list obligations: %w", err)
		}
		for _, row := range rows {
			o := toObligationRow(row)
			if err := fn(o); err != nil {
				return err
			}
			after = o.Cursor()
		}
		remaining -= len(rows)
		if len(rows) < size || (q.Limit > 0 && remaining <= 0) {
			return nil
		}
	}
}

func toObligationRow(r dbsqlc.ObligationPageRow) report.ObligationRow {
	return report.ObligationRow{
		DelegationID: r.ID, Tenant: r.Tenant, BusinessOperationID: r.BusinessOperationID, OrgID: r.OrgID, TaskClass: r.TaskClass, BudgetID: r.BudgetID,
		Amount:       ledger.Money{AmountMinor: r.AmountMinor, Currency: r.Currency},
		RemoteTaskID: deref(r.RemoteTaskID), TaskStatus: ledger.TaskStatus(r.TaskStatus),
		ObligationState: ledger.ObligationState(r.ObligationState), ObligationReason: deref(r.ObligationReason),
		CancelRequestedAt: derefTime(r.CancelRequestedAt), CompensationDeadline: derefTime(r.CompensationDeadline),
		CompensationAttempts: int(r.CompensationAttempts), CompensationLastError: deref(r.CompensationLastError),
		CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(),
		LastEvidenceType: ledger.EventType(r.LastEvidenceType), LastEvidenceAt: r.LastEvidenceAt.UTC(),
		DispatchUnknownAt: derefTime(r.DispatchUnknownAt), TaskNotFoundAt: derefTime(r.TaskNotFoundAt),
	}
}

// ObligationSummary returns active holds by org, currency and state, with
// age buckets measured from now.
func (r *Reports) ObligationSummary(ctx context.Context, q report.SummaryQuery, now time.Time) ([]report.SummaryRow, error) {
	const day = 24 * time.Hour
	rows, err := r.store.reader.q.ObligationSummary(ctx, dbsqlc.ObligationSummaryParams{
		CreatedAfter1d: now.Add(-day), CreatedAfter7d: now.Add(-7 * day), CreatedAfter30d: now.Add(-30 * day),
		States: stateStrings(q.States), OrgID: optional(q.OrgID), Tenant: optional(q.Tenant),
	})
	if err != nil {
		return nil, fmt.Errorf("summarize obligations: %w", err)
	}
	out := make([]report.SummaryRow, len(rows))
	for i, row := range rows {
		out[i] = report.SummaryRow{
			OrgID: row.OrgID, Currency: row.Currency, ObligationState: ledger.ObligationState(row.ObligationState),
			Count: row.ObligationCount, AmountMinor: row.AmountMinor,
			Under1Day:  report.AgeBucket{Count: row.CountLt1d, AmountMinor: row.AmountLt1d},
			Days1To7:   report.AgeBucket{Count: row.Count1d7d, AmountMinor: row.Amount1d7d},
			Days7To30:  report.AgeBucket{Count: row.Count7d30d, AmountMinor: row.Amount7d30d},
			Over30Days: report.AgeBucket{Count: row.CountGt30d, AmountMinor: row.AmountGt30d},
		}
	}
	return out, nil
}

// Anomalies returns anomaly events after q.AfterSeq in seq order.
func (r *Reports) Anomalies(ctx context.Context, q report.AnomalyQuery) ([]report.Anomaly, error) {
	p := dbsqlc.AnomalyListParams{Types: eventTypeStrings(report.AnomalyEventTypes), AfterSeq: q.AfterSeq, MaxRows: int32(q.Limit)}
	if !q.Since.IsZero() {
		since := q.Since
		p.Since = &since
	}
	rows, err := r.store.reader.q.AnomalyList(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("list anomalies: %w", err)
	}
	out := make([]report.Anomaly, len(rows))
	for i, row := range rows {
		kind, _ := report.ClassifyAnomaly(ledger.EventType(row.Type), row.Data)
		out[i] = report.Anomaly{
			Seq: row.Seq, Kind: kind, EventType: ledger.EventType(row.Type), DelegationID: row.DelegationID.UUID,
			OrgID: row.OrgID, Tenant: row.Tenant, ObligationState: ledger.ObligationState(row.ObligationState),
			At: row.At.UTC(), Actor: row.Actor, Data: row.Data,
		}
	}
	return out, nil
}
