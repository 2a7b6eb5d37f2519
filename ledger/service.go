package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/ledger/failpoint"
)

// Service is the ledger's use cases: recording delegations, their task
// status, budgets, orgs and task classes, and asking for the pending
// changes of these (principals and credentials are ledger/access's). It
// holds no state of its own; everything is in the Store.
type Service struct {
	store            Store
	clock            Clock
	validateJWKS     func([]byte) error
	validateAgent    func(cardURL string, allowedHosts []string) error
	validateDispatch func(message []byte) error
	changes          changePolicy
	jwks             *orgJWKS
	// thresholds are the configured write-off approval thresholds, in
	// force until approved changes set others (EffectiveWriteOffThresholds).
	thresholds ThresholdConfig
}

// Config wires a Service.
type Config struct {
	Store Store
	Clock Clock
	// ValidateJWKS checks a JWK Set an admin registers for an org. The
	// signature rules live in the compensation package; the ledger only
	// refuses what it rejects.
	ValidateJWKS func([]byte) error
	// ValidateAgentEndpoint checks the agent card URL and allowed hosts an
	// admin registers for an org (the egress rules live in delegate/egress).
	// Nil accepts any.
	ValidateAgentEndpoint func(cardURL string, allowedHosts []string) error
	// ValidateDispatchMessage checks the A2A message of a delegation that
	// Quittance is to dispatch itself. Nil accepts any JSON object.
	ValidateDispatchMessage func(message []byte) error
	// Dev is what `quittance dev` (make run) runs: changes made with the
	// bootstrap credential take effect at once, so one developer can try
	// everything alone. Every other principal is held to the two-person
	// rule in every mode (the access service's Dev must be the same).
	Dev bool
	// PendingChangeTTL is how long a privileged change waits for its
	// approval before it expires (default 24h).
	PendingChangeTTL time.Duration
	// WriteOffApprovalThresholdMinor is the configured initial write-off
	// approval threshold; changing it is a pending change.
	WriteOffApprovalThresholdMinor int64
	// WriteOffApprovalThresholdsMinor are configured initial thresholds of
	// their own for some currencies (ISO 4217 code to minor units).
	WriteOffApprovalThresholdsMinor map[string]int64
	// FetchJWKS fetches the JWK Set at an org's JWKS URL, through the
	// SSRF-safe egress client (the ledger makes no HTTP call itself). Nil
	// fetches nothing: orgs registered by URL then have no keys in force.
	FetchJWKS func(ctx context.Context, url string) ([]byte, error)
	// ValidateJWKSURL checks the JWKS URL an admin registers for an org
	// (the egress rules). Nil accepts any.
	ValidateJWKSURL func(url string) error
	// OrgJWKSUnknownKidInterval is the shortest time between two fetches of
	// one org's JWKS URL for tokens naming an unknown kid
	// (DefaultOrgJWKSUnknownKidInterval when zero).
	OrgJWKSUnknownKidInterval time.Duration
	// ObserveOrgJWKSFetch is told the outcome of every JWKS URL fetch
	// (JWKSFetchChanged, JWKSFetchUnchanged, JWKSFetchFailed), for the
	// metrics. Nil observes nothing.
	ObserveOrgJWKSFetch func(outcome string)
	// Log receives operational logs of the JWKS URL fetches. Nil discards.
	Log *slog.Logger
}

