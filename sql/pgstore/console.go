package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/report"
	"github.com/quittance/quittance/ledger/session"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

// This file implements what the console needs beyond the API's stores:
// sessions (session.Store), case handling and the needs-action queue
// (report.CaseStore), budgets, orgs and the counterparty scorecard
// (report.OverviewStore), and write-off listings and rejections.

// Sessions returns the store as the console's session store.
func (s *Store) Sessions() session.Store { return sessionStore{s} }

type sessionStore struct{ *Store }

var _ session.Store = sessionStore{}

func (s sessionStore) InsertSession(ctx context.Context, sess session.Session) error {
	p := sess.Principal
	params := dbsqlc.ConsoleSessionInsertParams{
		IDHash: sess.IDHash, Source: string(sess.Source), PrincipalID: p.TokenID, PrincipalName: p.Name,
		Role: string(p.Role), Tenant: optional(p.Tenant), CreatedAt: sess.CreatedAt, ExpiresAt: sess.ExpiresAt,
	}
	if sess.Source == session.SourceToken {
		params.TokenID = nullUUID(p.TokenID)
	}
	if err := s.q.ConsoleSessionInsert(ctx, params); err != nil {
		return fmt.Errorf("insert session: %w", interpretError(err))
	}
	return nil
}

func (s sessionStore) SessionByHash(ctx context.Context, hash []byte, now time.Time) (session.Session, error) {
	row, err := s.q.ConsoleSessionGetByHash(ctx, dbsqlc.ConsoleSessionGetByHashParams{IDHash: hash, Now: now})
	if err != nil {
		return session.Session{}, notFound(err, "session", "(hash)")
	}
	return session.Session{
		IDHash: row.IDHash, Source: session.Source(row.Source),
		Principal: ledger.Principal{
			ID: row.OwnerID, TokenID: row.PrincipalID, Name: row.PrincipalName, Role: ledger.Role(row.Role), Tenant: row.Tenant,
			Aliases: row.Aliases, OIDCSession: session.Source(row.Source) == session.SourceOIDC,
		},
		CreatedAt: row.CreatedAt.UTC(), ExpiresAt: row.ExpiresAt.UTC(),
	}, nil
}

func (s sessionStore) DeleteSession(ctx context.Context, hash []byte) error {
	if err := s.q.ConsoleSessionDelete(ctx, hash); err != nil {
		return fmt.Errorf("delete session: %w", err)
	}
	return nil
}

func (s sessionStore) DeleteExpiredSessions(ctx context.Context, now time.Time) (int64, error) {
	n, err := s.q.ConsoleSessionDeleteExpired(ctx, now)
	if err != nil {
		return 0, fmt.Errorf("delete expired sessions: %w", err)
	}
	return n, nil
}

func (s sessionStore) SessionsOf(ctx context.Context, principalID uuid.UUID, now time.Time) ([]session.Session, error) {
	rows, err := s.q.ConsoleSessionListByPrincipal(ctx, dbsqlc.ConsoleSessionListByPrincipalParams{PrincipalID: principalID, Now: now})
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	out := make([]session.Session, len(rows))
	for i, r := range rows {
		out[i] = session.Session{
			IDHash: r.IDHash, Source: session.Source(r.Source),
			Principal: ledger.Principal{TokenID: r.PrincipalID, Name: r.PrincipalName, Role: ledger.Role(r.Role), Tenant: r.Tenant},
			CreatedAt: r.CreatedAt.UTC(), ExpiresAt: r.ExpiresAt.UTC(),
		}
	}
	return out, nil
}

// Cases returns the store as the case-handling store.
func (s *Store) Cases() report.CaseStore { return caseStore{s} }

type caseStore struct{ *Store }

var (
	_ report.CaseStore = caseStore{}
	_ report.CaseTx    = (*tx)(nil)
)

// InTx runs fn in a transaction of the underlying Store.
func (c caseStore) InTx(ctx context.Context, fn func(report.CaseTx) error) error {
	return c.Store.InTx(ctx, func(t ledger.Tx) error { return fn(t.(*tx)) })
}

