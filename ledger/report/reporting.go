package report

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/audit"

	"github.com/google/uuid"
)

// PendingObligationStates are the states GET /v1/obligations lists by
// default: the remote task ended, the gate applied, and the hold is still
// active.
var PendingObligationStates = []ledger.ObligationState{
	ledger.ObligationRevocationPendingCompensation, ledger.ObligationCompensationUnconfirmed, ledger.ObligationEscalated,
}

// ActiveObligationStates are the states whose hold is active.
var ActiveObligationStates = []ledger.ObligationState{
	ledger.ObligationHeld, ledger.ObligationRevocationPendingCompensation, ledger.ObligationCompensationUnconfirmed, ledger.ObligationEscalated,
}

// ObligationCursor is the position after which a page of obligations starts:
// obligations are listed oldest first, by creation time then id.
type ObligationCursor struct {
	CreatedAt time.Time
	ID        uuid.UUID
}

// IsZero reports whether the cursor is unset (start from the beginning).
func (c ObligationCursor) IsZero() bool { return c.CreatedAt.IsZero() && c.ID == uuid.Nil }

// ObligationQuery selects obligations for reconciliation. Empty fields match
// all; an empty States means PendingObligationStates.
type ObligationQuery struct {
	States []ledger.ObligationState
	OrgID  string
	Tenant string
	// OlderThan keeps only obligations created more than this long before
	// the query's time; zero keeps all.
	OlderThan time.Duration
	After     ObligationCursor
	// Condition, when set, keeps only obligations in that condition
	// (ConditionDispatchUnknown, ConditionTaskNotFound).
	Condition string
	// Limit bounds the rows; zero means no bound (a streamed export).
	Limit int
}

// ObligationRow is one obligation as reconciliation sees it.
type ObligationRow struct {
	DelegationID          uuid.UUID
	Tenant                string
	OrgID                 string
	TaskClass             string
	BudgetID              string
	Amount                ledger.Money
	RemoteTaskID          string
	TaskStatus            ledger.TaskStatus
	ObligationState       ledger.ObligationState
	ObligationReason      string
	CancelRequestedAt     time.Time
	CompensationDeadline  time.Time
	CompensationAttempts  int
	CompensationLastError string
	CreatedAt             time.Time
	UpdatedAt             time.Time
	// LastEvidenceType and LastEvidenceAt describe the last event appended
	// to the delegation's stream.
	LastEvidenceType ledger.EventType
	LastEvidenceAt   time.Time
	// DispatchUnknownAt is when the delegation entered the dispatch_unknown
	// condition; zero when it is not in it.
	DispatchUnknownAt time.Time
	// BusinessOperationID is the orchestrator's own id of the operation,
	// unique per tenant: the name people know the obligation by.
	BusinessOperationID string
	// TaskNotFoundAt is when the delegation entered the task_not_found
	// condition; zero when it is not in it.
	TaskNotFoundAt time.Time
}

// ConditionDispatchUnknown is the condition of a delegation whose dispatch
// outcome nothing proves: an attempt that may have reached the agent was
// followed by a refusal or a direct message reply, or the dispatch gave up
// after it. Its obligation is held (the hold stays active) with no remote
// task id, until a task id is recorded or a person decides.
const ConditionDispatchUnknown = "dispatch_unknown"

// ConditionTaskNotFound is the condition of a delegation whose remote task
// its agent answered with TaskNotFoundError (it may have purged it): that
// proves nothing of the task's end or effects, so the hold stays, in
// whatever state the obligation is, until the agent returns the task again
// or evidence or a person moves the obligation.
const ConditionTaskNotFound = "task_not_found"

// Cursor is the position just after r.
func (r ObligationRow) Cursor() ObligationCursor {
	return ObligationCursor{CreatedAt: r.CreatedAt, ID: r.DelegationID}
}

// SummaryQuery selects the active holds a summary covers. An empty States
// means ActiveObligationStates.
type SummaryQuery struct {
	States []ledger.ObligationState
	OrgID  string
	Tenant string
}

// AgeBucket is a count and an amount of obligations of one age range.
type AgeBucket struct {
	Count       int64
	AmountMinor int64
}