// NewService returns a Service.
func NewService(cfg Config) *Service {
	if cfg.Clock == nil {
		cfg.Clock = SystemClock{}
	}
	if cfg.ValidateJWKS == nil {
		cfg.ValidateJWKS = func([]byte) error { return nil }
	}
	if cfg.ValidateAgentEndpoint == nil {
		cfg.ValidateAgentEndpoint = func(string, []string) error { return nil }
	}
	if cfg.ValidateDispatchMessage == nil {
		cfg.ValidateDispatchMessage = func([]byte) error { return nil }
	}
	if cfg.PendingChangeTTL <= 0 {
		cfg.PendingChangeTTL = DefaultPendingChangeTTL
	}
	if cfg.ValidateJWKSURL == nil {
		cfg.ValidateJWKSURL = func(string) error { return nil }
	}
	if cfg.OrgJWKSUnknownKidInterval <= 0 {
		cfg.OrgJWKSUnknownKidInterval = DefaultOrgJWKSUnknownKidInterval
	}
	if cfg.ObserveOrgJWKSFetch == nil {
		cfg.ObserveOrgJWKSFetch = func(string) {}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Service{
		jwks: &orgJWKS{
			fetch: cfg.FetchJWKS, validateURL: cfg.ValidateJWKSURL, kidInterval: cfg.OrgJWKSUnknownKidInterval,
			observe: cfg.ObserveOrgJWKSFetch, log: cfg.Log,
		},
		store: cfg.Store, clock: cfg.Clock, validateJWKS: cfg.ValidateJWKS,
		validateAgent: cfg.ValidateAgentEndpoint, validateDispatch: cfg.ValidateDispatchMessage,
		changes:    changePolicy{dev: cfg.Dev, pendingTTL: cfg.PendingChangeTTL},
		thresholds: ThresholdConfig{DefaultMinor: cfg.WriteOffApprovalThresholdMinor, Currencies: cfg.WriteOffApprovalThresholdsMinor},
	}
}

// Now is the service clock's time at PostgreSQL's precision (microseconds),
// so what is hashed into an event equals what is read back.
func (s *Service) Now() time.Time { return StoredTime(s.clock.Now()) }

// MaxTextLen is the longest free text (a message, a reason, a note) the
// ledger records.
const MaxTextLen = 4096

var (
	idPattern        = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)
	classPattern     = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)
	currencyPattern  = regexp.MustCompile(`^[A-Z]{3}$`)
	maxRemoteIDLen   = 256
	maxOperationLen  = 200
	MaxListLimit     = 500
	DefaultListLimit = 50
)

// CheckID refuses an id (of an org, a budget, a tenant) that is not 1-128
// characters of letters, digits, '.', '_', ':' or '-'.
func CheckID(field, v string) error {
	if !idPattern.MatchString(v) {
		return Invalid(field, "must be 1-128 characters of letters, digits, '.', '_', ':' or '-', starting with a letter or digit")
	}
	return nil
}

// CheckCurrency refuses a currency that is not an ISO 4217 code.
func CheckCurrency(field, v string) error {
	if !currencyPattern.MatchString(v) {
		return Invalid(field, "must be an ISO 4217 code of three upper-case letters")
	}
	return nil
}

// CreateInput is a request to record a delegation. Exactly one of Remote
// (the orchestrator dispatched the work itself and reports the remote task)
// and Dispatch (Quittance is to send the work) is given.
type CreateInput struct {
	BusinessOperationID string
	OrgID               string
	TaskClass           string
	BudgetID            string
	Hold                Money
	Remote              RemoteTask
	// Dispatch, when set, asks Quittance to send the work to the org's
	// agent itself, after placing the hold.
	Dispatch *DispatchInput
	// ContextFrom, when set, names a delegation (with the same org) whose
	// remote context the new task is sent in: a refinement of its work.
	ContextFrom uuid.UUID
	// References name delegations (with the same org) whose remote tasks
	// the new task references (A2A referenceTaskIds).
	References []uuid.UUID
}

// DispatchInput is the work Quittance sends to the remote agent for a
// delegation it dispatches.
type DispatchInput struct {
	// Message is the A2A message to send, as a JSON object with "parts"
	// and optionally "metadata". Quittance sets its id, role and context.
	Message json.RawMessage
}

// maxDispatchMessageBytes caps the message of a dispatched delegation.
const maxDispatchMessageBytes = 256 << 10

func (in CreateInput) validate() error {
	switch {
	case strings.TrimSpace(in.BusinessOperationID) == "" || len(in.BusinessOperationID) > maxOperationLen:
		return Invalid("business_operation_id", "is required, at most %d characters", maxOperationLen)
	case in.Hold.AmountMinor <= 0:
		return Invalid("hold.amount_minor", "must be a positive integer number of minor units")
	case in.Dispatch != nil && (in.Remote != RemoteTask{}):
		return Invalid("dispatch", "cannot be combined with remote: either report the remote task or let Quittance dispatch")
	case in.Dispatch != nil && (len(in.Dispatch.Message) == 0 || len(in.Dispatch.Message) > maxDispatchMessageBytes):
		return Invalid("dispatch.message", "is required, at most %d bytes", maxDispatchMessageBytes)
	case in.Dispatch == nil && (in.Remote.TaskID == "" || len(in.Remote.TaskID) > maxRemoteIDLen):
		return Invalid("remote.task_id", "is required, at most %d characters", maxRemoteIDLen)
	case len(in.Remote.ContextID) > maxRemoteIDLen:
		return Invalid("remote.context_id", "is at most %d characters", maxRemoteIDLen)
	case !classPattern.MatchString(in.TaskClass):
		return Invalid("task_class", "must be lower-case letters, digits and '_', starting with a letter")
	}
	if err := CheckID("org_id", in.OrgID); err != nil {
		return err
	}
	if err := CheckID("budget_id", in.BudgetID); err != nil {
		return err
	}
	return CheckCurrency("hold.currency", in.Hold.Currency)
}