func (r reader) Case(ctx context.Context, id uuid.UUID) (report.Case, error) {
	row, err := r.q.CaseGetByDelegation(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return report.Case{DelegationID: id}, nil
	}
	if err != nil {
		return report.Case{}, fmt.Errorf("load case of %s: %w", id, err)
	}
	return report.Case{
		DelegationID: row.DelegationID, Owner: row.Owner, SnoozedUntil: derefTime(row.SnoozedUntil),
		Notes: int(row.Notes), UpdatedAt: row.UpdatedAt.UTC(),
	}, nil
}

func (t *tx) PutCase(ctx context.Context, c report.Case) error {
	err := t.q.CaseUpsert(ctx, dbsqlc.CaseUpsertParams{
		DelegationID: c.DelegationID, Owner: c.Owner, SnoozedUntil: optionalTime(c.SnoozedUntil),
		Notes: int32(c.Notes), UpdatedAt: c.UpdatedAt,
	})
	if err != nil {
		return fmt.Errorf("store case of %s: %w", c.DelegationID, interpretError(err))
	}
	return nil
}

func int8Of(v int64) pgtype.Int8 { return pgtype.Int8{Int64: v, Valid: v > 0} }

// Queue returns one page of the needs-action queue.
func (c caseStore) Queue(ctx context.Context, q report.QueueQuery, now time.Time) ([]report.QueueRow, error) {
	p := dbsqlc.CaseQueuePageParams{
		Direction: 1, SortBy: "created", States: stateStrings(q.States),
		OrgID: optional(q.OrgID), Tenant: optional(q.Tenant), Currency: optional(q.Currency),
		MinAmount: int8Of(q.MinAmountMinor), MaxAmount: int8Of(q.MaxAmountMinor),
		DeadlineBefore: optionalTime(q.DeadlineBefore),
		Snoozed:        string(q.Snoozed), Now: &now, MaxRows: int32(q.Limit),
	}
	switch q.Sort {
	case report.SortNewest:
		p.Direction = -1
	case report.SortAmountDesc:
		p.SortBy, p.Direction = "amount", -1
	case report.SortAmountAsc:
		p.SortBy = "amount"
	case report.SortDeadline:
		p.SortBy = "deadline"
	case report.SortOldest:
	}
	switch {
	case q.Unassigned:
		empty := ""
		p.Owner = &empty
	case q.Owner != "":
		p.Owner = &q.Owner
	}
	if q.OlderThan > 0 {
		before := now.Add(-q.OlderThan)
		p.CreatedBefore = &before
	}
	if q.YoungerThan > 0 {
		after := now.Add(-q.YoungerThan)
		p.CreatedAfter = &after
	}
	if !q.After.IsZero() {
		p.HasAfter, p.AfterKey, p.AfterID = true, q.After.Key, q.After.ID
	}
	var rows []dbsqlc.CaseQueuePageRow
	var err error
	switch q.Sort {
	case report.SortOldest, report.SortNewest:
		// Oldest and newest first read their page off the (created_at,
		// id) indexes; the cursor's key is the creation time in
		// microseconds.
		rows, err = c.queueByCreated(ctx, q.Sort == report.SortNewest, p)
	default:
		rows, err = c.q.CaseQueuePage(ctx, p)
	}
	if err != nil {
		return nil, fmt.Errorf("list the needs-action queue: %w", err)
	}
	out := make([]report.QueueRow, len(rows))
	for i, r := range rows {
		out[i] = report.QueueRow{
			ObligationRow: report.ObligationRow{
				DelegationID: r.ID, Tenant: r.Tenant, BusinessOperationID: r.BusinessOperationID, OrgID: r.OrgID, TaskClass: r.TaskClass, BudgetID: r.BudgetID,
				Amount:       ledger.Money{AmountMinor: r.AmountMinor, Currency: r.Currency},
				RemoteTaskID: deref(r.RemoteTaskID), TaskStatus: ledger.TaskStatus(r.TaskStatus),
				ObligationState: ledger.ObligationState(r.ObligationState), ObligationReason: deref(r.ObligationReason),
				CancelRequestedAt: derefTime(r.CancelRequestedAt), CompensationDeadline: derefTime(r.CompensationDeadline),
				CompensationAttempts: int(r.CompensationAttempts), CompensationLastError: deref(r.CompensationLastError),
				CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(),
				LastEvidenceType: ledger.EventType(r.LastEvidenceType), LastEvidenceAt: r.LastEvidenceAt.UTC(),
			},
			Case: report.Case{
				DelegationID: r.ID, Owner: r.Owner, SnoozedUntil: derefTime(r.SnoozedUntil), Notes: int(r.Notes),
				UpdatedAt: derefTime(r.CaseUpdatedAt),
			},
			PendingWriteOffID: r.PendingWriteOffID.UUID,
			Cursor:            report.QueueCursor{Key: r.SortKey, ID: r.ID},
		}
	}
	return out, nil
}