// SummaryRow is the active holds of one org, currency and obligation state.
type SummaryRow struct {
	OrgID           string
	Currency        string
	ObligationState ledger.ObligationState
	Count           int64
	AmountMinor     int64
	// Buckets are by age at the summary's time: under 1 day, 1 to 7 days,
	// 7 to 30 days, over 30 days.
	Under1Day, Days1To7, Days7To30, Over30Days AgeBucket
}

// AnomalyKind classifies an anomaly for reconciliation.
type AnomalyKind string

// The anomaly kinds.
const (
	// AnomalyStatusConflict: a different task status, terminal or not,
	// after a terminal one, which is immutable.
	AnomalyStatusConflict AnomalyKind = "status_conflict"
	// AnomalyLateEvidence: evidence that arrived after the obligation ended.
	AnomalyLateEvidence AnomalyKind = "late_evidence"
	// AnomalyContradictedWriteOff: late evidence (an ack) contradicting a
	// write-off: the loss booked may not have happened.
	AnomalyContradictedWriteOff AnomalyKind = "contradicted_write_off"
	// AnomalyRefusedToken: a signed ack or declaration that was refused.
	AnomalyRefusedToken AnomalyKind = "refused_token"
	// AnomalyEvidenceConflict: evidence carrying the compensation
	// idempotency key with another payload than the evidence accepted for
	// it: the remote org says two different things about one obligation.
	AnomalyEvidenceConflict AnomalyKind = "evidence_conflict"
	// AnomalyUnusedEarlyEvidence: evidence received while the obligation
	// was held, for a task that then ended without calling for
	// compensation (it completed, was rejected, or was not gated).
	AnomalyUnusedEarlyEvidence AnomalyKind = "unused_early_evidence"
	// AnomalyReleasedOnRevokedIdentity: an obligation released on a
	// declaration of an org whose identity was revoked since; listed until
	// finance acknowledges it.
	AnomalyReleasedOnRevokedIdentity AnomalyKind = "released_on_revoked_identity"
	// AnomalySharedRemoteTask: a remote task id of one org recorded by
	// delegations of more than one tenant (SharedRemoteTask). It is read
	// from the delegations as they are, not from events.
	AnomalySharedRemoteTask AnomalyKind = "shared_remote_task"
	// AnomalyExtraTaskCompensation: an extra remote task of a delegation
	// whose tracked task completed may have committed effects (a duplicate
	// purchase order): compensation of it is requested, and it is listed
	// until a receipt resolves it or on-call writes it off.
	AnomalyExtraTaskCompensation AnomalyKind = "extra_task_compensation"
)

// AnomalyKinds lists every anomaly kind read from events. Besides them,
// AnomalySharedRemoteTask is read from the delegations, and refused
// tokens (AnomalyRefusedToken) from their counts too (TokenRefusalTotal).
var AnomalyKinds = []AnomalyKind{
	AnomalyStatusConflict, AnomalyLateEvidence, AnomalyContradictedWriteOff, AnomalyRefusedToken,
	AnomalyEvidenceConflict, AnomalyUnusedEarlyEvidence, AnomalyReleasedOnRevokedIdentity,
	AnomalyExtraTaskCompensation,
}

// AnomalyEventTypes are the event types anomalies are read from.
var AnomalyEventTypes = []ledger.EventType{
	ledger.EventTypeStatusConflict, ledger.EventTypeLateEvidence, ledger.EventTypeTokenRefused,
	ledger.EventTypeEvidenceConflict, ledger.EventTypeEarlyEvidenceUnused, ledger.EventTypeReleasedOnRevokedIdentity,
	ledger.EventTypeExtraTaskCompensationRequired,
}

// AnomalyQuery selects anomalies. Empty fields match all.
type AnomalyQuery struct {
	Kinds []AnomalyKind
	// Since keeps anomalies recorded at or after it.
	Since time.Time
	// AfterSeq is the cursor: the seq of the last anomaly already seen.
	AfterSeq int64
	Limit    int
}

// Anomaly is one anomaly event.
type Anomaly struct {
	Seq             int64
	Kind            AnomalyKind
	EventType       ledger.EventType
	DelegationID    uuid.UUID
	OrgID           string
	Tenant          string
	ObligationState ledger.ObligationState
	At              time.Time
	Actor           string
	Data            json.RawMessage
}