// hash fingerprints the request so an idempotent retry can be told from a
// different request reusing the same business operation id.
func (in CreateInput) hash() []byte {
	fields := []string{
		in.OrgID, in.TaskClass, in.BudgetID, fmt.Sprint(in.Hold.AmountMinor), in.Hold.Currency,
		in.Remote.TaskID, in.Remote.ContextID,
	}
	if in.Dispatch != nil {
		sum := sha256.Sum256(in.Dispatch.Message)
		fields = append(fields, "dispatch", fmt.Sprintf("%x", sum))
	}
	if in.ContextFrom != uuid.Nil {
		fields = append(fields, "context_from", in.ContextFrom.String())
	}
	for _, id := range in.References {
		fields = append(fields, "reference", id.String())
	}
	b, _ := json.Marshal(fields)
	sum := sha256.Sum256(b)
	return sum[:]
}

// checkReferences checks, in tx, what a new delegation refers to: its
// budget, which must name the caller's tenant (Budget.HoldsFor), its org
// (held with a share lock, so a revocation cannot commit in between) and
// its links. A budget the tenant may not hold on is refused exactly as one
// that does not exist, and before anything else is checked, so an
// orchestrator learns nothing about other tenants' budgets (not whether
// they exist, nor their currency or balance) and, with no budget of its
// own, nothing about orgs either.
func checkReferences(ctx context.Context, tx Tx, p Principal, in CreateInput) error {
	revoked := func(org Org) error {
		return Conflict("org_identity_revoked", "org %s's agent identity is revoked; no new delegations", org.ID)
	}
	noBudget := &ReferenceError{Field: "budget_id", ID: in.BudgetID}
	org, budget, err := tx.CreationReferences(ctx, in.OrgID, in.BudgetID)
	if errors.Is(err, ErrNotFound) {
		// Say which is missing: the budget first.
		budget, err := tx.Budget(ctx, in.BudgetID)
		switch {
		case errors.Is(err, ErrNotFound) || (err == nil && !budget.HoldsFor(p.Tenant)):
			return noBudget
		case err != nil:
			return err
		}
		return &ReferenceError{Field: "org_id", ID: in.OrgID}
	} else if err != nil {
		return err
	}
	if !budget.HoldsFor(p.Tenant) {
		return noBudget
	}
	if org.IdentityRevoked() {
		return revoked(org)
	}
	if budget.Currency != in.Hold.Currency {
		return Conflict("currency_mismatch", "budget %s is in %s, the hold is in %s", budget.ID, budget.Currency, in.Hold.Currency)
	}
	if err := checkLinks(ctx, tx, p, in); err != nil {
		return err
	}
	if in.Dispatch != nil && org.AgentCardURL == "" {
		return Conflict("org_has_no_agent", "org %s has no registered agent card to dispatch to", org.ID)
	}
	return nil
}

// CreateDelegation records a delegation and places its hold, in one
// transaction. It is idempotent per tenant on BusinessOperationID: the same
// request again returns the recorded delegation with created false and no
// second hold; a different request with the same id is ErrIdempotencyMismatch.
func (s *Service) CreateDelegation(ctx context.Context, p Principal, in CreateInput) (d Delegation, created bool, err error) {
	if err := s.checkCreateInput(p, in); err != nil {
		return Delegation{}, false, err
	}
	hash := in.hash()
	keys := WriteKeys{
		Operations: []OperationKey{{Tenant: p.Tenant, ID: in.BusinessOperationID}},
		References: []ReferenceKey{{OrgID: in.OrgID, BudgetID: in.BudgetID}},
	}
	if in.Remote.TaskID != "" {
		keys.RecordedTasks = []RemoteTaskKey{{OrgID: in.OrgID, TaskID: in.Remote.TaskID}}
	}
	err = s.store.InTx(WithWriteKeys(ctx, keys), func(tx Tx) error {
		d, created, err = s.createInTx(ctx, tx, p, in, hash)
		return err
	})
	if err != nil {
		return Delegation{}, false, err
	}
	failpoint.Inject("after-hold-commit") // crash tests: the hold is committed, the client has no answer
	return d, created, nil
}

