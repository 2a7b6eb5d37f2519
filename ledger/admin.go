package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// BudgetInput is what on-call sets on a budget.
type BudgetInput struct {
	Currency    string
	FundedMinor int64
	// Tenants, when not nil, replaces the tenants whose orchestrators may
	// hold on the budget; nil leaves them as they are (none, for a new
	// budget).
	Tenants *[]string
}

// PutBudget creates a budget or changes its funding or tenants. The
// currency of a budget never changes, and funding cannot drop below what
// is already held, spent or written off. Funding applies at once. A change
// of the tenants is a privileged change: under dev the bootstrap
// principal's applies at once; any other is recorded as pending and
// returned as an *ApprovalRequiredError, with the budget as it now is
// (created and funded, if it was new, but serving the tenants it served —
// none for a new budget — until a different on-call principal approves).
func (s *Service) PutBudget(ctx context.Context, p Principal, id string, in BudgetInput) (b Budget, created bool, err error) {
	if err := Authorize(p, ActionAdminister); err != nil {
		return Budget{}, false, err
	}
	if err := CheckID("id", id); err != nil {
		return Budget{}, false, err
	}
	currency, funded := in.Currency, in.FundedMinor
	if err := CheckCurrency("currency", currency); err != nil {
		return Budget{}, false, err
	}
	if funded < 0 {
		return Budget{}, false, Invalid("funded_minor", "must be zero or a positive integer number of minor units")
	}
	var tenants []string
	if in.Tenants != nil {
		if tenants, err = budgetTenants(*in.Tenants); err != nil {
			return Budget{}, false, err
		}
	}
	var pending *PendingChange
	err = s.store.InTx(ctx, func(tx Tx) error {
		pending = nil
		now := s.Now()
		current, err := tx.BudgetForUpdate(ctx, id)
		created = errors.Is(err, ErrNotFound)
		switch {
		case created:
			if err := tx.InsertBudget(ctx, Budget{ID: id, Currency: currency, CreatedAt: now, UpdatedAt: now}); err != nil {
				return err
			}
			current = Budget{ID: id, Currency: currency}
		case err != nil:
			return err
		case current.Currency != currency:
			return Conflict("currency_immutable", "budget %s is in %s; its currency cannot change", id, current.Currency)
		}
		delta := funded - current.Funded
		if current.Available+delta < 0 {
			return Conflict("funding_below_commitments", "budget %s has %d minor units held, spent or written off; funding cannot drop below that",
				id, current.Held+current.Spent+current.WrittenOff)
		}
		b = current
		if delta != 0 || created {
			if err := tx.MoveBudget(ctx, BudgetMove{BudgetID: id, Kind: MoveFund, AmountMinor: delta, At: now}); err != nil {
				return err
			}
			if b, err = tx.BudgetForUpdate(ctx, id); err != nil {
				return err
			}
		}
		_, err = Append(ctx, tx, Event{Stream: "budget:" + id, Type: EventTypeBudgetFunded, At: now, Actor: p.Actor()},
			BudgetFundedData{Currency: currency, FundedMinor: funded, DeltaMinor: delta})
		if err != nil || in.Tenants == nil {
			return err
		}
		pending, err = s.setBudgetTenants(ctx, tx, p, &b, tenants, now)
		return err
	})
	return b, created, AwaitingApproval(pending, err)
}

// GetBudget returns a budget.
func (s *Service) GetBudget(ctx context.Context, p Principal, id string) (Budget, error) {
	if err := Authorize(p, ActionReadConfiguration); err != nil {
		return Budget{}, err
	}
	return s.store.Budget(ctx, id)
}

// OrgInput is what an admin registers about a remote org.
type OrgInput struct {
	Name              string
	SharedCoordinator bool
	// JWKS is the org's inline JWK Set; JWKSURL the org's own JWKS URL its
	// keys are fetched from instead. At most one of them is given.
	JWKS                  []byte
	JWKSURL               string `json:",omitempty"`
	AgentCardURL          string
	AllowedHosts          []string
	RequireSignedReceipts bool
	// RequireSignedCard and CardJKUHosts: see Org.
	RequireSignedCard bool     `json:",omitempty"`
	CardJKUHosts      []string `json:",omitempty"`
}

