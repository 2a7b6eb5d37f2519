package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

// tx implements ledger.Tx on one pgx transaction.
type tx struct {
	reader
	appended []ledger.Event
}

func (t *tx) DelegationForUpdate(ctx context.Context, id uuid.UUID) (ledger.Delegation, error) {
	row, err := t.q.DelegationGetByIDForUpdate(ctx, id)
	if err != nil {
		return ledger.Delegation{}, notFound(err, "delegation", id)
	}
	return toDelegation(row), nil
}

func (t *tx) GatePolicy(ctx context.Context, orgID, taskClass string) (ledger.Org, ledger.TaskClass, bool, error) {
	row, err := t.q.GatePolicy(ctx, dbsqlc.GatePolicyParams{OrgID: orgID, TaskClass: taskClass})
	if err != nil {
		return ledger.Org{}, ledger.TaskClass{}, false, notFound(err, "org", orgID)
	}
	if row.ClassName == nil {
		return toOrg(row.RemoteOrg), ledger.TaskClass{}, false, nil
	}
	class := toTaskClass(dbsqlc.TaskClass{
		Name: *row.ClassName, EffectCapable: row.EffectCapable.Bool, GateOn: row.GateOn,
		CompensationTimeoutMs: row.CompensationTimeoutMs.Int64, UpdatedAt: *row.ClassUpdatedAt,
	})
	return toOrg(row.RemoteOrg), class, true, nil
}

func (t *tx) CreationReferences(ctx context.Context, orgID, budgetID string) (ledger.Org, ledger.Budget, error) {
	row, err := t.q.CreationReferences(ctx, dbsqlc.CreationReferencesParams{OrgID: orgID, BudgetID: budgetID})
	if err != nil {
		return ledger.Org{}, ledger.Budget{}, notFound(err, "org and budget", orgID+", "+budgetID)
	}
	return toOrg(row.RemoteOrg), toBudget(row.Budget), nil
}

func (t *tx) InsertDelegation(ctx context.Context, d ledger.Delegation) (bool, error) {
	n, err := t.q.DelegationInsert(ctx, dbsqlc.DelegationInsertParams{
		ID: d.ID, Tenant: d.Tenant, BusinessOperationID: d.BusinessOperationID, RequestHash: d.RequestHash,
		OrgID: d.OrgID, TaskClass: d.TaskClass, BudgetID: d.BudgetID, AmountMinor: d.Hold.AmountMinor,
		Currency: d.Hold.Currency, RemoteTaskID: optional(d.Remote.TaskID), RemoteContextID: optional(d.Remote.ContextID),
		ProtocolVersion: optional(d.Remote.ProtocolVersion), TaskStatus: string(d.TaskStatus),
		ObligationState: string(d.ObligationState), Version: d.Version, CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt,
	})
	if err != nil {
		return false, fmt.Errorf("insert delegation %s: %w", d.ID, err)
	}
	return n == 1, nil
}

func (t *tx) UpdateDelegation(ctx context.Context, d ledger.Delegation) error {
	n, err := t.q.DelegationUpdate(ctx, dbsqlc.DelegationUpdateParams{
		ID: d.ID, RemoteTaskID: optional(d.Remote.TaskID), RemoteContextID: optional(d.Remote.ContextID),
		ProtocolVersion: optional(d.Remote.ProtocolVersion), TaskStatus: string(d.TaskStatus),
		TaskStatusAt: optionalTime(d.TaskStatusAt), TaskStatusMessage: optional(d.TaskStatusMessage),
		ObligationState: string(d.ObligationState), ObligationReason: optional(d.ObligationReason),
		CancelRequestedAt: optionalTime(d.CancelRequestedAt), CompensationKey: optional(d.Compensation.IdempotencyKey),
		CompensationDeadline: optionalTime(d.Compensation.Deadline), CompensationAttempts: int32(d.Compensation.Attempts),
		CompensationLastError: optional(d.Compensation.LastError), CompensationReceipt: d.Compensation.Receipt,
		PendingWriteOffID: uuid.NullUUID{UUID: d.PendingWriteOffID, Valid: d.PendingWriteOffID != uuid.Nil},
		PreviousVersion:   d.Version - 1, UpdatedAt: d.UpdatedAt,
	})
	if err != nil {
		return fmt.Errorf("update delegation %s: %w", d.ID, err)
	}
	if n != 1 {
		return fmt.Errorf("delegation %s version %d: %w", d.ID, d.Version-1, ledger.ErrConcurrentUpdate)
	}
	return nil
}

