package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// LinkKind says how one delegation refers to another.
type LinkKind string

// The link kinds.
const (
	// LinkContextFrom: the delegation was sent in the remote context of the
	// linked one (a refinement of its work).
	LinkContextFrom LinkKind = "context_from"
	// LinkReference: the delegation's remote task references the linked
	// delegation's remote task (referenceTaskIds).
	LinkReference LinkKind = "reference"
)

// DelegationLink is one recorded link: From refers to To.
type DelegationLink struct {
	// From is the delegation that refers.
	From uuid.UUID
	// To is the delegation referred to.
	To uuid.UUID
	// Kind is how From refers to To.
	Kind LinkKind
}

// Links are a delegation's links, both ways.
type Links struct {
	// ContextFrom is the delegation whose remote context this one was sent
	// in, or uuid.Nil.
	ContextFrom uuid.UUID
	// References are the delegations whose remote tasks this one references.
	References []uuid.UUID
	// ContextChildren are the delegations sent in this one's context.
	ContextChildren []uuid.UUID
	// ReferencedBy are the delegations that reference this one's task.
	ReferencedBy []uuid.UUID
}

// maxReferences bounds the delegations a new one may reference.
const maxReferences = 16

// LinksOf sorts a delegation's recorded links (as DelegationLinks returns
// them) into Links from the point of view of id.
func LinksOf(id uuid.UUID, links []DelegationLink) Links {
	var out Links
	for _, l := range links {
		switch {
		case l.From == id && l.Kind == LinkContextFrom:
			out.ContextFrom = l.To
		case l.From == id && l.Kind == LinkReference:
			out.References = append(out.References, l.To)
		case l.To == id && l.Kind == LinkContextFrom:
			out.ContextChildren = append(out.ContextChildren, l.From)
		case l.To == id && l.Kind == LinkReference:
			out.ReferencedBy = append(out.ReferencedBy, l.From)
		}
	}
	return out
}

// DelegationLinks returns the links of a delegation the principal may see,
// both ways.
func (s *Service) DelegationLinks(ctx context.Context, p Principal, id uuid.UUID) (Links, error) {
	if _, err := Visible(ctx, s.store, p, id); err != nil {
		return Links{}, err
	}
	links, err := s.store.DelegationLinks(ctx, id)
	if err != nil {
		return Links{}, err
	}
	return LinksOf(id, links), nil
}

// checkLinks validates, inside tx, the delegations a new one is linked to:
// each must exist, be visible to the principal, be with the same org, and
// have the remote context (context_from) or task (references) to link to.
func checkLinks(ctx context.Context, tx Tx, p Principal, in CreateInput) error {
	if len(in.References) > maxReferences {
		return Invalid("references", "at most %d delegations", maxReferences)
	}
	load := func(field string, id uuid.UUID) (Delegation, error) {
		d, err := tx.Delegation(ctx, id)
		if errors.Is(err, ErrNotFound) || (err == nil && !p.SeesTenant(d.Tenant)) {
			return Delegation{}, &ReferenceError{Field: field, ID: id.String()}
		}
		if err != nil {
			return Delegation{}, err
		}
		if d.OrgID != in.OrgID {
			return Delegation{}, Conflict("link_org_mismatch", "delegation %s is with org %s, not %s: remote contexts and tasks are per agent", d.ID, d.OrgID, in.OrgID)
		}
		return d, nil
	}
	if in.ContextFrom != uuid.Nil {
		d, err := load("context_from", in.ContextFrom)
		if err != nil {
			return err
		}
		if d.Remote.ContextID == "" {
			return Conflict("link_without_context", "delegation %s has no remote context id yet", d.ID)
		}
	}
	seen := map[uuid.UUID]bool{}
	for _, id := range in.References {
		if seen[id] {
			return Invalid("references", "lists delegation %s twice", id)
		}
		seen[id] = true
		d, err := load("references", id)
		if err != nil {
			return err
		}
		if d.Remote.TaskID == "" {
			return Conflict("link_without_task", "delegation %s has no remote task id yet", d.ID)
		}
	}
	return nil
}

// insertLinks records a new delegation's links inside tx.
func insertLinks(ctx context.Context, tx Tx, d Delegation, in CreateInput, at time.Time) error {
	if in.ContextFrom != uuid.Nil {
		if err := tx.InsertDelegationLink(ctx, DelegationLink{From: d.ID, To: in.ContextFrom, Kind: LinkContextFrom}, at); err != nil {
			return fmt.Errorf("link delegation %s: %w", d.ID, err)
		}
	}
	for _, id := range in.References {
		if err := tx.InsertDelegationLink(ctx, DelegationLink{From: d.ID, To: id, Kind: LinkReference}, at); err != nil {
			return fmt.Errorf("link delegation %s: %w", d.ID, err)
		}
	}
	return nil
}

// linkData is what the delegation_created event says about the links.
func linkData(in CreateInput, data *DelegationCreatedData) {
	if in.ContextFrom != uuid.Nil {
		data.ContextFrom = in.ContextFrom.String()
	}
	if len(in.References) > 0 {
		refs := make([]string, len(in.References))
		for i, id := range in.References {
			refs[i] = id.String()
		}
		data.References = refs
	}
}
