package httpapi

import (
	"context"
	"mime"
	"net/http"
	"strconv"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/internal/jose"
)

// joseContentType is the media type of a compact JWS (RFC 7515 §9.2.1).
const joseContentType = "application/jose"

// EvidenceOutcomeHeader names the response header that says what became of
// accepted evidence: applied, duplicate or late_evidence.
const EvidenceOutcomeHeader = "Quittance-Evidence-Outcome"

type evidenceInput struct {
	RawBody []byte `contentType:"application/jose" doc:"A compact JWS signed with one of the org's registered keys."`
}

// EvidenceBody is the answer to accepted signed evidence: which delegation
// it matched and what became of it, nothing more. The signer is another
// org: the delegation's tenant, budget, hold and internal errors are the
// delegator's own (compensation/SIGNING.md#answers).
type EvidenceBody struct {
	ID       string              `json:"id" format:"uuid" doc:"The delegation the token matched."`
	Evidence EvidenceOutcomeBody `json:"evidence"`
}

// EvidenceOutcomeBody says what became of accepted evidence.
type EvidenceOutcomeBody struct {
	Outcome string `json:"outcome" enum:"applied,duplicate,late_evidence,received" doc:"applied: the obligation moved; duplicate: this exact token, or evidence with the same compensation idempotency key and the same payload (kind and receipt id), was accepted before and nothing changed; late_evidence: the obligation had already ended, so the token was recorded as a late_evidence event and not applied; received: the remote task has not ended as far as the ledger knows, so the evidence is kept and applied when the gating canceled or failed status is observed."`
}

type evidenceOutput struct {
	Outcome string `header:"Quittance-Evidence-Outcome"`
	Body    EvidenceBody
}

// evidenceGate refuses, before the body is read, requests to the evidence
// endpoints that are not application/jose (415) or declare a body larger
// than a token may be (413 token_too_large). A body sent without a length
// is cut off by the operation's MaxBodyBytes (413 body_too_large).
func (s *Server) evidenceGate(ctx huma.Context, next func(huma.Context)) {
	mt, _, err := mime.ParseMediaType(ctx.Header("Content-Type"))
	if err != nil || mt != joseContentType {
		s.writeProblem(ctx, newProblem(http.StatusUnsupportedMediaType, "unsupported_media_type",
			"send the compact JWS with Content-Type: application/jose"))
		return
	}
	if n, err := strconv.ParseInt(ctx.Header("Content-Length"), 10, 64); err == nil && n > jose.MaxTokenSize {
		s.writeProblem(ctx, newProblem(http.StatusRequestEntityTooLarge, compensation.CodeTokenTooLarge,
			"the token exceeds "+strconv.Itoa(jose.MaxTokenSize)+" bytes"))
		return
	}
	next(ctx)
}

// SweepBody is the result of an on-demand sweep.
type SweepBody struct {
	Moved int `json:"moved" doc:"How many obligations moved from revocation_pending_compensation to compensation_unconfirmed. Holds stay active."`
}

// RevokeIdentityBody is the org after its identity was revoked and how many
// obligations were escalated.
type RevokeIdentityBody struct {
	Org       OrgBody `json:"org"`
	Escalated int     `json:"escalated" doc:"Open obligations (held, revocation_pending_compensation, compensation_unconfirmed) moved to escalated. Holds stay active."`
}

// WriteOffBody is a write-off.
type WriteOffBody struct {
	ID            string          `json:"id" format:"uuid"`
	DelegationID  string          `json:"delegation_id" format:"uuid"`
	Status        string          `json:"status" enum:"pending_approval,executed,void,rejected"`
	Amount        MoneyBody       `json:"amount"`
	Reason        string          `json:"reason"`
	Reference     string          `json:"reference,omitempty"`
	RequestedBy   string          `json:"requested_by" doc:"Name of the requesting on-call principal."`
	RequestedByID string          `json:"requested_by_id,omitempty" format:"uuid" doc:"Id of the requesting on-call principal."`
	ApprovedBy    string          `json:"approved_by,omitempty" doc:"Name of the approving on-call principal, above the threshold."`
	ApprovedByID  string          `json:"approved_by_id,omitempty" format:"uuid" doc:"Id of the approving on-call principal."`
	RejectedBy    string          `json:"rejected_by,omitempty" doc:"Name of the on-call principal that rejected it."`
	RejectedByID  string          `json:"rejected_by_id,omitempty" format:"uuid" doc:"Id of the on-call principal that rejected it."`
	Rejection     string          `json:"rejection_reason,omitempty"`
	CreatedAt     time.Time       `json:"created_at"`
	ExecutedAt    *time.Time      `json:"executed_at,omitempty"`
	Delegation    *DelegationBody `json:"delegation,omitempty" doc:"The delegation after the request or approval."`
}