func (t *tx) MoveBudget(ctx context.Context, m ledger.BudgetMove) (ledger.Budget, error) {
	if !m.Kind.Valid() {
		return ledger.Budget{}, fmt.Errorf("unknown budget movement %q", m.Kind)
	}
	p := dbsqlc.BudgetMoveParams{ID: m.BudgetID, Kind: string(m.Kind), Amount: m.AmountMinor, At: m.At}
	if m.DelegationID != uuid.Nil {
		p.DelegationID = uuid.NullUUID{UUID: m.DelegationID, Valid: true}
	}
	row, err := t.q.BudgetMove(ctx, p)
	if errors.Is(err, pgx.ErrNoRows) {
		if m.Kind == ledger.MoveHold {
			return ledger.Budget{}, fmt.Errorf("hold %d on budget %s: %w", m.AmountMinor, m.BudgetID, ledger.ErrInsufficientFunds)
		}
		return ledger.Budget{}, fmt.Errorf("%s %d on budget %s: budget missing or amount not held", m.Kind, m.AmountMinor, m.BudgetID)
	}
	if err != nil {
		return ledger.Budget{}, fmt.Errorf("%s %d on budget %s: %w", m.Kind, m.AmountMinor, m.BudgetID, err)
	}
	return toBudget(dbsqlc.Budget(row)), nil
}

func (t *tx) BudgetForUpdate(ctx context.Context, id string) (ledger.Budget, error) {
	row, err := t.q.BudgetGetByIDForUpdate(ctx, id)
	if err != nil {
		return ledger.Budget{}, notFound(err, "budget", id)
	}
	return toBudget(row), nil
}

func (t *tx) InsertBudget(ctx context.Context, b ledger.Budget) error {
	if err := t.q.BudgetInsert(ctx, dbsqlc.BudgetInsertParams{ID: b.ID, Currency: b.Currency, CreatedAt: b.CreatedAt}); err != nil {
		return fmt.Errorf("insert budget %s: %w", b.ID, err)
	}
	return nil
}

func (t *tx) PutOrg(ctx context.Context, o ledger.Org) error {
	err := t.q.OrgUpsert(ctx, dbsqlc.OrgUpsertParams{
		ID: o.ID, Name: o.Name, SharedCoordinator: o.SharedCoordinator, Jwks: o.JWKS,
		AgentCardUrl: optional(o.AgentCardURL), AllowedHosts: o.AllowedHosts, RequireSignedReceipts: o.RequireSignedReceipts,
		IdentityRevokedAt: optionalTime(o.IdentityRevokedAt), IdentityRevokedReason: optional(o.IdentityRevokedReason),
		CreatedAt: o.CreatedAt, UpdatedAt: o.UpdatedAt,
	})
	if err != nil {
		return fmt.Errorf("store org %s: %w", o.ID, err)
	}
	return nil
}

func (t *tx) PutTaskClass(ctx context.Context, c ledger.TaskClass) error {
	gate := make([]string, len(c.GateOn))
	for i, s := range c.GateOn {
		gate[i] = string(s)
	}
	err := t.q.TaskClassUpsert(ctx, dbsqlc.TaskClassUpsertParams{
		Name: c.Name, EffectCapable: c.EffectCapable, GateOn: gate,
		CompensationTimeoutMs: c.CompensationTimeout.Milliseconds(), UpdatedAt: c.UpdatedAt,
	})
	if err != nil {
		return fmt.Errorf("store task class %s: %w", c.Name, err)
	}
	return nil
}

func (t *tx) InsertToken(ctx context.Context, tok ledger.Token) error {
	err := t.q.TokenInsert(ctx, dbsqlc.TokenInsertParams{
		ID: tok.ID, Name: tok.Name, Role: string(tok.Role), Tenant: optional(tok.Tenant), TokenHash: tok.Hash, CreatedAt: tok.CreatedAt,
	})
	if err != nil {
		return fmt.Errorf("insert token %s: %w", tok.Name, err)
	}
	return nil
}

func (t *tx) AppendEvent(ctx context.Context, e ledger.Event) (ledger.Event, error) {
	if e.StreamSeq == 1 {
		// A new stream: the unique (stream, stream_seq) constraint refuses
		// the insert if it is not.
		e.PrevHash = ledger.GenesisHash
	} else {
		head, err := t.q.EventStreamHead(ctx, e.Stream)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			e.StreamSeq, e.PrevHash = 1, ledger.GenesisHash
		case err != nil:
			return ledger.Event{}, fmt.Errorf("read head of stream %s: %w", e.Stream, err)
		default:
			e.StreamSeq, e.PrevHash = head.StreamSeq+1, head.Hash
		}
	}
	var err error
	if e.Hash, err = e.ComputeHash(); err != nil {
		return ledger.Event{}, err
	}
	p := dbsqlc.EventInsertParams{
		Stream: e.Stream, StreamSeq: e.StreamSeq, Type: string(e.Type), At: e.At, Actor: e.Actor,
		ObligationFrom: optional(string(e.ObligationFrom)), ObligationTo: optional(string(e.ObligationTo)),
		Data: e.Data, Evidence: optional(e.Evidence), PrevHash: e.PrevHash, Hash: e.Hash,
	}
	if e.DelegationID != uuid.Nil {
		p.DelegationID = uuid.NullUUID{UUID: e.DelegationID, Valid: true}
	}
	if e.Seq, err = t.q.EventInsert(ctx, p); err != nil {
		return ledger.Event{}, fmt.Errorf("insert event into %s: %w", e.Stream, err)
	}
	t.appended = append(t.appended, e)
	return e, nil
}
