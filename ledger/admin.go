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

// PutBudget creates a budget or changes its funding. The currency of a
// budget never changes, and funding cannot drop below what is already held,
// spent or written off.
func (s *Service) PutBudget(ctx context.Context, p Principal, id, currency string, funded int64) (b Budget, created bool, err error) {
	if err := require(p, RoleOncall); err != nil {
		return Budget{}, false, err
	}
	if err := checkID("id", id); err != nil {
		return Budget{}, false, err
	}
	if err := checkCurrency("currency", currency); err != nil {
		return Budget{}, false, err
	}
	if funded < 0 {
		return Budget{}, false, Invalid("funded_minor", "must be zero or a positive integer number of minor units")
	}
	err = s.store.InTx(ctx, func(tx Tx) error {
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
			if b, err = tx.MoveBudget(ctx, BudgetMove{BudgetID: id, Kind: MoveFund, AmountMinor: delta, At: now}); err != nil {
				return err
			}
		}
		_, err = Append(ctx, tx, Event{Stream: "budget:" + id, Type: EventTypeBudgetFunded, At: now, Actor: p.Actor()},
			map[string]any{"currency": currency, "funded_minor": funded, "delta_minor": delta})
		return err
	})
	return b, created, err
}

// GetBudget returns a budget.
func (s *Service) GetBudget(ctx context.Context, p Principal, id string) (Budget, error) {
	if err := require(p, RoleOncall, RoleFinance); err != nil {
		return Budget{}, err
	}
	return s.store.Budget(ctx, id)
}

// OrgInput is what an admin registers about a remote org.
type OrgInput struct {
	Name                  string
	SharedCoordinator     bool
	JWKS                  []byte
	AgentCardURL          string
	AllowedHosts          []string
	RequireSignedReceipts bool
}

// PutOrg registers a remote org or replaces its registration. Its identity
// revocation, once made, is kept: re-registering does not restore trust.
func (s *Service) PutOrg(ctx context.Context, p Principal, id string, in OrgInput) (o Org, created bool, err error) {
	if err := require(p, RoleOncall); err != nil {
		return Org{}, false, err
	}
	if err := checkID("id", id); err != nil {
		return Org{}, false, err
	}
	if strings.TrimSpace(in.Name) == "" || len(in.Name) > 200 {
		return Org{}, false, Invalid("name", "is required, at most 200 characters")
	}
	if len(in.JWKS) > 0 {
		if err := s.validateJWKS(in.JWKS); err != nil {
			return Org{}, false, Invalid("jwks", "%v", err)
		}
	}
	if in.AgentCardURL != "" || len(in.AllowedHosts) > 0 {
		if in.AgentCardURL == "" {
			return Org{}, false, Invalid("agent_card_url", "is required when allowed_hosts is given")
		}
		if err := s.validateAgent(in.AgentCardURL, in.AllowedHosts); err != nil {
			return Org{}, false, Invalid("agent_card_url", "%v", err)
		}
	}
	err = s.store.InTx(ctx, func(tx Tx) error {
		now := s.Now()
		current, err := tx.Org(ctx, id)
		created = errors.Is(err, ErrNotFound)
		if err != nil && !created {
			return err
		}
		o = Org{
			ID: id, Name: in.Name, SharedCoordinator: in.SharedCoordinator, JWKS: in.JWKS,
			AgentCardURL: in.AgentCardURL, AllowedHosts: in.AllowedHosts, RequireSignedReceipts: in.RequireSignedReceipts,
			IdentityRevokedAt: current.IdentityRevokedAt, IdentityRevokedReason: current.IdentityRevokedReason,
			CreatedAt: now, UpdatedAt: now,
		}
		if !created {
			o.CreatedAt = current.CreatedAt
		}
		if o.AllowedHosts == nil {
			o.AllowedHosts = []string{}
		}
		if err := tx.PutOrg(ctx, o); err != nil {
			return err
		}
		_, err = Append(ctx, tx, Event{Stream: "org:" + id, Type: EventTypeOrgUpdated, At: now, Actor: p.Actor()},
			map[string]any{
				"name": in.Name, "shared_coordinator": in.SharedCoordinator, "jwks_registered": len(in.JWKS) > 0,
				"agent_card_url": in.AgentCardURL, "allowed_hosts": o.AllowedHosts,
			})
		return err
	})
	return o, created, err
}

// GetOrg returns a remote org.
func (s *Service) GetOrg(ctx context.Context, p Principal, id string) (Org, error) {
	if err := require(p, RoleOncall, RoleFinance); err != nil {
		return Org{}, err
	}
	return s.store.Org(ctx, id)
}

