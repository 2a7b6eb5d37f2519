package ledger

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// Clock tells the time. Services never call time.Now themselves, so tests
// can move time (ledger/DESIGN.md §2.2 invariant 2 is checked with a fake clock).
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns the current time.
func (SystemClock) Now() time.Time { return time.Now() }

// StoredTime is t as PostgreSQL stores a timestamptz: in UTC, to the
// microsecond. Services take their clock's time through it, so a time they
// compare or record equals the one read back.
func StoredTime(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// Store is the persistence the ledger needs. Every method takes the time it
// should record as a parameter; the store never reads a clock.
//
// Error contract, for Store and every transaction interface below: a
// missing row is ErrNotFound (wrapped); a failed conditional update is
// ErrConcurrentUpdate; a budget that cannot cover a hold is
// ErrInsufficientFunds. Any other error is the database's.
type Store interface {
	Reader
	// InTx runs fn in one database transaction, committing if fn returns
	// nil. Every state change, its hold movement and its event are written
	// through one Tx, so they commit together or not at all. InTx retries fn
	// on serialization failures and deadlocks, so fn must have no effects
	// outside the Tx.
	InTx(ctx context.Context, fn func(Tx) error) error
	// Ping reports whether the database is reachable and fully migrated.
	Ping(ctx context.Context) error
}

// Reader is the read side the ledger's services use outside a transaction.
// Error contract: as Store.
type Reader interface {
	Delegation(ctx context.Context, id uuid.UUID) (Delegation, error)
	ListDelegations(ctx context.Context, f DelegationFilter) ([]Delegation, error)
	// CountDelegations counts the delegations f's filters match, on every
	// page (its After and Limit aside).
	CountDelegations(ctx context.Context, f DelegationFilter) (int64, error)
	// StreamEvents returns a stream's events in stream order.
	StreamEvents(ctx context.Context, stream string) ([]Event, error)
	Budget(ctx context.Context, id string) (Budget, error)
	Org(ctx context.Context, id string) (Org, error)
	// OrgKeys returns the org's key history, every key it ever had, by
	// ValidFrom then kid; an org without keys has an empty history.
	OrgKeys(ctx context.Context, orgID string) ([]OrgKey, error)
	// OrgsWithJWKSURL returns every org whose keys come from a JWKS URL.
	OrgsWithJWKSURL(ctx context.Context) ([]Org, error)
	ThresholdReader
	// TaskClass returns the class, or ErrNotFound when none is registered.
	TaskClass(ctx context.Context, name string) (TaskClass, error)
	// TaskClasses returns every registered task class, by name.
	TaskClasses(ctx context.Context) ([]TaskClass, error)
	// TaskClassPolicy returns the task-class policy of tenant at org, or
	// ErrNotFound when none is set.
	TaskClassPolicy(ctx context.Context, org, tenant string) (TaskClassPolicy, error)
	// TaskClassPolicies returns the task-class policies at org, by tenant.
	TaskClassPolicies(ctx context.Context, org string) ([]TaskClassPolicy, error)
	// DelegationLinks returns the links from and to a delegation.
	DelegationLinks(ctx context.Context, id uuid.UUID) ([]DelegationLink, error)
}

// The transaction interfaces. Each exported function that works inside a
// transaction takes the smallest of them it needs, so another domain's
// transaction (compensation.Tx, delegate.Tx) can be passed to it without
// being the ledger's whole Tx.

// EventAppender appends events: what Append and Record write through.
// Error contract: as Store.
type EventAppender interface {
	// AppendEvent appends e to its stream, filling StreamSeq, PrevHash and
	// Hash. Seq is left 0: the store may write a transaction's events
	// together, at its end (ledger/DESIGN.md §5, "The write path"); a read
	// of the stream in the same transaction sees e with its Seq. Appends to
	// one stream are serialized. A caller that created
	// the stream's owner in this transaction sets StreamSeq to 1: the event
	// is then appended as the stream's first without reading its head, and
	// refused if the stream has events after all. A delegation's event is
	// queued, in the same statement, for delivery to every webhook endpoint
	// of its tenant that subscribes to its type.
	AppendEvent(ctx context.Context, e Event) (Event, error)
}

// DelegationLocker locks delegations: what LockVisible needs.
// Error contract: as Store.
type DelegationLocker interface {
	// DelegationForUpdate loads a delegation and locks its row until the
	// transaction ends.
	DelegationForUpdate(ctx context.Context, id uuid.UUID) (Delegation, error)
}

// ChangeTx is what Apply writes a change through: the delegation, its
// event and its hold. Error contract: as Store.
type ChangeTx interface {
	EventAppender
	// UpdateDelegation writes d's mutable fields if the stored version is
	// d.Version-1, else fails the transaction with ErrConcurrentUpdate
	// (reported, like MoveBudget's refusal, by its next statement or its
	// commit).
	UpdateDelegation(ctx context.Context, d Delegation) error
	// MoveBudget applies one movement and journals it. It may be sent
	// with the transaction's next statement or its commit, and its refusal
	// reported there: a hold larger than the available amount fails the
	// transaction with ErrInsufficientFunds, and nothing of it is
	// committed. Put it last, just before the commit: the budget row is
	// the one many delegations share.
	MoveBudget(ctx context.Context, m BudgetMove) error
}

// Tx is a database transaction of the ledger's own services (Service):
// everything they read and write inside one. Error contract: as Store.
type Tx interface {
	ChangeTx
	DelegationLocker
	// DelegationDispatchForUpdate loads a delegation and locks its row
	// until the transaction ends, as DelegationForUpdate, with what
	// Quittance knows of its own dispatch of it, in one round trip.
	DelegationDispatchForUpdate(ctx context.Context, id uuid.UUID) (Delegation, DispatchState, error)
	// EnqueueOutbound queues an outbound A2A call for the delegation, in the
	// transaction of the change that calls for it, so a crash can delay the
	// call but never lose it. At most one job of a kind is open per
	// delegation: enqueuing again only brings the open one forward. A
	// dispatch job also marks the delegation as dispatched by Quittance.
	EnqueueOutbound(ctx context.Context, j OutboundJob) error
	Delegation(ctx context.Context, id uuid.UUID) (Delegation, error)
	DelegationByOperation(ctx context.Context, tenant, businessOperationID string) (Delegation, error)
	Org(ctx context.Context, id string) (Org, error)
	// CreationReferences loads the org and the budget a new delegation
	// refers to, in one round trip, and holds a share lock on the org until
	// the transaction ends, so its identity cannot be revoked meanwhile. It
	// returns ErrNotFound when either is missing.
	CreationReferences(ctx context.Context, orgID, budgetID string) (Org, Budget, error)
	// InsertDelegation inserts d unless a delegation with the same tenant and
	// business operation id, or the same org and remote task id, exists;
	// inserted is false in that case.
	InsertDelegation(ctx context.Context, d Delegation) (inserted bool, err error)
	// InsertDelegationLink records that l.From refers to l.To.
	InsertDelegationLink(ctx context.Context, l DelegationLink, at time.Time) error
	// BudgetForUpdate loads a budget and locks its row until the
	// transaction ends, so a funding change is computed from a balance no
	// one else moves meanwhile.
	BudgetForUpdate(ctx context.Context, id string) (Budget, error)
	// InsertBudget creates a budget with nothing funded; funding is a
	// MoveBudget of kind MoveFund.
	InsertBudget(ctx context.Context, b Budget) error
	// Budget loads a budget without locking it (a hold's raise reads whom
	// it serves; the movement itself locks the row, last).
	Budget(ctx context.Context, id string) (Budget, error)
	// SetBudgetTenants replaces the tenants whose orchestrators may hold
	// on the budget.
	SetBudgetTenants(ctx context.Context, id string, tenants []string, at time.Time) error
	// Admin is the same transaction, for the administration of orgs,
	// their keys, task classes and write-off thresholds.
	Admin() AdminTx
	// InsertPendingChange records a privileged change waiting for its
	// second person (RequestChange).
	InsertPendingChange(ctx context.Context, c PendingChange) error
}

// AdminTx is the part of a transaction that administers orgs, their
// signing keys and JWKS URL state, task classes and their policies, and
// the write-off thresholds (Tx.Admin). Error contract: as Store.
type AdminTx interface {
	// OrgKeys returns the org's key history (as Reader.OrgKeys).
	OrgKeys(ctx context.Context, orgID string) ([]OrgKey, error)
	// PutOrg creates or updates an org. It never clears a recorded identity
	// revocation.
	PutOrg(ctx context.Context, o Org) error
	// OrgForUpdate loads an org and locks its row until the transaction
	// ends.
	OrgForUpdate(ctx context.Context, id string) (Org, error)
	// RecordOrgJWKSFetch stores f as the org's JWKS URL state, provided the
	// org's JWKS URL is still url.
	RecordOrgJWKSFetch(ctx context.Context, orgID, url string, f JWKSFetch) error
	// RecordOrgCard stores the last check of the org's agent card and its
	// pin (a zero pin: none).
	RecordOrgCard(ctx context.Context, orgID string, check CardCheck, pin CardPin) error
	// InsertOrgKey records a key of the org coming into force at
	// k.ValidFrom.
	InsertOrgKey(ctx context.Context, k OrgKey) error
	// EndOrgKey records that the recorded key k stops being in force at
	// until.
	EndOrgKey(ctx context.Context, k OrgKey, until time.Time) error
	// PutTaskClass creates or updates a task class.
	PutTaskClass(ctx context.Context, c TaskClass) error
	// TaskClassPolicy returns the task-class policy of tenant at org, or
	// ErrNotFound (as Reader.TaskClassPolicy).
	TaskClassPolicy(ctx context.Context, org, tenant string) (TaskClassPolicy, error)
	// PutTaskClassPolicy creates or replaces a task-class policy.
	PutTaskClassPolicy(ctx context.Context, pol TaskClassPolicy) error
	ThresholdReader
	// PutWriteOffThreshold stores the write-off approval threshold.
	PutWriteOffThreshold(ctx context.Context, t WriteOffThreshold) error
	// PutCurrencyWriteOffThreshold stores the threshold of t.Currency.
	PutCurrencyWriteOffThreshold(ctx context.Context, t WriteOffThreshold) error
	// TaskClass returns the class, or ErrNotFound when none is registered.
	TaskClass(ctx context.Context, name string) (TaskClass, error)
}

// OutboundKind names an outbound A2A call Quittance makes on a delegation's
// behalf.
type OutboundKind string

// The outbound calls.
const (
	// OutboundDispatch sends the delegated message to the remote agent.
	OutboundDispatch OutboundKind = "dispatch"
	// OutboundCancel asks the remote agent to cancel the task.
	OutboundCancel OutboundKind = "cancel"
	// OutboundCompensationRequest asks the remote agent to compensate the
	// effects of a task that ended while the gate applied.
	OutboundCompensationRequest OutboundKind = "compensation_request"
	// OutboundObserve fetches the remote task to confirm a push notification
	// or poll a task not heard of for a while.
	OutboundObserve OutboundKind = "observe"
	// OutboundMessage sends the queued follow-up messages of a delegation
	// (answers to an input_required or auth_required task), in order.
	OutboundMessage OutboundKind = "message"
)

// OutboundJob is an outbound A2A call waiting to be made.
type OutboundJob struct {
	// DelegationID is the delegation the call is made for.
	DelegationID uuid.UUID
	// Kind is the call.
	Kind OutboundKind
	// Payload is the call's input as JSON (the message of a dispatch); nil
	// for calls that need nothing but the delegation.
	Payload []byte
	// RunAfter is the earliest time the call may be made.
	RunAfter time.Time
	// At is when the job is enqueued.
	At time.Time
}
