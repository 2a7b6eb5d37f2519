package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// CardStatus is what the last check of an org's agent card found
// (ledger/DESIGN.md §4.1).
type CardStatus string

// The card statuses.
const (
	// CardUnchecked: no card of the org was checked yet.
	CardUnchecked CardStatus = "unchecked"
	// CardUnsigned: the card carries no signature. It is used unless the
	// org requires a signed card.
	CardUnsigned CardStatus = "unsigned"
	// CardVerified: a signature of the card verified with a key of the
	// org, the pinned one when a key is pinned.
	CardVerified CardStatus = "verified"
	// CardFailed: the card carries signatures and none verifies; it is
	// not used.
	CardFailed CardStatus = "failed"
	// CardChangeAwaitingApproval: the card's signing key or compensation
	// params differ from those pinned; it is not used until on-call
	// accepts the change (ChangeOrgCardAccept, two persons).
	CardChangeAwaitingApproval CardStatus = "change_awaiting_approval"
)

// ChangeOrgCardAccept accepts an org's agent card whose signing key or
// compensation extension params changed: its key and params become the
// org's pin, and the card is used again.
const ChangeOrgCardAccept ChangeKind = "org_card_accept"

// orgCardActor is the actor of what a check of an org's card records.
const orgCardActor = "system:agent_card"

// CardPin is the signing key and compensation extension params of an
// org's agent card, pinned at its first verified use or by an approved
// org_card_accept change.
type CardPin struct {
	KeyID      string `json:"kid,omitempty"`
	Thumbprint string `json:"thumbprint,omitempty"`
	// CompensationParams are the params of the card's compensation
	// extension; empty when the card declares none.
	CompensationParams json.RawMessage `json:"compensation_params,omitempty"`
	PinnedAt           time.Time       `json:"pinned_at"`
}

// IsZero reports whether nothing is pinned.
func (p CardPin) IsZero() bool { return p.PinnedAt.IsZero() }

// Admits reports whether a card observed as obs carries the pinned key and
// compensation params: such a card is used without on-call's approval.
func (p CardPin) Admits(obs CardObservation) bool {
	return p.Thumbprint == obs.Thumbprint && sameJSON(p.CompensationParams, obs.CompensationParams)
}

// CardObservation is what Quittance found on fetching an org's agent card
// and checking its signatures (delegate/A2A.md).
type CardObservation struct {
	// Signed: the card carries signatures. Verified: one of them verified,
	// with the key KeyID, of RFC 7638 thumbprint Thumbprint.
	Signed, Verified   bool
	KeyID, Thumbprint  string
	CompensationParams json.RawMessage
	// Reason is why no signature verified.
	Reason string
}

// CardCheck is the state of an org's agent card as last checked.
type CardCheck struct {
	Status             CardStatus      `json:"status"`
	KeyID              string          `json:"kid,omitempty"`
	Thumbprint         string          `json:"thumbprint,omitempty"`
	CompensationParams json.RawMessage `json:"compensation_params,omitempty"`
	// Reason says why the card is not used, or what changed.
	Reason string `json:"reason,omitempty"`
	// Used: Quittance sends to the card's interfaces.
	Used bool `json:"used"`
	// Since is when the card was first found in this state.
	Since time.Time `json:"since"`
}

// State is the check's status, CardUnchecked when there was none.
func (c CardCheck) State() CardStatus {
	if c.Status == "" {
		return CardUnchecked
	}
	return c.Status
}

// sameState reports whether two checks found the same thing.
func (c CardCheck) sameState(o CardCheck) bool {
	return c.Status == o.Status && c.KeyID == o.KeyID && c.Thumbprint == o.Thumbprint && c.Reason == o.Reason &&
		c.Used == o.Used && sameJSON(c.CompensationParams, o.CompensationParams)
}

