package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/quittance/quittance/ledger"
)

// AgentCardBody is the signature state of an org's agent card
// (ledger/DESIGN.md §4.1).
type AgentCardBody struct {
	Status             string             `json:"status" enum:"unchecked,unsigned,verified,failed,change_awaiting_approval" doc:"What the last check of the card found: unchecked (none yet), unsigned, verified (a signature verified with kid and thumbprint), failed (signatures present, none verifies: reason), change_awaiting_approval (the signing key or compensation params differ from the pin: reason; accept it with POST /admin/v1/orgs/{id}/agent-card/accept)."`
	Used               bool               `json:"used" doc:"Quittance sends dispatches and compensation requests to the card's interfaces; when false they are held off."`
	KeyID              string             `json:"kid,omitempty" doc:"The kid of the key the card's signature verified with (or, awaiting approval, is signed with)."`
	Thumbprint         string             `json:"thumbprint,omitempty" doc:"That key's RFC 7638 thumbprint."`
	CompensationParams any                `json:"compensation_params,omitempty" doc:"The params of the card's compensation extension."`
	Reason             string             `json:"reason,omitempty" doc:"Why the card is not used, or what changed."`
	Since              *time.Time         `json:"since,omitempty" doc:"When the card was first found in this state."`
	Pinned             *CardPinBody       `json:"pinned,omitempty" doc:"The key and compensation params pinned at the card's first verified use or by an approved change; absent until then."`
	PendingChange      *PendingChangeBody `json:"pending_change,omitempty" doc:"Set on a 202 from the accept endpoint."`
}

// CardPinBody is an org's pinned card key and compensation params.
type CardPinBody struct {
	KeyID              string    `json:"kid,omitempty"`
	Thumbprint         string    `json:"thumbprint,omitempty"`
	CompensationParams any       `json:"compensation_params,omitempty"`
	PinnedAt           time.Time `json:"pinned_at"`
}

func agentCardBody(o ledger.Org) AgentCardBody {
	c := o.CardCheck
	b := AgentCardBody{
		Status: string(c.State()), Used: c.Used, KeyID: c.KeyID, Thumbprint: c.Thumbprint,
		CompensationParams: rawJSON(c.CompensationParams), Reason: c.Reason, Since: timePtr(c.Since),
	}
	if p := o.CardPin; !p.IsZero() {
		b.Pinned = &CardPinBody{KeyID: p.KeyID, Thumbprint: p.Thumbprint, CompensationParams: rawJSON(p.CompensationParams), PinnedAt: p.PinnedAt}
	}
	return b
}

func nonNilHosts(h []string) []string {
	if h == nil {
		return []string{}
	}
	return h
}

// registerAgentCard is the route of accepting a changed agent card.
func (s *Server) registerAgentCard() {
	huma.Register(s.api, huma.Operation{
		OperationID: "accept-org-agent-card", Method: http.MethodPost, Path: "/admin/v1/orgs/{id}/agent-card/accept", Tags: []string{"admin"},
		Summary: "Accept an org's changed agent card",
		Description: "An org's agent card whose signing key or compensation extension params differ from those pinned is not used " +
			"(agent_card.status change_awaiting_approval). This asks that the key and params the last check found become the pin: " +
			"a privileged change, answered 202 with agent_card.pending_change; it applies when a second on-call principal approves it " +
			"(POST /admin/v1/pending-changes/{id}/approve), and the card is used again. An org whose card awaits no approval is 409 no_card_change; " +
			"a pin that changed before the approval refuses the change (org_card_changed). On-call.",
		DefaultStatus: http.StatusAccepted,
		Security:      bearerAuth,
	}, s.acceptOrgCard)
}

// acceptOrgCard serves POST /admin/v1/orgs/{id}/agent-card/accept.
func (s *Server) acceptOrgCard(ctx context.Context, in *idPathInput) (*orgOutput, error) {
	o, err := s.ledger.AcceptOrgCard(ctx, principal(ctx), in.ID)
	status, pc, err := s.changeStatus(ctx, err, http.StatusOK)
	if err != nil {
		return nil, err
	}
	body := orgBody(o)
	body.AgentCard.PendingChange = pc
	return &orgOutput{Status: status, Body: body}, nil
}
