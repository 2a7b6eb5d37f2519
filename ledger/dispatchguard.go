package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Whose word counts (ledger/DESIGN.md §2.4): on a delegation Quittance
// dispatched, an orchestrator can commit money but never free it on its
// own word. This file holds the rules that say so for the hold and the
// gate; compensation.Service.ReportTaskStatus holds the one for reports
// (compensation/observe.go).

// CodeHoldLowerRefused is the conflict code of a cut of the hold of a
// delegation Quittance dispatched, once the dispatch may have reached the
// agent, while it is unknown, or after a cancel request.
const CodeHoldLowerRefused = "hold_lower_refused"

// DispatchState is what Quittance knows of its own dispatch of a
// delegation (Tx.DispatchState).
type DispatchState struct {
	// Dispatched says Quittance sends the delegated work itself (dispatch
	// mode), rather than the orchestrator recording a delegation it made
	// (record mode).
	Dispatched bool
	// Sent says the dispatch may have reached the agent: a task is
	// recorded, the dispatch is unknown, or a dispatch job was claimed at
	// least once (a claim may have sent before it crashed).
	Sent bool
	// UnknownSince is when the delegation entered the dispatch_unknown
	// condition; zero when it is not in it.
	UnknownSince time.Time
}

// DispatchLocker locks a delegation with its dispatch state: what
// LockVisibleDispatch needs.
type DispatchLocker interface {
	DelegationDispatchForUpdate(ctx context.Context, id uuid.UUID) (Delegation, DispatchState, error)
}

// LockVisibleDispatch is LockVisible with what Quittance knows of its own
// dispatch of the delegation, read with the lock.
func LockVisibleDispatch(ctx context.Context, tx DispatchLocker, p Principal, id uuid.UUID) (Delegation, DispatchState, error) {
	d, st, err := tx.DelegationDispatchForUpdate(ctx, id)
	if err != nil {
		return Delegation{}, DispatchState{}, err
	}
	if !p.SeesTenant(d.Tenant) {
		return Delegation{}, DispatchState{}, fmt.Errorf("delegation %s: %w", id, ErrNotFound)
	}
	return d, st, nil
}

// checkHoldCut refuses a cut of d's hold that would return money on the
// orchestrator's word alone: on a delegation Quittance dispatched, a cut
// is allowed only before the dispatch was sent, and never while the
// dispatch is unknown or after a cancel request. Raises, and every change
// in record mode, pass.
func checkHoldCut(d Delegation, st DispatchState, amountMinor int64) error {
	if !st.Dispatched || amountMinor >= d.Hold.AmountMinor {
		return nil
	}
	switch {
	case !st.UnknownSince.IsZero():
		return Conflict(CodeHoldLowerRefused, "the dispatch of this delegation is unknown (since %s): the hold may be raised, not lowered",
			st.UnknownSince.UTC().Format(time.RFC3339))
	case !d.CancelRequestedAt.IsZero():
		return Conflict(CodeHoldLowerRefused, "a cancel was requested: the hold may be raised, not lowered; the remote task's end decides what returns")
	case st.Sent:
		return Conflict(CodeHoldLowerRefused, "Quittance dispatched this delegation: the hold may be raised, not lowered; what returns follows what Quittance observes at the remote")
	}
	return nil
}

// GateFacts is what decides the gate of a delegation's terminal status, as
// the store reads it in one round trip (compensation.ObservationTx.GatePolicy).
type GateFacts struct {
	// Org is the delegation's org.
	Org Org
	// Class is its task class as registered; meaningful only when
	// Registered.
	Class      TaskClass
	Registered bool
	// Dispatched says Quittance dispatched the delegation.
	Dispatched bool
	// PolicyListsClass says the task-class policy of the delegation's
	// tenant at its org lists its class.
	PolicyListsClass bool
}

// GateClass is the task class whose gate applies to d: its registered
// class, or UnknownTaskClass (effect-capable, gated on canceled and
// failed) when the class is not registered or, on a delegation Quittance
// dispatched, when the task-class policy of d's tenant at d's org does not
// list it. The orchestrator names the class; on a dispatched delegation
// its choice alone does not decide whether an observed cancel needs
// evidence.
func (f GateFacts) GateClass(d Delegation) TaskClass {
	if !f.Registered || (f.Dispatched && !f.PolicyListsClass) {
		return UnknownTaskClass(d.TaskClass)
	}
	return f.Class
}

// TaskClassPolicy says which task classes a tenant's orchestrators may use
// with an org on the delegations Quittance dispatches. A class it does not
// list gates as an unknown class does.
type TaskClassPolicy struct {
	OrgID     string
	Tenant    string
	Classes   []string
	UpdatedAt time.Time
}

type taskClassPolicyPayload struct {
	Policy TaskClassPolicy `json:"policy"`
}