// PutOrg registers a remote org or replaces its registration. Its identity
// revocation, once made, is kept. A change to what the org is trusted with
// (keys or their source, agent endpoint, allowed hosts, shared_coordinator,
// signed-receipt requirement) is a two-person change (ledger/DESIGN.md §6),
// returned as an *ApprovalRequiredError; a change of name alone applies at
// once.
func (s *Service) PutOrg(ctx context.Context, p Principal, id string, in OrgInput) (o Org, created bool, err error) {
	if err := Authorize(p, ActionAdminister); err != nil {
		return Org{}, false, err
	}
	if err := s.checkOrgInput(id, in); err != nil {
		return Org{}, false, err
	}
	if in.AllowedHosts == nil {
		in.AllowedHosts = []string{}
	}
	var pending *PendingChange
	err = s.store.InTx(ctx, func(tx Tx) error {
		pending, created = nil, false
		now := s.Now()
		current, err := tx.Org(ctx, id)
		exists := err == nil
		if err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		apply := func() (err error) {
			o, created, err = s.applyOrg(ctx, tx, id, in, applied{actor: p.Actor(), at: now})
			return err
		}
		if !orgTrustChanges(exists, current, in) {
			return apply()
		}
		o = current
		pending, err = s.ApplyOrRequest(ctx, tx, p, orgChangeRequest(p, now, id, in, current, exists), apply)
		return err
	})
	return o, created, AwaitingApproval(pending, err)
}

// orgChangeRequest is the org_update change that registers org id, or
// changes what current, its registration as it is, trusts it with.
func orgChangeRequest(p Principal, now time.Time, id string, in OrgInput, current Org, exists bool) ChangeRequest {
	verb := "change"
	if !exists {
		verb = "register"
	}
	summary := fmt.Sprintf("%s org %s: %s", verb, id, strings.Join(orgChangedFields(exists, current, in), ", "))
	if in.JWKSURL != "" {
		summary += "; keys from the JWKS URL " + in.JWKSURL
	}
	base := &orgBase{Exists: exists}
	if exists {
		base.Registration = registrationOf(current)
	}
	return ChangeRequest{By: p, At: now, Kind: ChangeOrgUpdate, Target: "org:" + id,
		Payload: orgUpdatePayload{ID: id, Input: in, Base: base}, Summary: summary}
}

func (s *Service) checkOrgInput(id string, in OrgInput) error {
	if err := CheckID("id", id); err != nil {
		return err
	}
	if strings.TrimSpace(in.Name) == "" || len(in.Name) > 200 {
		return Invalid("name", "is required, at most 200 characters")
	}
	if len(in.JWKS) > 0 {
		if err := s.validateJWKS(in.JWKS); err != nil {
			return Invalid("jwks", "%v", err)
		}
	}
	if in.JWKSURL != "" {
		if len(in.JWKS) > 0 {
			return Invalid("jwks_url", "cannot be given with jwks: an org's keys come from its inline JWKS or from its JWKS URL, not both")
		}
		if len(in.JWKSURL) > 2048 {
			return Invalid("jwks_url", "must be at most 2048 characters")
		}
		if err := s.jwks.validateURL(in.JWKSURL); err != nil {
			return Invalid("jwks_url", "%v", err)
		}
	}
	if in.AgentCardURL != "" || len(in.AllowedHosts) > 0 {
		if in.AgentCardURL == "" {
			return Invalid("agent_card_url", "is required when allowed_hosts is given")
		}
		if err := s.validateAgent(in.AgentCardURL, in.AllowedHosts); err != nil {
			return Invalid("agent_card_url", "%v", err)
		}
	}
	return checkCardJKUHosts(in.CardJKUHosts)
}

// checkCardJKUHosts checks the hosts a card signature's jku may name:
// at most 20 host names, without scheme, port or path.
func checkCardJKUHosts(hosts []string) error {
	if len(hosts) > 20 {
		return Invalid("card_jku_hosts", "names at most 20 hosts")
	}
	for _, h := range hosts {
		if h == "" || len(h) > 253 || strings.ContainsAny(h, "/:@ ?#") {
			return Invalid("card_jku_hosts", "%q is not a host name", h)
		}
	}
	return nil
}

