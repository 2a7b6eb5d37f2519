package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/quittance/quittance/ledger"
)

// EvidencePackBody is ledger.EvidencePack as the API documents it; the
// JSON is the same, field for field.
type EvidencePackBody struct {
	Format      string             `json:"format" doc:"quittance-evidence-pack/1."`
	GeneratedAt time.Time          `json:"generated_at" doc:"When the pack was made (informational)."`
	LedgerID    string             `json:"ledger_id" doc:"The ledger's id: the aud of every token."`
	Delegation  PackDelegationBody `json:"delegation"`
	Head        PackHeadBody       `json:"head" doc:"The stream's last event when the pack was made; the events end there."`
	Events      []EventRecord      `json:"events" doc:"The delegation's whole stream, in order."`
	Tokens      []PackTokenBody    `json:"tokens" doc:"Every token stored on the events, each exactly its event's evidence."`
	OrgKeys     []PackOrgKeyBody   `json:"org_keys" doc:"The org's keys in force when any of the tokens was accepted."`
	OrgEvents   []EventRecord      `json:"org_events" doc:"The org's whole stream, in order: each org key must have been added by one of its events at the key's valid_from, and removed where it ends."`
	LedgerJWKS  json.RawMessage    `json:"ledger_jwks,omitempty" doc:"The ledger's public JWK Set (/.well-known/jwks.json)."`
	Checkpoint  string             `json:"checkpoint,omitempty" doc:"The compact JWS of the ledger's latest signed checkpoint when the pack was made (read before the events): it anchors the stream's head. Absent when the ledger has signed none."`
}

// PackDelegationBody is the delegation an evidence pack is about.
type PackDelegationBody struct {
	ID                         string                 `json:"id"`
	Stream                     string                 `json:"stream"`
	BusinessOperationID        string                 `json:"business_operation_id"`
	OrgID                      string                 `json:"org_id"`
	TaskClass                  string                 `json:"task_class"`
	BudgetID                   string                 `json:"budget_id"`
	AmountMinor                int64                  `json:"amount_minor"`
	Currency                   string                 `json:"currency"`
	RemoteTaskID               string                 `json:"remote_task_id"`
	ObligationState            ledger.ObligationState `json:"obligation_state"`
	CompensationIdempotencyKey string                 `json:"compensation_idempotency_key"`
}

// PackHeadBody names a stream's last event.
type PackHeadBody struct {
	StreamSeq int32  `json:"stream_seq"`
	Hash      string `json:"hash"`
}

// PackTokenBody is one token stored on an event of the pack.
type PackTokenBody struct {
	StreamSeq  int32            `json:"stream_seq"`
	EventType  ledger.EventType `json:"event_type"`
	AcceptedAt time.Time        `json:"accepted_at"`
	Token      string           `json:"token"`
}

// PackOrgKeyBody is one row of the org's key history.
type PackOrgKeyBody struct {
	OrgID      string          `json:"org_id"`
	KeyID      string          `json:"kid"`
	Thumbprint string          `json:"thumbprint" doc:"RFC 7638 JWK thumbprint (SHA-256, base64url)."`
	JWK        json.RawMessage `json:"jwk"`
	ValidFrom  time.Time       `json:"valid_from"`
	ValidUntil time.Time       `json:"valid_until,omitzero"`
}

func evidencePackBody(p ledger.EvidencePack) EvidencePackBody {
	b := EvidencePackBody{
		Format: p.Format, GeneratedAt: p.GeneratedAt, LedgerID: p.LedgerID, Delegation: PackDelegationBody(p.Delegation),
		Head: PackHeadBody(p.Head), Events: make([]EventRecord, len(p.Events)), Tokens: make([]PackTokenBody, len(p.Tokens)),
		OrgKeys: make([]PackOrgKeyBody, len(p.OrgKeys)), LedgerJWKS: p.LedgerJWKS, Checkpoint: p.Checkpoint,
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

type evidencePackOutput struct {
	ContentDisposition string `header:"Content-Disposition"`
	Body               EvidencePackBody
}

func (s *Server) registerEvidencePack() {
	if s.reports == nil {
		return
	}
	huma.Register(s.api, huma.Operation{
		OperationID: "delegation-evidence-pack", Method: http.MethodGet, Path: "/v1/delegations/{id}/evidence-pack", Tags: []string{"reconciliation"},
		Summary: "One self-contained file an auditor verifies offline (quittance verify-pack)",
		Description: "The delegation's hash-chained events, every stored token, the org's keys in force when each token " +
			"was accepted (with RFC 7638 thumbprints), the ledger's public JWK Set, and the stream's head. Roles finance and oncall.",
		Security: bearerAuth,
	}, func(ctx context.Context, in *delegationPathInput) (*evidencePackOutput, error) {
		id, err := parseID(in.ID)
		if err != nil {
			return nil, err
		}
		var ledgerJWKS []byte
		if s.jwks != nil {
			ledgerJWKS = s.jwks()
		}
		// The checkpoint first: read after the events, it could sign an
		// event appended meanwhile that the pack does not hold.
		var checkpoint string
		if s.checkpoints != nil {
			cp, err := s.checkpoints.Latest(ctx, principal(ctx))
			switch {
			case err == nil:
				checkpoint = cp.JWS
			case !errors.Is(err, ledger.ErrNotFound):
				return nil, s.fail(ctx, err)
			}
		}
		pack, err := s.reports.EvidencePack(ctx, principal(ctx), id, s.ledgerID, ledgerJWKS, checkpoint)
		if err != nil {
			return nil, s.fail(ctx, err)
		}
		return &evidencePackOutput{
			ContentDisposition: `attachment; filename="evidence-pack-` + id.String() + `.json"`,
			Body:               evidencePackBody(pack),
		}, nil
	})
}