// queueByCreated reads a queue page in creation order with the query
// that an index serves, and returns its rows as CaseQueuePage rows.
func (c caseStore) queueByCreated(ctx context.Context, newest bool, p dbsqlc.CaseQueuePageParams) ([]dbsqlc.CaseQueuePageRow, error) {
	o := dbsqlc.CaseQueueOldestParams{
		States: p.States, OrgID: p.OrgID, Tenant: p.Tenant, Currency: p.Currency, MinAmount: p.MinAmount, MaxAmount: p.MaxAmount,
		CreatedBefore: p.CreatedBefore, CreatedAfter: p.CreatedAfter, DeadlineBefore: p.DeadlineBefore, Owner: p.Owner,
		Snoozed: p.Snoozed, Now: p.Now, MaxRows: p.MaxRows,
	}
	if p.HasAfter {
		at := time.UnixMicro(p.AfterKey).UTC()
		o.AfterCreatedAt, o.AfterID = &at, p.AfterID
	}
	var rows []dbsqlc.CaseQueueOldestRow
	var err error
	if newest {
		var nr []dbsqlc.CaseQueueNewestRow
		nr, err = c.q.CaseQueueNewest(ctx, dbsqlc.CaseQueueNewestParams(o))
		for _, r := range nr {
			rows = append(rows, dbsqlc.CaseQueueOldestRow(r))
		}
	} else {
		rows, err = c.q.CaseQueueOldest(ctx, o)
	}
	if err != nil {
		return nil, err
	}
	out := make([]dbsqlc.CaseQueuePageRow, len(rows))
	for i, r := range rows {
		out[i] = dbsqlc.CaseQueuePageRow{
			ID: r.ID, Tenant: r.Tenant, BusinessOperationID: r.BusinessOperationID, OrgID: r.OrgID, TaskClass: r.TaskClass, BudgetID: r.BudgetID, AmountMinor: r.AmountMinor,
			Currency: r.Currency, RemoteTaskID: r.RemoteTaskID, TaskStatus: r.TaskStatus, ObligationState: r.ObligationState,
			ObligationReason: r.ObligationReason, CancelRequestedAt: r.CancelRequestedAt, CompensationDeadline: r.CompensationDeadline,
			CompensationAttempts: r.CompensationAttempts, CompensationLastError: r.CompensationLastError,
			PendingWriteOffID: r.PendingWriteOffID, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, Owner: r.Owner,
			SnoozedUntil: r.SnoozedUntil, Notes: r.Notes, CaseUpdatedAt: r.CaseUpdatedAt, SortKey: r.CreatedAt.UnixMicro(),
			LastEvidenceType: r.LastEvidenceType, LastEvidenceAt: r.LastEvidenceAt,
		}
	}
	return out, nil
}

// Overview returns the store as the overview's read side.
func (s *Store) Overview() report.OverviewStore { return overviewStore{s} }

type overviewStore struct{ *Store }

var _ report.OverviewStore = overviewStore{}

func (o overviewStore) Budgets(ctx context.Context) ([]ledger.Budget, error) {
	rows, err := o.q.BudgetListAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("list budgets: %w", err)
	}
	out := make([]ledger.Budget, len(rows))
	for i, r := range rows {
		out[i] = toBudget(r)
	}
	return out, nil
}

func (o overviewStore) Orgs(ctx context.Context) ([]ledger.Org, error) {
	rows, err := o.q.OrgListAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("list orgs: %w", err)
	}
	out := make([]ledger.Org, len(rows))
	for i, r := range rows {
		out[i] = toOrg(r)
	}
	return out, nil
}