// orgTrustChanges reports whether registering in over current (which
// exists or not) changes what the org is trusted with.
func orgTrustChanges(exists bool, current Org, in OrgInput) bool {
	if !exists {
		return len(in.JWKS) > 0 || in.JWKSURL != "" || in.SharedCoordinator || in.AgentCardURL != "" || len(in.AllowedHosts) > 0 || in.RequireSignedReceipts ||
			in.RequireSignedCard || len(in.CardJKUHosts) > 0
	}
	return !sameJSON(current.JWKS, in.JWKS) || current.JWKSURL != in.JWKSURL || current.SharedCoordinator != in.SharedCoordinator ||
		current.AgentCardURL != in.AgentCardURL || current.RequireSignedReceipts != in.RequireSignedReceipts ||
		!slices.Equal(slices.Sorted(slices.Values(current.AllowedHosts)), slices.Sorted(slices.Values(in.AllowedHosts))) ||
		current.RequireSignedCard != in.RequireSignedCard ||
		!slices.Equal(slices.Sorted(slices.Values(current.CardJKUHosts)), slices.Sorted(slices.Values(in.CardJKUHosts)))
}

// orgChangedFields names the fields registering in over current (which
// exists or not) sets or changes, for a change's summary.
func orgChangedFields(exists bool, current Org, in OrgInput) []string {
	var fields []string
	add := func(changed bool, name string) {
		if changed {
			fields = append(fields, name)
		}
	}
	if !exists {
		current = Org{}
	}
	add(current.Name != in.Name, "name")
	add(!sameJSON(current.JWKS, in.JWKS), "jwks")
	add(current.JWKSURL != in.JWKSURL, "jwks_url")
	add(current.AgentCardURL != in.AgentCardURL, "agent_card_url")
	add(!slices.Equal(slices.Sorted(slices.Values(current.AllowedHosts)), slices.Sorted(slices.Values(in.AllowedHosts))), "allowed_hosts")
	add(current.SharedCoordinator != in.SharedCoordinator, "shared_coordinator")
	add(current.RequireSignedReceipts != in.RequireSignedReceipts, "require_signed_receipts")
	add(current.RequireSignedCard != in.RequireSignedCard, "require_signed_card")
	add(!slices.Equal(slices.Sorted(slices.Values(current.CardJKUHosts)), slices.Sorted(slices.Values(in.CardJKUHosts))), "card_jku_hosts")
	return fields
}

// orgBase is an org's registration when an org_update change was asked
// for: the approval applies the change only over that same registration.
type orgBase struct {
	Exists       bool     `json:"exists"`
	Registration OrgInput `json:"registration"`
}

// registrationOf is what o is registered with, as an OrgInput.
func registrationOf(o Org) OrgInput {
	return OrgInput{
		Name: o.Name, SharedCoordinator: o.SharedCoordinator, JWKS: o.JWKS, JWKSURL: o.JWKSURL,
		AgentCardURL: o.AgentCardURL, AllowedHosts: o.AllowedHosts, RequireSignedReceipts: o.RequireSignedReceipts,
		RequireSignedCard: o.RequireSignedCard, CardJKUHosts: o.CardJKUHosts,
	}
}

// checkOrgUnchanged refuses, with org_changed, an org_update change whose
// org is no longer registered as when it was asked for: applying it would
// silently undo the changes made since (put back a removed key, say), as
// the change replaces the whole registration. A change recorded before
// its base was kept (base nil) is not checked.
func checkOrgUnchanged(ctx context.Context, tx Tx, id string, base *orgBase) error {
	if base == nil {
		return nil
	}
	current, err := tx.Admin().OrgForUpdate(ctx, id)
	exists := err == nil
	if err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	if exists != base.Exists || (exists && len(orgChangedFields(true, current, base.Registration)) > 0) {
		return Conflict("org_changed", "org %s changed since this change was asked for; ask again from its current registration", id)
	}
	return nil
}

// sameJSON reports whether two JSON documents are equal as values (the
// database normalizes key order and spacing); empty equals empty.
func sameJSON(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	ra, _ := json.Marshal(va)
	rb, _ := json.Marshal(vb)
	return string(ra) == string(rb)
}