// ObserveAgentCard records what a check of org orgID's agent card found
// and decides whether the card is used (ledger/DESIGN.md §4.1): a card
// whose signatures all fail is not; an unsigned card is not when the org
// requires a signed card or a key is pinned; the first verified card pins
// its key and compensation params; a card whose key or params differ from
// the pin is held until on-call accepts it (AcceptOrgCard). Each change of
// state is an event on the org's stream; a check that finds what the last
// one found writes nothing. The returned check says whether the card is
// used, and why not.
func (s *Service) ObserveAgentCard(ctx context.Context, orgID string, obs CardObservation) (CardCheck, error) {
	// Most checks find what the last one found: they are answered from a
	// read, without locking the org's row.
	if org, err := s.store.Org(ctx, orgID); err == nil {
		if check, pinned, _ := judgeCard(org, obs); !pinned && check.sameState(org.CardCheck) {
			return org.CardCheck, nil
		}
	}
	var out CardCheck
	err := s.store.InTx(ctx, func(tx Tx) error {
		now := s.Now()
		org, err := tx.Admin().OrgForUpdate(ctx, orgID)
		if err != nil {
			return err
		}
		check, pinned, typ := judgeCard(org, obs)
		if check.sameState(org.CardCheck) && !pinned {
			out = org.CardCheck
			return nil
		}
		check.Since = now
		out = check
		pin := org.CardPin
		if pinned {
			pin = CardPin{KeyID: obs.KeyID, Thumbprint: obs.Thumbprint, CompensationParams: obs.CompensationParams, PinnedAt: now}
		}
		if err := tx.Admin().RecordOrgCard(ctx, orgID, check, pin); err != nil {
			return err
		}
		data := OrgCardCheckedData{
			Status: check.Status, KeyID: check.KeyID, Thumbprint: check.Thumbprint, CompensationParams: check.CompensationParams,
			Reason: check.Reason, Used: check.Used, Pinned: pinned, PinnedKeyID: pin.KeyID, PinnedThumbprint: pin.Thumbprint,
		}
		var payload EventPayload = data
		if typ == EventTypeOrgCardChangeDetected {
			payload = OrgCardChangeDetectedData(data)
		}
		_, err = Append(ctx, tx, Event{Stream: "org:" + orgID, Type: typ, At: now, Actor: orgCardActor}, payload)
		return err
	})
	if err != nil {
		return CardCheck{}, fmt.Errorf("record org %s agent card check: %w", orgID, err)
	}
	return out, nil
}

// judgeCard is the rule of ObserveAgentCard: the check of obs against
// org's registration and pin, whether obs's key and params become the pin
// (the first verified use) and the event type recording it.
func judgeCard(org Org, obs CardObservation) (CardCheck, bool, EventType) {
	c := CardCheck{KeyID: obs.KeyID, Thumbprint: obs.Thumbprint, CompensationParams: obs.CompensationParams}
	pinned := org.CardPin
	switch {
	case obs.Signed && !obs.Verified:
		c.Status, c.Reason, c.KeyID, c.Thumbprint = CardFailed, obs.Reason, "", ""
		return c, false, EventTypeOrgCardChecked
	case !obs.Signed && org.RequireSignedCard:
		c.Status, c.Reason = CardUnsigned, "the org is registered as requiring a signed agent card"
		return c, false, EventTypeOrgCardChecked
	case !obs.Signed && (pinned.IsZero() || pinned.Admits(obs)):
		c.Status, c.Used = CardUnsigned, true
		return c, false, EventTypeOrgCardChecked
	case pinned.IsZero():
		c.Status, c.Used = CardVerified, true
		return c, true, EventTypeOrgCardChecked
	case pinned.Admits(obs):
		c.Status, c.Used = CardVerified, true
		return c, false, EventTypeOrgCardChecked
	}
	c.Status, c.Reason = CardChangeAwaitingApproval, cardChange(pinned, obs)
	return c, false, EventTypeOrgCardChangeDetected
}

// cardChange says what differs between the pin and the card.
func cardChange(pinned CardPin, obs CardObservation) string {
	var what string
	switch {
	case obs.Thumbprint == "":
		what = fmt.Sprintf("the card is no longer signed (pinned key %s, thumbprint %s)", pinned.KeyID, pinned.Thumbprint)
	case pinned.Thumbprint != obs.Thumbprint:
		what = fmt.Sprintf("the card is signed with key %s (thumbprint %s), not the pinned key %s (thumbprint %s)",
			obs.KeyID, obs.Thumbprint, pinned.KeyID, pinned.Thumbprint)
	}
	if !sameJSON(pinned.CompensationParams, obs.CompensationParams) {
		if what != "" {
			what += "; "
		}
		what += "its compensation extension params differ from the pinned ones"
	}
	return what + "; an on-call principal accepts the change, a second one approves it"
}