// Scorecard reads the four scorecard queries and joins them by org.
func (o overviewStore) Scorecard(ctx context.Context, q report.ScorecardQuery, now time.Time) ([]report.Scorecard, error) {
	org := optional(q.OrgID)
	cards := map[string]*report.Scorecard{}
	card := func(id string) *report.Scorecard {
		if c, ok := cards[id]; ok {
			return c
		}
		c := &report.Scorecard{OrgID: id}
		cards[id] = c
		return c
	}
	exposure, err := o.q.ScorecardExposure(ctx, org)
	if err != nil {
		return nil, fmt.Errorf("scorecard exposure: %w", err)
	}
	for _, r := range exposure {
		c := card(r.OrgID)
		c.Exposure = append(c.Exposure, report.ExposureRow{Money: ledger.Money{AmountMinor: r.AmountMinor, Currency: r.Currency}, Count: r.Holds})
	}
	acks, err := o.q.ScorecardAckTimes(ctx, dbsqlc.ScorecardAckTimesParams{Since: q.Since, Until: q.Until, OrgID: org})
	if err != nil {
		return nil, fmt.Errorf("scorecard ack times: %w", err)
	}
	for _, r := range acks {
		c := card(r.OrgID)
		c.Acks = r.Acks
		c.AckMedian = time.Duration(r.MedianSeconds * float64(time.Second)).Round(time.Second)
		c.AckP90 = time.Duration(r.P90Seconds * float64(time.Second)).Round(time.Second)
	}
	outcomes, err := o.q.ScorecardOutcomes(ctx, dbsqlc.ScorecardOutcomesParams{Since: q.Since, Until: q.Until, OrgID: org})
	if err != nil {
		return nil, fmt.Errorf("scorecard outcomes: %w", err)
	}
	for _, r := range outcomes {
		c := card(r.OrgID)
		c.Resolved, c.WrittenOff = r.Resolved, r.WrittenOff
	}
	day := 24 * time.Hour
	unconfirmed, err := o.q.ScorecardUnconfirmed(ctx, dbsqlc.ScorecardUnconfirmedParams{
		DayAgo: now.Add(-day), WeekAgo: now.Add(-7 * day), MonthAgo: now.Add(-30 * day), OrgID: org,
	})
	if err != nil {
		return nil, fmt.Errorf("scorecard unconfirmed aging: %w", err)
	}
	for _, r := range unconfirmed {
		card(r.OrgID).Unconfirmed = report.UnconfirmedAging{
			Total: r.Total, Under1Day: r.Lt1d, Days1To7: r.D17, Days7To30: r.D730, Over30Days: r.Gt30d, Oldest: r.Oldest.UTC(),
		}
	}
	out := make([]report.Scorecard, 0, len(cards))
	for _, c := range cards {
		out = append(out, *c)
	}
	return out, nil
}

// WriteOffs lists write-offs, newest first.
func (c compensationStore) WriteOffs(ctx context.Context, f compensation.WriteOffFilter) ([]compensation.WriteOff, error) {
	statuses := make([]string, len(f.Statuses))
	for i, s := range f.Statuses {
		statuses[i] = string(s)
	}
	var rows []dbsqlc.WriteOff
	var err error
	if f.DelegationID != uuid.Nil {
		rows, err = c.q.WriteOffListByDelegation(ctx, dbsqlc.WriteOffListByDelegationParams{
			DelegationID: f.DelegationID, Statuses: statuses, MaxRows: int32(f.Limit),
		})
	} else {
		rows, err = c.q.WriteOffList(ctx, dbsqlc.WriteOffListParams{Statuses: statuses, MaxRows: int32(f.Limit)})
	}
	if err != nil {
		return nil, fmt.Errorf("list write-offs: %w", err)
	}
	out := make([]compensation.WriteOff, len(rows))
	for i, r := range rows {
		out[i] = toWriteOff(r)
	}
	return out, nil
}

func (t *tx) RejectWriteOff(ctx context.Context, w compensation.WriteOff) error {
	n, err := t.q.WriteOffReject(ctx, dbsqlc.WriteOffRejectParams{
		ID: w.ID, RejectedBy: &w.RejectedBy, RejectedByID: nullUUID(w.RejectedByID),
		RejectionReason: &w.RejectionReason, RejectedAt: optionalTime(w.RejectedAt),
	})
	if err != nil {
		return fmt.Errorf("reject write-off %s: %w", w.ID, interpretError(err))
	}
	if n != 1 {
		return fmt.Errorf("reject write-off %s: %w", w.ID, ledger.ErrConcurrentUpdate)
	}
	return nil
}
