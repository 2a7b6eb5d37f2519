package delegate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/delegate/a2a"
	"github.com/quittance/quittance/ledger"
)

// OrchestratorStore is the persistence the Orchestrator needs. Error
// contract: as ledger.Store; a missing row is ledger.ErrNotFound (wrapped).
type OrchestratorStore interface {
	ledger.Reader
	// InTx runs fn in one database transaction, committing if fn returns
	// nil; it retries fn on serialization failures, so fn must have no
	// effects outside the Tx.
	InTx(ctx context.Context, fn func(OrchestratorTx) error) error
	// FollowUp returns a delegation's follow-up message, or ledger.ErrNotFound.
	FollowUp(ctx context.Context, id uuid.UUID, messageID string) (FollowUp, error)
	// FollowUps lists a delegation's follow-up messages in the order queued.
	FollowUps(ctx context.Context, id uuid.UUID) ([]FollowUp, error)
	// DispatchMessage returns the message a dispatched delegation was sent
	// with, as queued, and when; ledger.ErrNotFound for a delegation
	// Quittance did not dispatch.
	DispatchMessage(ctx context.Context, id uuid.UUID) (json.RawMessage, time.Time, error)
	// TaskSnapshot returns the delegation's latest task snapshot, or
	// ledger.ErrNotFound when none was kept yet.
	TaskSnapshot(ctx context.Context, id uuid.UUID) (TaskSnapshot, error)
	// RemoteTasks lists the delegation's extra remote tasks, oldest first.
	RemoteTasks(ctx context.Context, id uuid.UUID) ([]RemoteTask, error)
	// BudgetNamesTenant reports whether any budget names the tenant.
	BudgetNamesTenant(ctx context.Context, tenant string) (bool, error)
}

// OrchestratorTx is what the Orchestrator writes through, a small part of
// the Worker's Tx (which embeds it): queuing an answer to an interrupted
// task (Continue) and on-call's resolution of an unknown dispatch
// (ResolveDispatch). It records no observation, receipt or job outcome.
// Error contract: as ledger.Store.
type OrchestratorTx interface {
	ledger.ChangeTx
	ledger.DelegationLocker
	outboundQueue
	// Org loads an org without locking it.
	Org(ctx context.Context, id string) (ledger.Org, error)
	// DelegationByRemoteTask loads the tenant's delegation recording the
	// org's remote task, or returns ledger.ErrNotFound. A remote task id is
	// unique per (org, tenant): another tenant's delegation may record the
	// same id, and is none of this tenant's business.
	DelegationByRemoteTask(ctx context.Context, tenant, orgID, remoteTaskID string) (ledger.Delegation, error)
	// RemoteTaskHolder loads another delegation than d, of any tenant at
	// d's org, that records the org's remote task (one of d's tenant
	// first), or returns ledger.ErrNotFound. It first takes the lock every
	// delegation recording that task id takes, until the transaction
	// ends, so two resolutions of the same task id cannot both pass.
	RemoteTaskHolder(ctx context.Context, d ledger.Delegation, remoteTaskID string) (ledger.Delegation, error)
	// ClearDispatchUnknown ends the dispatch_unknown condition, and says
	// whether the delegation was in it.
	ClearDispatchUnknown(ctx context.Context, id uuid.UUID) (bool, error)
	// FollowUp returns a delegation's follow-up message, or ledger.ErrNotFound.
	FollowUp(ctx context.Context, id uuid.UUID, messageID string) (FollowUp, error)
	// FollowUps lists a delegation's follow-up messages in the order queued.
	FollowUps(ctx context.Context, id uuid.UUID) ([]FollowUp, error)
	// DispatchMessage returns the message a dispatched delegation was sent
	// with, as queued, and when; ledger.ErrNotFound for a delegation
	// Quittance did not dispatch.
	DispatchMessage(ctx context.Context, id uuid.UUID) (json.RawMessage, time.Time, error)
	// InsertFollowUp queues a follow-up message.
	InsertFollowUp(ctx context.Context, m FollowUp) error
}

// outboundQueue is where outbound A2A calls are queued, in the transaction
// of the change that calls for them (compensation.ObservationTx's EnqueueOutbound).
type outboundQueue interface {
	// EnqueueOutbound queues an outbound A2A call for the delegation; at
	// most one job of a kind is open per delegation.
	EnqueueOutbound(ctx context.Context, j ledger.OutboundJob) error
}

// OrchestratorConfig wires an Orchestrator.
type OrchestratorConfig struct {
	// Store is the persistence.
	Store OrchestratorStore
	// Clock tells the time; the system clock when nil.
	Clock ledger.Clock
	// Wake, if set, is called once a follow-up message is queued, so that
	// the outbox worker sends it now rather than at its next tick: the
	// Worker's Wake.
	Wake func()
	// FetchTask asks org's agent for a task, with its history, and says
	// which interface answered: the Worker's FetchTask. On-call's
	// ResolveDispatch takes a task only once the agent shows it is the
	// delegation's; without it every resolution is refused.
	FetchTask func(ctx context.Context, org ledger.Org, taskID string) (a2a.Task, a2a.AgentInterface, error)
}