// applied says who applies a configuration change, when, and under which
// approved pending change: empty when it applies at once (ledger/DESIGN.md §6).
// Its fields go into the change's event.
type applied struct {
	actor  string
	at     time.Time
	change string
}

// applyOrg writes the registration in tx, with its org_updated event.
func (s *Service) applyOrg(ctx context.Context, tx Tx, id string, in OrgInput, by applied) (o Org, created bool, err error) {
	now := by.at
	current, err := tx.Org(ctx, id)
	created = errors.Is(err, ErrNotFound)
	if err != nil && !created {
		return Org{}, false, err
	}
	o = Org{
		ID: id, Name: in.Name, SharedCoordinator: in.SharedCoordinator, JWKS: in.JWKS, JWKSURL: in.JWKSURL,
		AgentCardURL: in.AgentCardURL, AllowedHosts: in.AllowedHosts, RequireSignedReceipts: in.RequireSignedReceipts,
		RequireSignedCard: in.RequireSignedCard, CardJKUHosts: in.CardJKUHosts,
		CardPin: current.CardPin, CardCheck: current.CardCheck,
		IdentityRevokedAt: current.IdentityRevokedAt, IdentityRevokedReason: current.IdentityRevokedReason,
		CreatedAt: now, UpdatedAt: now,
	}
	if !created {
		o.CreatedAt = current.CreatedAt
	}
	// The keys in force follow the key source: an inline set's keys are
	// the set's; a JWKS URL kept keeps the keys fetched from it (the store
	// keeps what was fetched); a new JWKS URL ends every key in force, and
	// its own come with its first fetch (the periodic refresh, or the first
	// token naming one of them).
	sameURL := !created && in.JWKSURL != "" && current.JWKSURL == in.JWKSURL
	if sameURL {
		o.JWKSFetch = current.JWKSFetch
	}
	if o.AllowedHosts == nil {
		o.AllowedHosts = []string{}
	}
	if o.CardJKUHosts == nil {
		o.CardJKUHosts = []string{}
	}
	if err := tx.Admin().PutOrg(ctx, o); err != nil {
		return Org{}, false, err
	}
	var added, removed []KeyRef
	if !sameURL {
		if added, removed, err = recordOrgKeys(ctx, tx, id, in.JWKS, now); err != nil {
			return Org{}, false, err
		}
	}
	data := OrgUpdatedData{
		Name: in.Name, SharedCoordinator: in.SharedCoordinator, JWKSRegistered: len(in.JWKS) > 0,
		AgentCardURL: in.AgentCardURL, AllowedHosts: o.AllowedHosts,
		JWKSURL: in.JWKSURL, KeysAdded: added, KeysRemoved: removed, PendingChangeID: by.change,
		RequireSignedCard: in.RequireSignedCard, CardJKUHosts: in.CardJKUHosts,
	}
	_, err = Append(ctx, tx, Event{Stream: "org:" + id, Type: EventTypeOrgUpdated, At: now, Actor: by.actor}, data)
	return o, created, err
}

// GetOrg returns a remote org.
func (s *Service) GetOrg(ctx context.Context, p Principal, id string) (Org, error) {
	if err := Authorize(p, ActionReadConfiguration); err != nil {
		return Org{}, err
	}
	return s.store.Org(ctx, id)
}