// PutTaskClass registers or replaces a task class. It affects delegations
// whose task ends after the change; obligations already entered are kept.
func (s *Service) PutTaskClass(ctx context.Context, p Principal, c TaskClass) (TaskClass, error) {
	if err := require(p, RoleOncall); err != nil {
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
	err := s.store.InTx(ctx, func(tx Tx) error {
		c.UpdatedAt = s.Now()
		if err := tx.PutTaskClass(ctx, c); err != nil {
			return err
		}
		_, err := Append(ctx, tx, Event{Stream: "task_class:" + c.Name, Type: EventTypeTaskClassUpdated, At: c.UpdatedAt, Actor: p.Actor()},
			map[string]any{
				"effect_capable": c.EffectCapable, "gate_on": c.GateOn, "compensation_timeout": c.CompensationTimeout.String(),
			})
		return err
	})
	return c, err
}

// GetTaskClass returns a registered task class.
func (s *Service) GetTaskClass(ctx context.Context, p Principal, name string) (TaskClass, error) {
	if err := require(p, RoleOncall, RoleFinance); err != nil {
		return TaskClass{}, err
	}
	return s.store.TaskClass(ctx, name)
}

// ListTaskClasses returns every registered task class, by name.
// Delegations whose class is not among them are treated as effect-capable,
// gated on canceled and failed, with DefaultCompensationTimeout.
func (s *Service) ListTaskClasses(ctx context.Context, p Principal) ([]TaskClass, error) {
	if err := require(p, RoleOncall, RoleFinance); err != nil {
		return nil, err
	}
	return s.store.TaskClasses(ctx)
}

// TokenInput asks for a new API token.
type TokenInput struct {
	Role   Role
	Tenant string
	Name   string
}

// CreateToken issues a token; the secret is returned once and only its
// hash is stored.
func (s *Service) CreateToken(ctx context.Context, p Principal, in TokenInput) (Token, string, error) {
	if err := require(p, RoleOncall); err != nil {
		return Token{}, "", err
	}
	return s.issueToken(ctx, p.Actor(), in, NewTokenSecret())
}

// EnsureToken makes sure a token with exactly this secret exists (the
// bootstrap token of QUITTANCE_BOOTSTRAP_TOKEN); it is created if missing.
//
// Every replica calls it at start-up, so several may call it at once on a
// database that has no such token yet: all of them find it missing and
// insert it, and the unique token hash lets one insert commit while the
// others fail (PostgreSQL makes a conflicting insert wait for the first
// one's transaction, so by then the winner's row is committed). A failed
// insert is therefore followed by a second look-up, and a token found then
// is the one the concurrent start created: the loser starts as well, and
// only the winner's token_created event exists.
func (s *Service) EnsureToken(ctx context.Context, in TokenInput, secret string) (Token, error) {
	t, err := s.existingToken(ctx, in, secret)
	if !errors.Is(err, ErrNotFound) {
		return t, err
	}
	t, _, err = s.issueToken(ctx, "system:bootstrap", in, secret)
	if err == nil {
		return t, nil
	}
	if found, lookupErr := s.existingToken(ctx, in, secret); lookupErr == nil {
		return found, nil
	} else if !errors.Is(lookupErr, ErrNotFound) {
		return Token{}, errors.Join(err, lookupErr)
	}
	return Token{}, err
}

// existingToken returns the token with this secret if it exists as the
// token in asks for, ErrNotFound if there is none, and an error if it
// exists as something else (another role or tenant, or revoked).
func (s *Service) existingToken(ctx context.Context, in TokenInput, secret string) (Token, error) {
	t, err := s.store.TokenByHash(ctx, HashToken(secret))
	if err != nil {
		return Token{}, err
	}
	if t.Role != in.Role || t.Tenant != in.Tenant || !t.RevokedAt.IsZero() {
		return Token{}, fmt.Errorf("bootstrap token already exists as %s token %q", t.Role, t.Name)
	}
	return t, nil
}

func (s *Service) issueToken(ctx context.Context, actor string, in TokenInput, secret string) (Token, string, error) {
	if _, err := ParseRole(string(in.Role)); err != nil {
		return Token{}, "", Invalid("role", "must be orchestrator, finance or oncall")
	}
	if strings.TrimSpace(in.Name) == "" || len(in.Name) > 200 {
		return Token{}, "", Invalid("name", "is required, at most 200 characters")
	}
	switch {
	case in.Role == RoleOrchestrator && in.Tenant == "":
		return Token{}, "", Invalid("tenant", "is required for orchestrator tokens")
	case in.Role != RoleOrchestrator && in.Tenant != "":
		return Token{}, "", Invalid("tenant", "applies to orchestrator tokens only")
	case in.Tenant != "":
		if err := checkID("tenant", in.Tenant); err != nil {
			return Token{}, "", err
		}
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Token{}, "", err
	}
	t := Token{ID: id, Name: in.Name, Role: in.Role, Tenant: in.Tenant, Hash: HashToken(secret), CreatedAt: s.Now()}
	err = s.store.InTx(ctx, func(tx Tx) error {
		if err := tx.InsertToken(ctx, t); err != nil {
			return err
		}
		_, err := Append(ctx, tx, Event{Stream: "token:" + id.String(), Type: EventTypeTokenCreated, At: t.CreatedAt, Actor: actor},
			map[string]any{"name": t.Name, "role": string(t.Role), "tenant": t.Tenant})
		return err
	})
	if err != nil {
		return Token{}, "", err
	}
	return t, secret, nil
}