func writeOffBody(w compensation.WriteOff) WriteOffBody {
	return WriteOffBody{
		ID: w.ID.String(), DelegationID: w.DelegationID.String(), Status: string(w.Status),
		Amount: MoneyBody{AmountMinor: w.Amount.AmountMinor, Currency: w.Amount.Currency},
		Reason: w.Reason, Reference: w.Reference, RequestedBy: w.RequestedBy, ApprovedBy: w.ApprovedBy,
		RejectedBy: w.RejectedBy, Rejection: w.RejectionReason,
		RequestedByID: idOrEmpty(w.RequestedByID), ApprovedByID: idOrEmpty(w.ApprovedByID), RejectedByID: idOrEmpty(w.RejectedByID),
		CreatedAt: w.CreatedAt, ExecutedAt: timePtr(w.ExecutedAt),
	}
}

// idOrEmpty is id as text, or empty for none.
func idOrEmpty(id uuid.UUID) string {
	if id == uuid.Nil {
		return ""
	}
	return id.String()
}

func writeOffResultBody(r compensation.WriteOffResult) WriteOffBody {
	b := writeOffBody(r.WriteOff)
	d := delegationBody(r.Delegation)
	b.Delegation = &d
	return b
}

const evidenceDescription = `The body is a compact JWS (Content-Type: application/jose, at most 16 KiB). No bearer token: the signature, by a key registered for the org that owns the delegation, is the credential. The delegation is found by the token's (iss, sub) and, when delegations of more than one tenant record that task id, by the compensation idempotency key the token carries.

200 with the delegation's id alone (id) when the token is accepted — nothing else of the delegation, which is the delegator's; the evidence.outcome member and the Quittance-Evidence-Outcome header say what became of it: applied (the obligation moved), duplicate (this exact token, or evidence with the same compensation idempotency key and the same payload — kind and receipt id — was accepted before: the same result, nothing changed), received (the obligation is still held: the remote task has not ended as far as the ledger knows; the evidence is kept, recorded as an evidence_received event, and applied when the canceled or failed status that calls for it is observed — held goes straight to compensated or released; if the task completes instead it is listed as an unused_early_evidence anomaly) or late_evidence (the obligation had already ended, e.g. been written off: the token is recorded as a late_evidence event for reconciliation and not applied — the state is unchanged).

Refusals are problem+json and change nothing; no refusal is appended to a delegation's chain. The signature is checked first, with the keys of the org the token's iss names, and every refusal decided before the token verified and matched a delegation is the same 401 with code token_refused and one fixed detail, whatever the reason — malformed, bad or missing signature, unknown or unusable key, wrong typ, aud or iss, expired, not yet valid, too long-lived, missing claims, an iss naming no registered org or a revoked one, a sub naming no delegation — and whether the org, the task or the delegation exists or is revoked; each costs the same signature verification, against a decoy key when there is no usable key (only a kid unknown to an org whose keys come from a JWKS URL takes longer: the ledger reads the org again and may fetch that URL, at most once per org per QUITTANCE_ORG_JWKS_UNKNOWN_KID_INTERVAL, a minute by default). The reason stays with the ledger: it is logged, counted per org and reason (quittance_evidence_tokens_refused_total, and refused_tokens in /v1/anomalies with the last samples, each by the token's sha256). Only a token that verified, and so comes from the org whose task it names, is told more about that task: 409 token_replayed (its jti was used for another token) and evidence_not_expected (an escalated obligation); 422 token_idempotency_key_mismatch (not the delegation's compensation idempotency key), token_idempotency_key_required (the task id is recorded by more than one tenant and the token carries no idempotency_key), token_amount_invalid (reversed_amount_minor over the hold) and evidence_conflict (evidence with the same compensation idempotency key and another payload was accepted before; recorded as an evidence_conflict event holding the verified token, and listed as an anomaly). Decided from the request alone: 413 token_too_large (or body_too_large) over 16 KiB, 415 for another content type. The endpoints are rate limited per client address (429 rate_limited, with Retry-After), a bearer token or not.`