// checkCreateInput checks what CreateDelegation can without the
// database: the principal's right to delegate and the input.
func (s *Service) checkCreateInput(p Principal, in CreateInput) error {
	if err := Authorize(p, ActionDelegate); err != nil {
		return err
	}
	if err := in.validate(); err != nil {
		return err
	}
	if in.Dispatch != nil {
		if err := s.validateDispatch(in.Dispatch.Message); err != nil {
			return Invalid("dispatch.message", "%v", err)
		}
	}
	return nil
}

// createInTx is CreateDelegation's transaction: the references checked,
// the delegation inserted and its creation recorded, or, on an idempotent
// retry, the delegation recorded already (created false).
func (s *Service) createInTx(ctx context.Context, tx Tx, p Principal, in CreateInput, hash []byte) (Delegation, bool, error) {
	if err := checkReferences(ctx, tx, p, in); err != nil {
		// An idempotent retry is answered with what was recorded,
		// whatever changed since (a revoked org, a moved link).
		if existing, lerr := tx.DelegationByOperation(ctx, p.Tenant, in.BusinessOperationID); lerr == nil {
			d, err := sameRequest(existing, hash)
			return d, false, err
		}
		return Delegation{}, false, err
	}
	now := s.Now()
	id, err := uuid.NewV7()
	if err != nil {
		return Delegation{}, false, err
	}
	d := Delegation{
		ID: id, Tenant: p.Tenant, BusinessOperationID: in.BusinessOperationID, RequestHash: hash,
		OrgID: in.OrgID, TaskClass: in.TaskClass, BudgetID: in.BudgetID, Hold: in.Hold, Remote: in.Remote,
		TaskStatus: StatusUnknown, ObligationState: ObligationHeld, Version: 1, CreatedAt: now, UpdatedAt: now,
	}
	inserted, err := tx.InsertDelegation(ctx, d)
	if err != nil {
		return Delegation{}, false, err
	}
	if !inserted {
		d, err := recordedOperation(ctx, tx, p, in, hash)
		return d, false, err
	}
	return d, true, recordCreation(ctx, tx, p, d, in)
}

// recordedOperation answers a creation whose insert found the operation
// recorded already (an idempotent retry, or a concurrent identical request
// that committed first), or another delegation of this tenant recording
// the same remote task (another tenant's may: task ids are unique per
// tenant).
func recordedOperation(ctx context.Context, tx Tx, p Principal, in CreateInput, hash []byte) (Delegation, error) {
	existing, err := tx.DelegationByOperation(ctx, p.Tenant, in.BusinessOperationID)
	if errors.Is(err, ErrNotFound) {
		return Delegation{}, Conflict("remote_task_taken", "org %s's task %s is already recorded on another delegation of this tenant", in.OrgID, in.Remote.TaskID)
	} else if err != nil {
		return Delegation{}, err
	}
	return sameRequest(existing, hash)
}

// recordCreation records a delegation just inserted: its links, its
// delegation_created event, its dispatch if asked for, and its hold.
func recordCreation(ctx context.Context, tx Tx, p Principal, d Delegation, in CreateInput) error {
	now := d.CreatedAt
	mode := "record"
	if in.Dispatch != nil {
		mode = "dispatch"
	}
	if err := insertLinks(ctx, tx, d, in, now); err != nil {
		return err
	}
	createdData := DelegationCreatedData{
		BusinessOperationID: d.BusinessOperationID, OrgID: d.OrgID, TaskClass: d.TaskClass,
		BudgetID: d.BudgetID, AmountMinor: d.Hold.AmountMinor, Currency: d.Hold.Currency,
		RemoteTaskID: d.Remote.TaskID, RemoteContextID: d.Remote.ContextID, Mode: mode,
	}
	linkData(in, &createdData)
	if _, err := Record(ctx, tx, d, Change{Type: EventTypeDelegationCreated, Actor: p.Actor(), At: now, Data: createdData, NewStream: true}); err != nil {
		return err
	}
	if in.Dispatch != nil {
		// The send is queued with the hold: a crash between the two
		// cannot leave a hold whose work is never sent.
		err := tx.EnqueueOutbound(ctx, OutboundJob{
			DelegationID: d.ID, Kind: OutboundDispatch, Payload: in.Dispatch.Message, RunAfter: now, At: now,
		})
		if err != nil {
			return err
		}
	}
	// The hold is placed last: the budget row is shared by many
	// delegations, so its lock is held for the shortest time before the
	// commit. An insufficient budget rolls everything back.
	return tx.MoveBudget(ctx, BudgetMove{BudgetID: d.BudgetID, DelegationID: d.ID, Kind: MoveHold, AmountMinor: d.Hold.AmountMinor, At: now})
}

