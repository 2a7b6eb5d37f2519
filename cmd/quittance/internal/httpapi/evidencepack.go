package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/quittance/quittance/ledger/audit"
)

// EvidencePackBody is audit.EvidencePack as the API documents it; the
// JSON is the same, field for field.
type EvidencePackBody struct {
	Format      string             `json:"format" doc:"quittance-evidence-pack/2."`
	GeneratedAt time.Time          `json:"generated_at" doc:"When the pack was made (informational)."`
	LedgerID    string             `json:"ledger_id" doc:"The ledger's id: the aud of every token."`
	Delegation  PackDelegationBody `json:"delegation"`
	Head        PackHeadBody       `json:"head" doc:"The stream's last event when the pack was made; the events end there."`
	Events      []EventRecord      `json:"events" doc:"The delegation's whole stream, in order."`
	Tokens      []PackTokenBody    `json:"tokens" doc:"Every token stored on the events, each exactly its event's evidence."`
	OrgKeys     []PackOrgKeyBody   `json:"org_keys" doc:"The org's keys in force when any of the tokens was accepted."`
	OrgEvents   []EventRecord      `json:"org_events" doc:"The org's whole stream, in order: each org key must have been added by one of its events at the key's valid_from, and removed where it ends."`
	LedgerJWKS  json.RawMessage    `json:"ledger_jwks,omitempty" doc:"The ledger's public JWK Set (/.well-known/jwks.json)."`
	Checkpoints []string           `json:"checkpoints,omitempty" doc:"The compact JWS of the checkpoints that signed the delegation's and the org's latest signed stream heads, oldest first (read before the events): they anchor the streams' heads. Absent while no checkpoint covers either stream."`
}

// PackDelegationBody, PackHeadBody and PackTokenBody are the pack's
// delegation, stream head and stored tokens as the API documents them:
// audit's types under the names the OpenAPI document gives them.
type (
	PackDelegationBody audit.PackDelegation
	PackHeadBody       audit.PackHead
	PackTokenBody      audit.PackToken
)

// PackOrgKeyBody is one row of the org's key history.
type PackOrgKeyBody struct {
	OrgID      string          `json:"org_id"`
	KeyID      string          `json:"kid"`
	Thumbprint string          `json:"thumbprint" doc:"RFC 7638 JWK thumbprint (SHA-256, base64url)."`
	JWK        json.RawMessage `json:"jwk"`
	ValidFrom  time.Time       `json:"valid_from"`
	ValidUntil time.Time       `json:"valid_until,omitzero"`
}

func evidencePackBody(p audit.EvidencePack) EvidencePackBody {
	b := EvidencePackBody{
		Format: p.Format, GeneratedAt: p.GeneratedAt, LedgerID: p.LedgerID, Delegation: PackDelegationBody(p.Delegation),
		Head: PackHeadBody(p.Head), Events: make([]EventRecord, len(p.Events)), Tokens: make([]PackTokenBody, len(p.Tokens)),
		OrgKeys: make([]PackOrgKeyBody, len(p.OrgKeys)), LedgerJWKS: p.LedgerJWKS, Checkpoints: p.Checkpoints,
		OrgEvents: make([]EventRecord, len(p.OrgEvents)),
	}
	for i, e := range p.OrgEvents {
		b.OrgEvents[i] = EventRecord(e)
	}
	for i, e := range p.Events {
		b.Events[i] = EventRecord(e)
	}
	for i, t := range p.Tokens {
		b.Tokens[i] = PackTokenBody(t)
	}
	for i, k := range p.OrgKeys {
		b.OrgKeys[i] = PackOrgKeyBody(k)
	}
	return b
}

// registerEvidencePack is the route of a delegation's evidence pack.
func (s *Server) registerEvidencePack() {
	if s.reports == nil {
		return
	}
	huma.Register(s.api, huma.Operation{
		OperationID: "delegation-evidence-pack", Method: http.MethodGet, Path: "/v1/delegations/{id}/evidence-pack", Tags: []string{"reconciliation"},
		Summary: "One self-contained file an auditor verifies offline (quittance verify-pack)",
		Description: "The delegation's hash-chained events, every stored token, the org's keys in force when each token " +
			"was accepted (with RFC 7638 thumbprints), the org's stream, the ledger's public JWK Set, the stream's head and the " +
			"signed checkpoints that anchor both streams. Roles finance and oncall.",
		Security: bearerAuth,
	}, s.delegationEvidencePack)
}

type evidencePackOutput struct {
	ContentDisposition string `header:"Content-Disposition"`
	Body               EvidencePackBody
}

// delegationEvidencePack serves GET /v1/delegations/{id}/evidence-pack: one
// self-contained file an auditor verifies offline (quittance verify-pack).
func (s *Server) delegationEvidencePack(ctx context.Context, in *delegationPathInput) (*evidencePackOutput, error) {
	id, err := parseID(in.ID)
	if err != nil {
		return nil, err
	}
	var ledgerJWKS []byte
	if s.jwks != nil {
		ledgerJWKS = s.jwks()
	}
	var anchor audit.PackAnchor
	if s.checkpoints != nil {
		anchor = func(ctx context.Context, streams ...string) ([]string, error) {
			list, err := s.checkpoints.Signing(ctx, principal(ctx), streams...)
			jws := make([]string, len(list))
			for i, c := range list {
				jws[i] = c.JWS
			}
			return jws, err
		}
	}
	pack, err := s.reports.EvidencePack(ctx, principal(ctx), id, s.ledgerID, ledgerJWKS, anchor)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return &evidencePackOutput{
		ContentDisposition: `attachment; filename="evidence-pack-` + id.String() + `.json"`,
		Body:               evidencePackBody(pack),
	}, nil
}