// registerCompensation is the route table of compensation: the evidence
// remote orgs post, the sweep, identity revocation and write-offs.
func (s *Server) registerCompensation() {
	if s.compensation == nil {
		return
	}
	remote := []string{"compensation evidence"}
	evidenceOp := func(id, path, summary string) huma.Operation {
		return huma.Operation{
			OperationID: id, Method: http.MethodPost, Path: path, Tags: remote, Summary: summary,
			Description:  evidenceDescription,
			MaxBodyBytes: jose.MaxTokenSize + 1, // huma refuses a body that reaches the limit
			Middlewares:  huma.Middlewares{s.evidenceGate},
			Errors: []int{http.StatusUnauthorized, http.StatusConflict, http.StatusRequestEntityTooLarge,
				http.StatusUnsupportedMediaType, http.StatusUnprocessableEntity, http.StatusTooManyRequests},
		}
	}
	huma.Register(s.api, evidenceOp("post-compensation-ack", "/v1/compensation/acks",
		"Acknowledge compensation (typ compensation-ack+jwt)"), s.postCompensationAck)
	huma.Register(s.api, evidenceOp("post-compensation-declaration", "/v1/compensation/declarations",
		"Declare that no compensation is required (typ no-compensation-required+jwt)"), s.postCompensationDeclaration)

	admin := []string{"admin"}
	huma.Register(s.api, huma.Operation{
		OperationID: "sweep-compensation", Method: http.MethodPost, Path: "/admin/v1/compensation/sweep", Tags: admin,
		Summary:     "Move obligations past their compensation deadline to compensation_unconfirmed",
		Description: "Runs the periodic sweep now (on-call); the events it causes name the caller as their actor. Holds stay active: a deadline never releases money.",
		Security:    bearerAuth,
	}, s.sweepCompensation)

	huma.Register(s.api, huma.Operation{
		OperationID: "revoke-org-identity", Method: http.MethodPost, Path: "/admin/v1/orgs/{id}/revoke-identity", Tags: admin,
		Summary:     "Revoke a remote org's agent identity and escalate its open obligations",
		Description: "On-call. Marks the identity revoked (its tokens are refused from now on) and, in the same transaction, moves every held, revocation_pending_compensation and compensation_unconfirmed obligation of the org to escalated, holds intact. 409 identity_already_revoked if it already is.",
		Security:    bearerAuth,
	}, s.revokeOrgIdentity)

	huma.Register(s.api, huma.Operation{
		OperationID: "request-write-off", Method: http.MethodPost, Path: "/admin/v1/delegations/{id}/write-offs", Tags: admin,
		Summary: "Write an obligation off",
		Description: "On-call, with a reason. Allowed from revocation_pending_compensation, compensation_unconfirmed and escalated (else 409 write_off_not_allowed). " +
			"At or below the approval threshold it executes at once (status executed, the hold becomes written off); above it, status pending_approval until a different on-call identity approves it.",
		Security: bearerAuth, DefaultStatus: http.StatusCreated,
	}, s.requestWriteOff)

	huma.Register(s.api, huma.Operation{
		OperationID: "approve-write-off", Method: http.MethodPost, Path: "/admin/v1/write-offs/{id}/approve", Tags: admin,
		Summary: "Approve a pending write-off (four eyes)",
		Description: "On-call, by a different person than the requester (else 403 self_approval): another credential of the requester, or another principal linked to theirs through an OpenID Connect identity, is the same person. 409 write_off_not_pending if it is not pending; " +
			"409 write_off_not_allowed if the obligation meanwhile left the write-off states (e.g. an ack arrived) — the write-off is then voided.",
		Security: bearerAuth,
	}, s.approveWriteOff)

	huma.Register(s.api, huma.Operation{
		OperationID: "get-write-off", Method: http.MethodGet, Path: "/admin/v1/write-offs/{id}", Tags: admin,
		Summary: "Get a write-off", Security: bearerAuth,
	}, s.getWriteOff)
}

// postCompensationAck serves POST /v1/compensation/acks: a remote org's
// signed compensation ack.
func (s *Server) postCompensationAck(ctx context.Context, in *evidenceInput) (*evidenceOutput, error) {
	res, err := s.compensation.SubmitAck(ctx, in.RawBody, clientAddress(ctx))
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return evidenceOutputOf(res), nil
}

// postCompensationDeclaration serves POST /v1/compensation/declarations: a
// remote org's signed declaration that no compensation is required.
func (s *Server) postCompensationDeclaration(ctx context.Context, in *evidenceInput) (*evidenceOutput, error) {
	res, err := s.compensation.SubmitDeclaration(ctx, in.RawBody, clientAddress(ctx))
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return evidenceOutputOf(res), nil
}