// ClassifyAnomaly returns the anomaly kind of an event, and false for an
// event that is not an anomaly.
func ClassifyAnomaly(eventType ledger.EventType, data json.RawMessage) (AnomalyKind, bool) {
	switch eventType {
	case ledger.EventTypeStatusConflict:
		return AnomalyStatusConflict, true
	case ledger.EventTypeTokenRefused:
		return AnomalyRefusedToken, true
	case ledger.EventTypeEvidenceConflict:
		return AnomalyEvidenceConflict, true
	case ledger.EventTypeEarlyEvidenceUnused:
		return AnomalyUnusedEarlyEvidence, true
	case ledger.EventTypeReleasedOnRevokedIdentity:
		return AnomalyReleasedOnRevokedIdentity, true
	case ledger.EventTypeExtraTaskCompensationRequired:
		return AnomalyExtraTaskCompensation, true
	case ledger.EventTypeLateEvidence:
		var d struct {
			ContradictsWriteOff bool `json:"contradicts_write_off"`
		}
		if json.Unmarshal(data, &d) == nil && d.ContradictsWriteOff {
			return AnomalyContradictedWriteOff, true
		}
		return AnomalyLateEvidence, true
	}
	return "", false
}

// ReportStore is the read side reporting needs. Obligations streams rows to
// fn from one consistent snapshot, without holding them all in memory; fn's
// error stops the stream and is returned.
type ReportStore interface {
	Obligations(ctx context.Context, q ObligationQuery, now time.Time, fn func(ObligationRow) error) error
	ObligationSummary(ctx context.Context, q SummaryQuery, now time.Time) ([]SummaryRow, error)
	// Anomalies returns anomalies in seq order; the caller filters kinds.
	Anomalies(ctx context.Context, q AnomalyQuery) ([]Anomaly, error)
	// RevokedReleaseTotals returns the unacknowledged releases on revoked
	// identities by org and currency (q's OrgID and Tenant filter).
	RevokedReleaseTotals(ctx context.Context, q SummaryQuery) ([]RevokedReleaseTotal, error)
	TokenRefusalReader
}

// Reports answers finance's and on-call's reconciliation questions. Every
// method requires the finance or oncall role.
type Reports struct {
	store  ReportStore
	reader ledger.Reader
	storedClock
}

// ReportsConfig wires Reports.
type ReportsConfig struct {
	Store  ReportStore
	Reader ledger.Reader
	Clock  ledger.Clock
}

// NewReports returns Reports.
func NewReports(cfg ReportsConfig) *Reports {
	return &Reports{store: cfg.Store, reader: cfg.Reader, storedClock: newStoredClock(cfg.Clock)}
}

// Maximum page sizes of the JSON listings.
const (
	MaxReportLimit     = 1000
	DefaultReportLimit = 100
)

func checkStates(field string, states []ledger.ObligationState, dflt []ledger.ObligationState) ([]ledger.ObligationState, error) {
	if len(states) == 0 {
		return dflt, nil
	}
	for _, s := range states {
		if _, err := ledger.ParseObligationState(string(s)); err != nil {
			return nil, ledger.Invalid(field, "%q is not an obligation state", s)
		}
	}
	return states, nil
}

func checkLimit(limit int, streamed bool) (int, error) {
	switch {
	case limit == 0 && streamed:
		return 0, nil
	case limit == 0:
		return DefaultReportLimit, nil
	case limit < 1 || limit > MaxReportLimit:
		return 0, ledger.Invalid("limit", "must be between 1 and %d", MaxReportLimit)
	}
	return limit, nil
}

// EachObligation streams the obligations q selects to fn, oldest first, as
// of now; a zero q.Limit streams them all. It returns the time the ages
// were measured at.
func (r *Reports) EachObligation(ctx context.Context, p ledger.Principal, q ObligationQuery, fn func(ObligationRow) error) (time.Time, error) {
	if err := ledger.Authorize(p, ledger.ActionReadReports); err != nil {
		return time.Time{}, err
	}
	defaults := PendingObligationStates
	switch q.Condition {
	case "":
	case ConditionDispatchUnknown, ConditionTaskNotFound:
		// Both keep the hold active: list every active state.
		defaults = ActiveObligationStates
	default:
		return time.Time{}, ledger.Invalid("condition", "%q is not a condition (the ones there are: %s, %s)", q.Condition, ConditionDispatchUnknown, ConditionTaskNotFound)
	}
	var err error
	if q.States, err = checkStates("state", q.States, defaults); err != nil {
		return time.Time{}, err
	}
	if q.OlderThan < 0 {
		return time.Time{}, ledger.Invalid("older_than", "must not be negative")
	}
	if q.Limit, err = checkLimit(q.Limit, true); err != nil {
		return time.Time{}, err
	}
	now := r.Now()
	return now, r.store.Obligations(ctx, q, now, fn)
}

