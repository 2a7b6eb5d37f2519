package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

// reader implements ledger.Reader on a pool or a transaction.
type reader struct {
	q *dbsqlc.Queries
}

// notFound turns pgx.ErrNoRows into ledger.ErrNotFound, naming what was missing.
func notFound(err error, what string, id any) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%s %v: %w", what, id, ledger.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("load %s %v: %w", what, id, interpretError(err))
	}
	return nil
}

func (r reader) Delegation(ctx context.Context, id uuid.UUID) (ledger.Delegation, error) {
	row, err := r.q.DelegationGetByID(ctx, id)
	if err != nil {
		return ledger.Delegation{}, notFound(err, "delegation", id)
	}
	return toDelegation(row), nil
}

func (r reader) DelegationByOperation(ctx context.Context, tenant, op string) (ledger.Delegation, error) {
	row, err := r.q.DelegationGetByOperation(ctx, dbsqlc.DelegationGetByOperationParams{Tenant: tenant, BusinessOperationID: op})
	if err != nil {
		return ledger.Delegation{}, notFound(err, "delegation for business operation", op)
	}
	return toDelegation(row), nil
}

func (r reader) DelegationByRemoteTask(ctx context.Context, orgID, taskID string) (ledger.Delegation, error) {
	row, err := r.q.DelegationGetByRemoteTask(ctx, dbsqlc.DelegationGetByRemoteTaskParams{OrgID: orgID, RemoteTaskID: &taskID})
	if err != nil {
		return ledger.Delegation{}, notFound(err, "delegation for remote task", taskID)
	}
	return toDelegation(row), nil
}

func (r reader) ListDelegations(ctx context.Context, f ledger.DelegationFilter) ([]ledger.Delegation, error) {
	p := dbsqlc.DelegationListParams{
		Tenant:          optional(f.Tenant),
		ObligationState: optional(string(f.ObligationState)),
		TaskStatus:      optional(string(f.TaskStatus)),
		OrgID:           optional(f.OrgID),
		MaxRows:         int32(f.Limit),
	}
	if f.After != uuid.Nil {
		p.After = uuid.NullUUID{UUID: f.After, Valid: true}
	}
	rows, err := r.q.DelegationList(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("list delegations: %w", err)
	}
	out := make([]ledger.Delegation, len(rows))
	for i, row := range rows {
		out[i] = toDelegation(row)
	}
	return out, nil
}

func (r reader) StreamEvents(ctx context.Context, stream string) ([]ledger.Event, error) {
	rows, err := r.q.EventListByStream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("list events of %s: %w", stream, err)
	}
	out := make([]ledger.Event, len(rows))
	for i, row := range rows {
		out[i] = toEvent(row)
	}
	return out, nil
}

func (r reader) Budget(ctx context.Context, id string) (ledger.Budget, error) {
	row, err := r.q.BudgetGetByID(ctx, id)
	if err != nil {
		return ledger.Budget{}, notFound(err, "budget", id)
	}
	return toBudget(row), nil
}

func (r reader) Org(ctx context.Context, id string) (ledger.Org, error) {
	row, err := r.q.OrgGetByID(ctx, id)
	if err != nil {
		return ledger.Org{}, notFound(err, "org", id)
	}
	return toOrg(row), nil
}

func (r reader) TaskClass(ctx context.Context, name string) (ledger.TaskClass, error) {
	row, err := r.q.TaskClassGetByName(ctx, name)
	if err != nil {
		return ledger.TaskClass{}, notFound(err, "task class", name)
	}
	return toTaskClass(row), nil
}

func (r reader) TokenByHash(ctx context.Context, hash []byte) (ledger.Token, error) {
	row, err := r.q.TokenGetByHash(ctx, hash)
	if err != nil {
		return ledger.Token{}, notFound(err, "token", "(hash)")
	}
	return ledger.Token{
		ID: row.ID, Name: row.Name, Role: ledger.Role(row.Role), Tenant: deref(row.Tenant),
		Hash: row.TokenHash, CreatedAt: row.CreatedAt, RevokedAt: derefTime(row.RevokedAt),
	}, nil
}

func toDelegation(r dbsqlc.Delegation) ledger.Delegation {
	return ledger.Delegation{
		ID: r.ID, Tenant: r.Tenant, BusinessOperationID: r.BusinessOperationID, RequestHash: r.RequestHash,
		OrgID: r.OrgID, TaskClass: r.TaskClass, BudgetID: r.BudgetID,
		Hold: ledger.Money{AmountMinor: r.AmountMinor, Currency: r.Currency},
		Remote: ledger.RemoteTask{
			TaskID: deref(r.RemoteTaskID), ContextID: deref(r.RemoteContextID), ProtocolVersion: deref(r.ProtocolVersion),
		},
		TaskStatus:        ledger.TaskStatus(r.TaskStatus),
		TaskStatusAt:      derefTime(r.TaskStatusAt),
		TaskStatusMessage: deref(r.TaskStatusMessage),
		ObligationState:   ledger.ObligationState(r.ObligationState),
		ObligationReason:  deref(r.ObligationReason),
		CancelRequestedAt: derefTime(r.CancelRequestedAt),
		Compensation: ledger.Compensation{
			IdempotencyKey: deref(r.CompensationKey), Deadline: derefTime(r.CompensationDeadline),
			Attempts: int(r.CompensationAttempts), LastError: deref(r.CompensationLastError),
			Receipt: r.CompensationReceipt,
		},
		PendingWriteOffID: r.PendingWriteOffID.UUID,
		Version:           r.Version, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}
}

func toBudget(r dbsqlc.Budget) ledger.Budget {
	return ledger.Budget{
		ID: r.ID, Currency: r.Currency, Funded: r.FundedMinor, Available: r.AvailableMinor, Held: r.HeldMinor,
		Spent: r.SpentMinor, WrittenOff: r.WrittenOffMinor, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}
}

func toOrg(r dbsqlc.RemoteOrg) ledger.Org {
	return ledger.Org{
		ID: r.ID, Name: r.Name, SharedCoordinator: r.SharedCoordinator, JWKS: r.Jwks,
		AgentCardURL: deref(r.AgentCardUrl), AllowedHosts: r.AllowedHosts, RequireSignedReceipts: r.RequireSignedReceipts,
		IdentityRevokedAt: derefTime(r.IdentityRevokedAt), IdentityRevokedReason: deref(r.IdentityRevokedReason),
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}
}

func toTaskClass(r dbsqlc.TaskClass) ledger.TaskClass {
	gate := make([]ledger.TaskStatus, len(r.GateOn))
	for i, s := range r.GateOn {
		gate[i] = ledger.TaskStatus(s)
	}
	return ledger.TaskClass{
		Name: r.Name, EffectCapable: r.EffectCapable, GateOn: gate,
		CompensationTimeout: time.Duration(r.CompensationTimeoutMs) * time.Millisecond, UpdatedAt: r.UpdatedAt,
	}
}

func toEvent(r dbsqlc.Event) ledger.Event {
	return ledger.Event{
		Seq: r.Seq, Stream: r.Stream, StreamSeq: r.StreamSeq, DelegationID: r.DelegationID.UUID, Type: ledger.EventType(r.Type),
		At: r.At, Actor: r.Actor, ObligationFrom: ledger.ObligationState(deref(r.ObligationFrom)),
		ObligationTo: ledger.ObligationState(deref(r.ObligationTo)), Data: r.Data, Evidence: deref(r.Evidence),
		PrevHash: r.PrevHash, Hash: r.Hash,
	}
}

// optional maps "" to NULL.
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// optionalTime maps the zero time to NULL.
func optionalTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func derefTime(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}