type sweepOutput struct {
	Body SweepBody
}

// sweepCompensation serves POST /admin/v1/compensation/sweep: move
// obligations past their compensation deadline to compensation_unconfirmed.
func (s *Server) sweepCompensation(ctx context.Context, _ *struct{}) (*sweepOutput, error) {
	n, err := s.compensation.SweepNow(ctx, principal(ctx))
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return &sweepOutput{Body: SweepBody{Moved: n}}, nil
}

type revokeIdentityInput struct {
	ID   string `path:"id" maxLength:"128" doc:"The org id."`
	Body struct {
		Reason string `json:"reason" minLength:"1" maxLength:"4096" doc:"Why the org's agent identity is no longer trusted."`
	}
}

type revokeIdentityOutput struct {
	Body RevokeIdentityBody
}

// revokeOrgIdentity serves POST /admin/v1/orgs/{id}/revoke-identity: revoke
// a remote org's agent identity and escalate its open obligations.
func (s *Server) revokeOrgIdentity(ctx context.Context, in *revokeIdentityInput) (*revokeIdentityOutput, error) {
	o, n, err := s.compensation.RevokeIdentity(ctx, principal(ctx), in.ID, in.Body.Reason)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return &revokeIdentityOutput{Body: RevokeIdentityBody{Org: orgBody(o), Escalated: n}}, nil
}

type writeOffRequestInput struct {
	ID   string `path:"id" doc:"The delegation id (a UUID)."`
	Body struct {
		Reason    string `json:"reason" minLength:"1" maxLength:"4096" doc:"Why the loss is accepted."`
		Reference string `json:"reference,omitempty" maxLength:"256" doc:"An external reference: ticket, incident."`
	}
}

type writeOffOutput struct {
	Status int
	Body   WriteOffBody
}

// writeOffOK is the 200 answer with the write-off of res.
func writeOffOK(res compensation.WriteOffResult) *writeOffOutput {
	return &writeOffOutput{Status: http.StatusOK, Body: writeOffResultBody(res)}
}

// writeOffCreated is the 201 answer with the write-off of res.
func writeOffCreated(res compensation.WriteOffResult) *writeOffOutput {
	return &writeOffOutput{Status: http.StatusCreated, Body: writeOffResultBody(res)}
}

// requestWriteOff serves POST /admin/v1/delegations/{id}/write-offs: write
// an obligation off.
func (s *Server) requestWriteOff(ctx context.Context, in *writeOffRequestInput) (*writeOffOutput, error) {
	return byPathID(ctx, s, in.ID, func(id uuid.UUID) (compensation.WriteOffResult, error) {
		return s.compensation.RequestWriteOff(ctx, principal(ctx), id, compensation.WriteOffInput{
			Reason: in.Body.Reason, Reference: in.Body.Reference,
		})
	}, writeOffCreated)
}

type writeOffPathInput struct {
	ID string `path:"id" doc:"The write-off id (a UUID)."`
}

// approveWriteOff serves POST /admin/v1/write-offs/{id}/approve: approve a
// pending write-off (four eyes).
func (s *Server) approveWriteOff(ctx context.Context, in *writeOffPathInput) (*writeOffOutput, error) {
	return byPathID(ctx, s, in.ID, func(id uuid.UUID) (compensation.WriteOffResult, error) {
		return s.compensation.ApproveWriteOff(ctx, principal(ctx), id)
	}, writeOffOK)
}

// getWriteOff serves GET /admin/v1/write-offs/{id}: get a write-off.
func (s *Server) getWriteOff(ctx context.Context, in *writeOffPathInput) (*writeOffOutput, error) {
	return byPathID(ctx, s, in.ID, func(id uuid.UUID) (compensation.WriteOff, error) {
		return s.compensation.GetWriteOff(ctx, principal(ctx), id)
	}, func(w compensation.WriteOff) *writeOffOutput {
		return &writeOffOutput{Status: http.StatusOK, Body: writeOffBody(w)}
	})
}

func evidenceOutputOf(res compensation.EvidenceResult) *evidenceOutput {
	return &evidenceOutput{
		Outcome: string(res.Outcome),
		Body: EvidenceBody{
			ID:       res.Delegation.ID.String(),
			Evidence: EvidenceOutcomeBody{Outcome: string(res.Outcome)},
		},
	}
}