// PutTaskClass registers or replaces a task class. It affects delegations
// whose task ends after the change; obligations already entered are kept.
// Registering a class, or changing its gate, effect capability or
// compensation timeout, is a privileged change: it is recorded as pending
// and returned as an *ApprovalRequiredError, and applies when a different
// on-call principal approves it (under dev, the bootstrap principal's
// applies at once). Putting a class unchanged changes nothing.
func (s *Service) PutTaskClass(ctx context.Context, p Principal, c TaskClass) (TaskClass, error) {
	if err := Authorize(p, ActionAdminister); err != nil {
		return TaskClass{}, err
	}
	if !classPattern.MatchString(c.Name) {
		return TaskClass{}, Invalid("name", "must be lower-case letters, digits and '_', starting with a letter, at most 64")
	}
	for _, st := range c.GateOn {
		if st != StatusCanceled && st != StatusFailed {
			return TaskClass{}, Invalid("gate_on", "may contain only canceled and failed")
		}
	}
	if c.CompensationTimeout < time.Millisecond {
		return TaskClass{}, Invalid("compensation_timeout", "must be a positive duration of at least 1ms")
	}
	c.GateOn = slices.Compact(slices.Sorted(slices.Values(c.GateOn)))
	if c.GateOn == nil {
		c.GateOn = []TaskStatus{}
	}
	var (
		out     TaskClass
		pending *PendingChange
	)
	err := s.store.InTx(ctx, func(tx Tx) error {
		pending, out = nil, c
		now := s.Now()
		current, err := tx.Admin().TaskClass(ctx, c.Name)
		switch {
		case err == nil && current.EffectCapable == c.EffectCapable && slices.Equal(current.GateOn, c.GateOn) &&
			current.CompensationTimeout.Milliseconds() == c.CompensationTimeout.Milliseconds():
			out = current
			return nil
		case err != nil && !errors.Is(err, ErrNotFound):
			return err
		case err == nil:
			out = current
		}
		req := ChangeRequest{By: p, At: now, Kind: ChangeTaskClassUpdate, Target: "task_class:" + c.Name, Payload: taskClassPayload{Class: c},
			Summary: fmt.Sprintf("set task class %s: effect_capable %t, gate_on %v, compensation_timeout %s", c.Name, c.EffectCapable, c.GateOn, c.CompensationTimeout)}
		pending, err = s.ApplyOrRequest(ctx, tx, p, req, func() error {
			out = c
			if err := s.applyTaskClass(ctx, tx, p.Actor(), c, now, ""); err != nil {
				return err
			}
			out.UpdatedAt = now
			return nil
		})
		return err
	})
	return out, AwaitingApproval(pending, err)
}

// applyTaskClass writes c in tx, with its task_class_updated event.
func (s *Service) applyTaskClass(ctx context.Context, tx Tx, actor string, c TaskClass, now time.Time, change string) error {
	c.UpdatedAt = now
	if err := tx.Admin().PutTaskClass(ctx, c); err != nil {
		return err
	}
	data := TaskClassUpdatedData{
		EffectCapable: c.EffectCapable, GateOn: c.GateOn, CompensationTimeout: c.CompensationTimeout.String(),
		PendingChangeID: change,
	}
	_, err := Append(ctx, tx, Event{Stream: "task_class:" + c.Name, Type: EventTypeTaskClassUpdated, At: now, Actor: actor}, data)
	return err
}

// GetTaskClass returns a registered task class.
func (s *Service) GetTaskClass(ctx context.Context, p Principal, name string) (TaskClass, error) {
	if err := Authorize(p, ActionReadConfiguration); err != nil {
		return TaskClass{}, err
	}
	return s.store.TaskClass(ctx, name)
}

// ListTaskClasses returns every registered task class, by name.
// Delegations whose class is not among them are treated as effect-capable,
// gated on canceled and failed, with DefaultCompensationTimeout.
func (s *Service) ListTaskClasses(ctx context.Context, p Principal) ([]TaskClass, error) {
	if err := Authorize(p, ActionReadConfiguration); err != nil {
		return nil, err
	}
	return s.store.TaskClasses(ctx)
}

// applyOrgChange applies an approved org_update change, provided the org
// is still as it was when the change was asked for.
func (s *Service) applyOrgChange(ctx context.Context, tx Tx, p Principal, c PendingChange, now time.Time) (string, error) {
	pl, err := DecodeChangePayload[orgUpdatePayload](c)
	if err != nil {
		return "", err
	}
	if err := s.checkOrgInput(pl.ID, pl.Input); err != nil {
		return "", err
	}
	if err := checkOrgUnchanged(ctx, tx, pl.ID, pl.Base); err != nil {
		return "", err
	}
	_, _, err = s.applyOrg(ctx, tx, pl.ID, pl.Input, applied{actor: p.Actor(), at: now, change: c.ID.String()})
	return "", err
}

// applyTaskClassChange applies an approved task_class_update change.
func (s *Service) applyTaskClassChange(ctx context.Context, tx Tx, p Principal, c PendingChange, now time.Time) (string, error) {
	pl, err := DecodeChangePayload[taskClassPayload](c)
	if err != nil {
		return "", err
	}
	return "", s.applyTaskClass(ctx, tx, p.Actor(), pl.Class, now, c.ID.String())
}
