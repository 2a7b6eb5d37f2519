package ledger

import (
	"context"

	"github.com/google/uuid"
)

// WriteKeys name the rows a write will lock, given to the store with the
// context of its InTx (WithWriteKeys). A store that coalesces writes
// locks those of every operation of a flush first, in one sorted order,
// so that two flushes touching the same rows (on one replica or two) wait
// for each other instead of deadlocking (ledger/DESIGN.md §5, "The write
// path"). They are a hint: a write that locks more than it names still
// runs, its other locks taken as it goes.
type WriteKeys struct {
	// Delegations are locked with their event streams.
	Delegations []uuid.UUID
	// Operations are business operation ids a creation records.
	Operations []OperationKey
	// RecordedTasks are remote tasks a creation records: the task's lock.
	RecordedTasks []RemoteTaskKey
	// RemoteTasks are remote tasks evidence names: the task's lock and
	// every delegation recording it.
	RemoteTasks []RemoteTaskKey
	// References are the org and budget a creation refers to: the org's
	// share lock, and both rows read for the whole flush.
	References []ReferenceKey
	// UsedTokens are token ids evidence may record as used, read for the
	// whole flush. Unlike the others they name no lock: a token id's
	// insert finds a use that raced it.
	UsedTokens []UsedTokenKey
}

// ReferenceKey is the org and the budget a creation refers to.
type ReferenceKey struct{ OrgID, BudgetID string }

// UsedTokenKey is an org's token id (its "jti").
type UsedTokenKey struct{ OrgID, JTI string }

// OperationKey is a tenant's business operation id: a creation's
// idempotency key.
type OperationKey struct{ Tenant, ID string }

// RemoteTaskKey is an org's remote task.
type RemoteTaskKey struct{ OrgID, TaskID string }

type writeKeysKey struct{}

// WithWriteKeys returns ctx carrying k, for the store's InTx.
func WithWriteKeys(ctx context.Context, k WriteKeys) context.Context {
	return context.WithValue(ctx, writeKeysKey{}, k)
}

// WriteKeysOf returns the write keys ctx carries, if any.
func WriteKeysOf(ctx context.Context) (WriteKeys, bool) {
	k, ok := ctx.Value(writeKeysKey{}).(WriteKeys)
	return k, ok
}