// Summary returns active holds by org, currency and state with age buckets.
func (r *Reports) Summary(ctx context.Context, p ledger.Principal, q SummaryQuery) ([]SummaryRow, time.Time, error) {
	if err := ledger.Authorize(p, ledger.ActionReadReports); err != nil {
		return nil, time.Time{}, err
	}
	var err error
	if q.States, err = checkStates("state", q.States, ActiveObligationStates); err != nil {
		return nil, time.Time{}, err
	}
	now := r.Now()
	rows, err := r.store.ObligationSummary(ctx, q, now)
	return rows, now, err
}

// Anomalies returns anomalies after q.AfterSeq, oldest first.
func (r *Reports) Anomalies(ctx context.Context, p ledger.Principal, q AnomalyQuery) ([]Anomaly, error) {
	if err := ledger.Authorize(p, ledger.ActionReadReports); err != nil {
		return nil, err
	}
	eventKinds := q.Kinds[:0:0]
	for _, k := range q.Kinds {
		if k == AnomalySharedRemoteTask {
			continue // no event holds it: see SharedRemoteTasks
		}
		if !slices.Contains(AnomalyKinds, k) {
			return nil, ledger.Invalid("kind", "%q is not an anomaly kind", k)
		}
		eventKinds = append(eventKinds, k)
	}
	var err error
	if q.Limit, err = checkLimit(q.Limit, false); err != nil {
		return nil, err
	}
	if len(q.Kinds) > 0 && len(eventKinds) == 0 {
		return nil, nil
	}
	q.Kinds = eventKinds
	if len(q.Kinds) == 0 {
		return r.store.Anomalies(ctx, q)
	}
	// Kinds are derived from event data, so filter here, reading on until
	// the page is full or the log is exhausted.
	var out []Anomaly
	for len(out) < q.Limit {
		page, err := r.store.Anomalies(ctx, q)
		if err != nil {
			return nil, err
		}
		for _, a := range page {
			if slices.Contains(q.Kinds, a.Kind) && len(out) < q.Limit {
				out = append(out, a)
			}
			q.AfterSeq = a.Seq
		}
		if len(page) < q.Limit {
			break
		}
	}
	return out, nil
}

// Evidence returns a delegation and its whole event chain, with every
// stored token, for re-verification.
func (r *Reports) Evidence(ctx context.Context, p ledger.Principal, id uuid.UUID) (ledger.Delegation, []ledger.Event, error) {
	if err := ledger.Authorize(p, ledger.ActionReadReports); err != nil {
		return ledger.Delegation{}, nil, err
	}
	d, err := r.reader.Delegation(ctx, id)
	if err != nil {
		return ledger.Delegation{}, nil, err
	}
	events, err := r.reader.StreamEvents(ctx, d.Stream())
	if err != nil {
		return ledger.Delegation{}, nil, fmt.Errorf("load evidence of %s: %w", id, err)
	}
	return d, events, nil
}

// EvidencePack assembles the evidence pack of a delegation
// (audit.AssemblePack) from the reports' reader, dated by their clock.
// ledgerID and ledgerJWKS are the ledger's identity, and anchor (nil: the
// ledger signs no checkpoints) its checkpoints, which the Reports do not
// hold.
func (r *Reports) EvidencePack(ctx context.Context, p ledger.Principal, id uuid.UUID, ledgerID string, ledgerJWKS []byte, anchor audit.PackAnchor) (audit.EvidencePack, error) {
	return audit.AssemblePack(ctx, p, id, audit.PackSource{Reader: r.reader, LedgerID: ledgerID, LedgerJWKS: ledgerJWKS, Anchor: anchor, Now: r.clock.Now()})
}