// PutTaskClassPolicy sets the task classes pol.Tenant's orchestrators may
// use with org pol.OrgID. It is a privileged change: recorded as pending
// and returned as an *ApprovalRequiredError, it applies when a different
// on-call person approves it (under dev, the bootstrap principal's applies
// at once). Putting the policy unchanged changes nothing. The classes need
// not be registered: an unregistered class gates whatever the policy says.
func (s *Service) PutTaskClassPolicy(ctx context.Context, p Principal, pol TaskClassPolicy) (TaskClassPolicy, error) {
	if err := Authorize(p, ActionAdminister); err != nil {
		return TaskClassPolicy{}, err
	}
	if err := CheckID("tenant", pol.Tenant); err != nil {
		return TaskClassPolicy{}, err
	}
	for _, c := range pol.Classes {
		if !classPattern.MatchString(c) {
			return TaskClassPolicy{}, Invalid("classes", "each must be lower-case letters, digits and '_', starting with a letter, at most 64")
		}
	}
	if len(pol.Classes) > 100 {
		return TaskClassPolicy{}, Invalid("classes", "at most 100")
	}
	pol.Classes = slices.Compact(slices.Sorted(slices.Values(pol.Classes)))
	if pol.Classes == nil {
		pol.Classes = []string{}
	}
	var (
		out     TaskClassPolicy
		pending *PendingChange
	)
	err := s.store.InTx(ctx, func(tx Tx) error {
		pending, out = nil, pol
		now := s.Now()
		if _, err := tx.Org(ctx, pol.OrgID); err != nil {
			return err
		}
		current, err := tx.Admin().TaskClassPolicy(ctx, pol.OrgID, pol.Tenant)
		switch {
		case err == nil && slices.Equal(current.Classes, pol.Classes):
			out = current
			return nil
		case err != nil && !errors.Is(err, ErrNotFound):
			return err
		case err == nil: // shown as it stands until the change applies
			out = current
		default: // none yet: shown as listing nothing until then
			out = TaskClassPolicy{OrgID: pol.OrgID, Tenant: pol.Tenant, Classes: []string{}}
		}
		req := ChangeRequest{By: p, At: now, Kind: ChangeTaskClassPolicyUpdate, Target: taskClassPolicyStream(pol.OrgID, pol.Tenant),
			Payload: taskClassPolicyPayload{Policy: pol},
			Summary: fmt.Sprintf("let tenant %s use task classes [%s] with org %s", pol.Tenant, strings.Join(pol.Classes, ", "), pol.OrgID)}
		pending, err = s.ApplyOrRequest(ctx, tx, p, req, func() error {
			out = pol
			out.UpdatedAt = now
			return s.applyTaskClassPolicy(ctx, tx, p.Actor(), pol, now, "")
		})
		return err
	})
	return out, AwaitingApproval(pending, err)
}

// taskClassPolicyStream names the event stream (and pending change target)
// of the policy of tenant at org.
func taskClassPolicyStream(org, tenant string) string {
	return "task_class_policy:" + org + "/" + tenant
}

// applyTaskClassPolicy writes pol in tx, with its task_class_policy_updated
// event.
func (s *Service) applyTaskClassPolicy(ctx context.Context, tx Tx, actor string, pol TaskClassPolicy, now time.Time, change string) error {
	if _, err := tx.Org(ctx, pol.OrgID); err != nil {
		return err
	}
	pol.UpdatedAt = now
	if err := tx.Admin().PutTaskClassPolicy(ctx, pol); err != nil {
		return err
	}
	data := TaskClassPolicyUpdatedData{OrgID: pol.OrgID, Tenant: pol.Tenant, Classes: pol.Classes, PendingChangeID: change}
	_, err := Append(ctx, tx, Event{Stream: taskClassPolicyStream(pol.OrgID, pol.Tenant), Type: EventTypeTaskClassPolicyUpdated, At: now, Actor: actor}, data)
	return err
}

// GetTaskClassPolicy returns the task-class policy of tenant at org, to
// on-call and finance; ErrNotFound when none is set (every class then
// gates on the delegations Quittance dispatches).
func (s *Service) GetTaskClassPolicy(ctx context.Context, p Principal, org, tenant string) (TaskClassPolicy, error) {
	if err := Authorize(p, ActionReadConfiguration); err != nil {
		return TaskClassPolicy{}, err
	}
	if _, err := s.store.Org(ctx, org); err != nil {
		return TaskClassPolicy{}, err
	}
	return s.store.TaskClassPolicy(ctx, org, tenant)
}

// ListTaskClassPolicies returns the task-class policies at org, by tenant.
func (s *Service) ListTaskClassPolicies(ctx context.Context, p Principal, org string) ([]TaskClassPolicy, error) {
	if err := Authorize(p, ActionReadConfiguration); err != nil {
		return nil, err
	}
	if _, err := s.store.Org(ctx, org); err != nil {
		return nil, err
	}
	return s.store.TaskClassPolicies(ctx, org)
}

// applyTaskClassPolicyChange applies an approved task_class_policy_update
// change.
func (s *Service) applyTaskClassPolicyChange(ctx context.Context, tx Tx, p Principal, c PendingChange, now time.Time) (string, error) {
	pl, err := DecodeChangePayload[taskClassPolicyPayload](c)
	if err != nil {
		return "", err
	}
	return "", s.applyTaskClassPolicy(ctx, tx, p.Actor(), pl.Policy, now, c.ID.String())
}