// Orchestrator is the orchestrating agent's side of a delegation Quittance
// dispatched: answering the remote task when it stops for input or
// authorization (Continue), and reading back those answers and the latest
// snapshot of the remote task. It queues work for the outbox and reads what
// the Worker recorded; it calls a remote agent only through FetchTask, to
// check the task on-call names (ResolveDispatch).
type Orchestrator struct {
	store     OrchestratorStore
	clock     ledger.Clock
	wake      func()
	fetchTask func(ctx context.Context, org ledger.Org, taskID string) (a2a.Task, a2a.AgentInterface, error)
}

// NewOrchestrator returns an Orchestrator.
func NewOrchestrator(cfg OrchestratorConfig) *Orchestrator {
	if cfg.Clock == nil {
		cfg.Clock = ledger.SystemClock{}
	}
	return &Orchestrator{store: cfg.Store, clock: cfg.Clock, wake: cfg.Wake, fetchTask: cfg.FetchTask}
}

// now is the clock's time at PostgreSQL's precision, as in the ledger.
func (o *Orchestrator) now() time.Time { return ledger.StoredTime(o.clock.Now()) }

// FollowUp returns a follow-up message of a delegation the principal may
// see.
func (o *Orchestrator) FollowUp(ctx context.Context, p ledger.Principal, id uuid.UUID, messageID string) (FollowUp, error) {
	if _, err := ledger.Visible(ctx, o.store, p, id); err != nil {
		return FollowUp{}, err
	}
	return o.store.FollowUp(ctx, id, messageID)
}

// SentMessage is a message Quittance sent, or queued to send, on a
// delegation's remote task: the dispatched one or a follow-up.
type SentMessage struct {
	// A2AMessageID is the messageId it is sent with.
	A2AMessageID string
	// Message is the message as JSON, {"parts": [...], "metadata": {...}},
	// as the orchestrator gave it.
	Message json.RawMessage
	// Status is queued, sent or failed (a dispatch is queued until it
	// named a remote task).
	Status string
	// At is when it was queued.
	At time.Time
}

// SentMessages returns the messages Quittance sent or queued on a
// delegation the principal may see, in the order queued: the dispatched
// message (for a delegation Quittance dispatched), then the follow-ups.
func (o *Orchestrator) SentMessages(ctx context.Context, p ledger.Principal, id uuid.UUID) ([]SentMessage, error) {
	d, err := ledger.Visible(ctx, o.store, p, id)
	if err != nil {
		return nil, err
	}
	var out []SentMessage
	msg, at, err := o.store.DispatchMessage(ctx, id)
	switch {
	case err == nil:
		st := MessageQueued
		if d.Remote.TaskID != "" {
			st = MessageSent
		}
		out = append(out, SentMessage{A2AMessageID: DispatchMessageID(id), Message: msg, Status: st, At: at})
	case !errors.Is(err, ledger.ErrNotFound):
		return nil, err
	}
	follow, err := o.store.FollowUps(ctx, id)
	if err != nil {
		return nil, err
	}
	for _, m := range follow {
		out = append(out, SentMessage{A2AMessageID: m.A2AMessageID, Message: m.Payload, Status: m.Status, At: m.CreatedAt})
	}
	return out, nil
}

// TaskSnapshot returns the latest remote task snapshot of a delegation the
// principal may see; ledger.ErrNotFound when nothing was observed yet.
func (o *Orchestrator) TaskSnapshot(ctx context.Context, p ledger.Principal, id uuid.UUID) (TaskSnapshot, error) {
	if _, err := ledger.Visible(ctx, o.store, p, id); err != nil {
		return TaskSnapshot{}, err
	}
	return o.store.TaskSnapshot(ctx, id)
}

// RemoteTasks returns the extra remote tasks recorded on delegation id (the
// tasks its org's agent created besides the one the delegation tracks),
// oldest first, for a principal who may see the delegation: what keeps
// the obligation open until each is accounted for.
func (o *Orchestrator) RemoteTasks(ctx context.Context, p ledger.Principal, id uuid.UUID) ([]RemoteTask, error) {
	if _, err := ledger.Visible(ctx, o.store, p, id); err != nil {
		return nil, err
	}
	return o.store.RemoteTasks(ctx, id)
}

// AgentOrg returns the org an orchestrator may delegate to through the
// A2A gateway: registered with an agent card URL and its identity not
// revoked. Any other org is ledger.ErrNotFound (ledger.ErrForbidden for a
// role that may not delegate at all), so the gateway's answer is the same
// for an org that does not exist and one it does not serve; and so is
// every org while no budget names the principal's tenant, whose
// orchestrators learn nothing of the orgs (ledger/DESIGN.md §2.3).
func (o *Orchestrator) AgentOrg(ctx context.Context, p ledger.Principal, orgID string) (ledger.Org, error) {
	if err := ledger.Authorize(p, ledger.ActionDelegate); err != nil {
		return ledger.Org{}, err
	}
	named, err := o.store.BudgetNamesTenant(ctx, p.Tenant)
	if err != nil {
		return ledger.Org{}, err
	}
	if !named {
		return ledger.Org{}, fmt.Errorf("no budget names tenant %s: %w", p.Tenant, ledger.ErrNotFound)
	}
	org, err := o.store.Org(ctx, orgID)
	if err != nil {
		return ledger.Org{}, err
	}
	if org.AgentCardURL == "" || org.IdentityRevoked() {
		return ledger.Org{}, fmt.Errorf("org %s serves no agent: %w", orgID, ledger.ErrNotFound)
	}
	return org, nil
}