func sameRequest(existing Delegation, hash []byte) (Delegation, error) {
	if string(existing.RequestHash) != string(hash) {
		return Delegation{}, ErrIdempotencyMismatch
	}
	return existing, nil
}

// Visible loads a delegation the principal may see; any other is ErrNotFound.
func Visible(ctx context.Context, r Reader, p Principal, id uuid.UUID) (Delegation, error) {
	d, err := r.Delegation(ctx, id)
	if err != nil {
		return Delegation{}, err
	}
	if !p.SeesTenant(d.Tenant) {
		return Delegation{}, fmt.Errorf("delegation %s: %w", id, ErrNotFound)
	}
	return d, nil
}

// LockVisible is Visible with the delegation's row locked for tx.
func LockVisible(ctx context.Context, tx DelegationLocker, p Principal, id uuid.UUID) (Delegation, error) {
	d, err := tx.DelegationForUpdate(ctx, id)
	if err != nil {
		return Delegation{}, err
	}
	if !p.SeesTenant(d.Tenant) {
		return Delegation{}, fmt.Errorf("delegation %s: %w", id, ErrNotFound)
	}
	return d, nil
}

// GetDelegation returns a delegation the principal may see.
func (s *Service) GetDelegation(ctx context.Context, p Principal, id uuid.UUID) (Delegation, error) {
	return Visible(ctx, s.store, p, id)
}

// ListDelegations lists delegations newest first; orchestrators see their
// tenant's only.
func (s *Service) ListDelegations(ctx context.Context, p Principal, f DelegationFilter) ([]Delegation, error) {
	if !p.Permits(ActionReadAllEvents) {
		f.Tenant = p.Tenant
	}
	switch {
	case f.Limit == 0:
		f.Limit = DefaultListLimit
	case f.Limit < 1 || f.Limit > MaxListLimit:
		return nil, Invalid("limit", "must be between 1 and %d", MaxListLimit)
	}
	return s.store.ListDelegations(ctx, f)
}

// CountDelegations counts the delegations ListDelegations lists with f,
// on every page: orchestrators count their tenant's.
func (s *Service) CountDelegations(ctx context.Context, p Principal, f DelegationFilter) (int64, error) {
	if !p.Permits(ActionReadAllEvents) {
		f.Tenant = p.Tenant
	}
	return s.store.CountDelegations(ctx, f)
}

// DelegationEvents returns a visible delegation's events, oldest first.
func (s *Service) DelegationEvents(ctx context.Context, p Principal, id uuid.UUID) ([]Event, error) {
	d, err := Visible(ctx, s.store, p, id)
	if err != nil {
		return nil, err
	}
	return s.store.StreamEvents(ctx, d.Stream())
}

// RequestCancel records that the orchestrator asked to revoke the
// delegation. Asking twice records nothing new. Only a later terminal task
// status moves the obligation: a cancel request is not evidence.
func (s *Service) RequestCancel(ctx context.Context, p Principal, id uuid.UUID) (Delegation, error) {
	if err := Authorize(p, ActionDelegate); err != nil {
		return Delegation{}, err
	}
	var out Delegation
	err := s.store.InTx(WithWriteKeys(ctx, WriteKeys{Delegations: []uuid.UUID{id}}), func(tx Tx) error {
		d, err := LockVisible(ctx, tx, p, id)
		if err != nil {
			return err
		}
		if !d.CancelRequestedAt.IsZero() {
			out = d
			return nil
		}
		if d.TaskStatus.Terminal() {
			return Conflict("task_terminal", "the remote task is already %s", d.TaskStatus)
		}
		now := s.Now()
		d.CancelRequestedAt = now
		out, _, err = Apply(ctx, tx, d, Change{Type: EventTypeCancelRequested, Actor: p.Actor(), At: now, Data: CancelRequestedData{}})
		if err != nil {
			return err
		}
		org, err := tx.Org(ctx, d.OrgID)
		if err != nil {
			return err
		}
		if org.AgentCardURL != "" {
			// Quittance sends the cancel itself to an org whose agent it
			// can reach; the reply, not the request, moves the obligation.
			err = tx.EnqueueOutbound(ctx, OutboundJob{DelegationID: d.ID, Kind: OutboundCancel, RunAfter: now, At: now})
		}
		return err
	})
	return out, err
}
