package delegate

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/ledger"
)

// OrchestratorStore is the persistence the Orchestrator needs. Error
// contract: as ledger.Store; a missing row is ledger.ErrNotFound (wrapped).
type OrchestratorStore interface {
	ledger.Reader
	// InTx runs fn in one database transaction, committing if fn returns
	// nil; it retries fn on serialization failures, so fn must have no
	// effects outside the Tx.
	InTx(ctx context.Context, fn func(Tx) error) error
	// FollowUp returns a delegation's follow-up message, or ledger.ErrNotFound.
	FollowUp(ctx context.Context, id uuid.UUID, messageID string) (FollowUp, error)
	// TaskSnapshot returns the delegation's latest task snapshot, or
	// ledger.ErrNotFound when none was kept yet.
	TaskSnapshot(ctx context.Context, id uuid.UUID) (TaskSnapshot, error)
	// RemoteTasks lists the delegation's extra remote tasks, oldest first.
	RemoteTasks(ctx context.Context, id uuid.UUID) ([]RemoteTask, error)
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
}

// Orchestrator is the orchestrating agent's side of a delegation Quittance
// dispatched: answering the remote task when it stops for input or
// authorization (Continue), and reading back those answers and the latest
// snapshot of the remote task. It queues work for the outbox and reads what
// the Worker recorded; it never calls a remote agent itself.
type Orchestrator struct {
	store OrchestratorStore
	clock ledger.Clock
	wake  func()
}

// NewOrchestrator returns an Orchestrator.
func NewOrchestrator(cfg OrchestratorConfig) *Orchestrator {
	if cfg.Clock == nil {
		cfg.Clock = ledger.SystemClock{}
	}
	return &Orchestrator{store: cfg.Store, clock: cfg.Clock, wake: cfg.Wake}
}

// now is the clock's time at PostgreSQL's precision, as in the ledger.
func (o *Orchestrator) now() time.Time { return o.clock.Now().UTC().Truncate(time.Microsecond) }

// FollowUp returns a follow-up message of a delegation the principal may
// see.
func (o *Orchestrator) FollowUp(ctx context.Context, p ledger.Principal, id uuid.UUID, messageID string) (FollowUp, error) {
	if _, err := ledger.Visible(ctx, o.store, p, id); err != nil {
		return FollowUp{}, err
	}
	return o.store.FollowUp(ctx, id, messageID)
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