type orgCardAcceptPayload struct {
	ID  string  `json:"id"`
	Pin CardPin `json:"pin"`
	// Base is the pin when the change was asked for; the approval is
	// refused if it changed since.
	Base CardPin `json:"base"`
}

// AcceptOrgCard asks that org id's agent card, held because its signing
// key or compensation params differ from the pin, be used: the key and
// params the last check found become the pin. It is a two-person change
// (ChangeOrgCardAccept), returned as an *ApprovalRequiredError; an org
// whose card awaits no approval is a conflict (no_card_change).
func (s *Service) AcceptOrgCard(ctx context.Context, p Principal, id string) (Org, error) {
	if err := Authorize(p, ActionAdminister); err != nil {
		return Org{}, err
	}
	var (
		org     Org
		pending *PendingChange
	)
	err := s.store.InTx(ctx, func(tx Tx) error {
		now := s.Now()
		var err error
		if org, err = tx.Admin().OrgForUpdate(ctx, id); err != nil {
			return err
		}
		c := org.CardCheck
		if c.Status != CardChangeAwaitingApproval {
			return Conflict("no_card_change", "org %s's agent card is %s: there is no change to accept", id, c.State())
		}
		pl := orgCardAcceptPayload{ID: id, Pin: CardPin{KeyID: c.KeyID, Thumbprint: c.Thumbprint, CompensationParams: c.CompensationParams}, Base: org.CardPin}
		req := ChangeRequest{By: p, At: now, Kind: ChangeOrgCardAccept, Target: "org:" + id, Payload: pl,
			Summary: fmt.Sprintf("accept org %s's agent card: %s", id, c.Reason)}
		pending, err = s.ApplyOrRequest(ctx, tx, p, req, func() error {
			return s.applyOrgCard(ctx, tx, &org, pl, applied{actor: p.Actor(), at: now})
		})
		return err
	})
	return org, AwaitingApproval(pending, err)
}

// applyOrgCard pins pl's key and params on org, provided its pin is still
// pl.Base, and marks the card used, with its org_card_accepted event.
func (s *Service) applyOrgCard(ctx context.Context, tx Tx, org *Org, pl orgCardAcceptPayload, by applied) error {
	b := org.CardPin
	if b.KeyID != pl.Base.KeyID || b.Thumbprint != pl.Base.Thumbprint || !sameJSON(b.CompensationParams, pl.Base.CompensationParams) || !b.PinnedAt.Equal(pl.Base.PinnedAt) {
		return Conflict("org_card_changed", "org %s's card pin changed since this change was asked for; ask again", org.ID)
	}
	pin := pl.Pin
	pin.PinnedAt = by.at
	check := CardCheck{Status: CardVerified, KeyID: pin.KeyID, Thumbprint: pin.Thumbprint, CompensationParams: pin.CompensationParams, Used: true, Since: by.at}
	if pin.Thumbprint == "" {
		check.Status = CardUnsigned
	}
	if err := tx.Admin().RecordOrgCard(ctx, org.ID, check, pin); err != nil {
		return err
	}
	org.CardPin, org.CardCheck = pin, check
	data := OrgCardAcceptedData{
		Status: check.Status, KeyID: pin.KeyID, Thumbprint: pin.Thumbprint, CompensationParams: pin.CompensationParams, Used: true,
		PinnedKeyID: pin.KeyID, PinnedThumbprint: pin.Thumbprint, PreviousKeyID: b.KeyID, PreviousThumbprint: b.Thumbprint,
		PendingChangeID: by.change,
	}
	_, err := Append(ctx, tx, Event{Stream: "org:" + org.ID, Type: EventTypeOrgCardAccepted, At: by.at, Actor: by.actor}, data)
	return err
}

// applyOrgCardChange applies an approved org_card_accept change.
func (s *Service) applyOrgCardChange(ctx context.Context, tx Tx, p Principal, c PendingChange, now time.Time) (string, error) {
	pl, err := DecodeChangePayload[orgCardAcceptPayload](c)
	if err != nil {
		return "", err
	}
	org, err := tx.Admin().OrgForUpdate(ctx, pl.ID)
	if err != nil {
		return "", err
	}
	return "", s.applyOrgCard(ctx, tx, &org, pl, applied{actor: p.Actor(), at: now, change: c.ID.String()})
}
