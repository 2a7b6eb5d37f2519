package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/access"
)

// PrincipalBody is a principal: a person or a machine.
type PrincipalBody struct {
	ID                        string             `json:"id"`
	Kind                      string             `json:"kind" enum:"person,machine"`
	Name                      string             `json:"name"`
	Role                      string             `json:"role"`
	Tenant                    string             `json:"tenant,omitempty"`
	Bootstrap                 bool               `json:"bootstrap,omitempty"`
	Actor                     string             `json:"actor" doc:"How events name this principal."`
	CreatedBy                 string             `json:"created_by,omitempty"`
	CreatedAt                 time.Time          `json:"created_at"`
	DisabledAt                *time.Time         `json:"disabled_at,omitempty"`
	DisabledBy                string             `json:"disabled_by,omitempty"`
	DisabledReason            string             `json:"disabled_reason,omitempty"`
	CreatedByIdentityProvider bool               `json:"created_by_identity_provider,omitempty" doc:"Recorded at an OpenID Connect identity's first console sign-in: the identity provider is the authority for it."`
	OIDCIdentities            []OIDCIdentityBody `json:"oidc_identities,omitempty" doc:"The OpenID Connect identities that sign in to the console as this principal."`
	SamePersonAs              []string           `json:"same_person_as,omitempty" doc:"The other principals of the same person (an identity's own principal and the one it was linked to): four-eyes treats them as one."`
	NoIdentityProviderAccount *time.Time         `json:"no_identity_provider_account_at,omitempty" doc:"When the principal was marked, on a second on-call person's approval, as a person with no identity-provider account."`
	NoIdentityProviderBy      string             `json:"no_identity_provider_account_by,omitempty" doc:"Whose approval marked it so."`
}

// OIDCIdentityBody is an OpenID Connect identity that signs in as a
// principal.
type OIDCIdentityBody struct {
	Issuer              string    `json:"issuer"`
	Subject             string    `json:"subject"`
	RecordedPrincipalID string    `json:"recorded_principal_id,omitempty" doc:"The principal recorded at the identity's first sign-in, if it signed in before it was linked."`
	LinkedBy            string    `json:"linked_by,omitempty" doc:"The on-call principal whose link took effect; absent when the first sign-in recorded it."`
	LinkedAt            time.Time `json:"linked_at"`
}

func principalBody(r ledger.PrincipalRecord) PrincipalBody {
	b := PrincipalBody{
		ID: r.ID.String(), Kind: string(r.Kind), Name: r.Name, Role: string(r.Role), Tenant: r.Tenant, Bootstrap: r.Bootstrap,
		Actor: ledger.PrincipalActor(r.ID), CreatedBy: idString(r.CreatedBy), CreatedAt: r.CreatedAt,
		DisabledAt: timePtr(r.DisabledAt), DisabledBy: idString(r.DisabledBy), DisabledReason: r.DisabledReason,
		CreatedByIdentityProvider: r.CreatedByIdentityProvider,
		NoIdentityProviderAccount: timePtr(r.NoIdentityProviderAccountAt), NoIdentityProviderBy: idString(r.NoIdentityProviderAccountBy),
	}
	for _, o := range r.OIDC {
		b.OIDCIdentities = append(b.OIDCIdentities, OIDCIdentityBody{
			Issuer: o.Issuer, Subject: o.Subject, RecordedPrincipalID: idString(o.RecordedPrincipalID),
			LinkedBy: idString(o.LinkedBy), LinkedAt: o.LinkedAt,
		})
	}
	for _, id := range r.Aliases {
		b.SamePersonAs = append(b.SamePersonAs, id.String())
	}
	return b
}

// CredentialBody is an API credential, never its secret.
type CredentialBody struct {
	ID           string     `json:"id"`
	PrincipalID  string     `json:"principal_id"`
	Name         string     `json:"name"`
	Role         string     `json:"role"`
	Tenant       string     `json:"tenant,omitempty"`
	CreatedAt    time.Time  `json:"created_at"`
	ExpiresAt    *time.Time `json:"expires_at,omitempty"`
	LastUsedAt   *time.Time `json:"last_used_at,omitempty" doc:"Recorded at most once a minute."`
	RevokedAt    *time.Time `json:"revoked_at,omitempty"`
	RevokedBy    string     `json:"revoked_by,omitempty"`
	RevokeReason string     `json:"revoke_reason,omitempty"`
}

func credentialBody(t ledger.Token) CredentialBody {
	return CredentialBody{
		ID: t.ID.String(), PrincipalID: t.PrincipalID.String(), Name: t.Name, Role: string(t.Role), Tenant: t.Tenant,
		CreatedAt: t.CreatedAt, ExpiresAt: timePtr(t.ExpiresAt), LastUsedAt: timePtr(t.LastUsedAt),
		RevokedAt: timePtr(t.RevokedAt), RevokedBy: idString(t.RevokedBy), RevokeReason: t.RevokeReason,
	}
}

// PendingChangeBody is a privileged change waiting for, or decided by, a
// second on-call principal.
type PendingChangeBody struct {
	ID             string          `json:"id"`
	Kind           string          `json:"kind" enum:"principal_create,role_grant,credential_create,org_update,task_class_update,write_off_threshold_update,oidc_link,no_identity_provider_account,budget_tenants_update,task_class_policy_update,org_card_accept"`
	Target         string          `json:"target"`
	Summary        string          `json:"summary"`
	Status         string          `json:"status" enum:"pending,applied,refused,expired"`
	Change         json.RawMessage `json:"change,omitempty" doc:"The change as it applies on approval (no secret: a credential's hash at most)."`
	RequestedBy    string          `json:"requested_by"`
	RequestedAt    time.Time       `json:"requested_at"`
	ExpiresAt      time.Time       `json:"expires_at"`
	DecidedBy      string          `json:"decided_by,omitempty"`
	DecidedAt      *time.Time      `json:"decided_at,omitempty"`
	DecisionReason string          `json:"decision_reason,omitempty"`
	TokenPart      string          `json:"token_part,omitempty" doc:"Only on the approval of a principal_create change of a person: the second part of the new person's credential, for the approver to hand to the person, shown once. The person's token is the requester's token_part followed by this one, with nothing between."`
}

func pendingChangeBody(c ledger.PendingChange) *PendingChangeBody {
	return &PendingChangeBody{
		ID: c.ID.String(), Kind: string(c.Kind), Target: c.Target, Summary: c.Summary, Status: string(c.Status),
		RequestedBy: c.RequestedBy.String(), RequestedAt: c.RequestedAt, ExpiresAt: c.ExpiresAt,
		DecidedBy: idString(c.DecidedBy), DecidedAt: timePtr(c.DecidedAt), DecisionReason: c.DecisionReason,
	}
}

// pendingOf reports whether err says a change was recorded for approval.
func pendingOf(err error) (*PendingChangeBody, bool) {
	var pending *ledger.ApprovalRequiredError
	if !errors.As(err, &pending) {
		return nil, false
	}
	return pendingChangeBody(pending.Change), true
}

// changeStatus is the status of the answer to a privileged change that may
// wait for a second person: 202, with the pending change, when err is an
// ApprovalRequiredError; applied when err is nil; any other err is its
// problem (Server.fail).
func (s *Server) changeStatus(ctx context.Context, err error, applied int) (int, *PendingChangeBody, error) {
	if pc, ok := pendingOf(err); ok {
		return http.StatusAccepted, pc, nil
	}
	if err != nil {
		return 0, nil, s.fail(ctx, err)
	}
	return applied, nil, nil
}

func idString(id uuid.UUID) string {
	if id == uuid.Nil {
		return ""
	}
	return id.String()
}

type issuedTokenBody struct {
	ID            string             `json:"id" doc:"The credential's id."`
	PrincipalID   string             `json:"principal_id"`
	Name          string             `json:"name" doc:"The principal's name."`
	Role          string             `json:"role"`
	Tenant        string             `json:"tenant,omitempty"`
	ExpiresAt     *time.Time         `json:"expires_at,omitempty"`
	Token         string             `json:"token,omitempty" doc:"The bearer token. It is shown once and only its hash is stored. Absent for a person's credential that waits for approval (see token_part)."`
	TokenPart     string             `json:"token_part,omitempty" doc:"Instead of token, for a person principal another on-call principal asks for (a 202): the first part of the person's credential, shown once. The approval's answer gives the approver the second part; the person's token is this part followed by that one, with nothing between. Neither part alone authenticates."`
	PendingChange *PendingChangeBody `json:"pending_change,omitempty" doc:"Set on a 202: the principal (or the credential) exists, and the token works, once a different on-call principal approves."`
}

func issuedToken(t access.IssuedToken) *issuedTokenOutput {
	out := &issuedTokenOutput{Status: http.StatusCreated, Body: issuedTokenBody{
		ID: t.Token.ID.String(), PrincipalID: t.Principal.ID.String(), Name: t.Principal.Name, Role: string(t.Principal.Role),
		Tenant: t.Principal.Tenant, ExpiresAt: timePtr(t.Token.ExpiresAt), Token: t.Secret, TokenPart: t.SecretPart,
	}}
	if t.Pending != nil {
		out.Status, out.Body.PendingChange = http.StatusAccepted, pendingChangeBody(*t.Pending)
	}
	return out
}

// registerPrincipals is the route table of the principal, credential and
// pending-change endpoints (ledger/access/PRINCIPALS.md).
func (s *Server) registerPrincipals() {
	tags := []string{"principals"}
	huma.Register(s.api, huma.Operation{
		OperationID: "create-token", Method: http.MethodPost, Path: "/admin/v1/tokens", Tags: tags,
		Summary: "Issue an API credential (creating its principal if new)", Security: bearerAuth, DefaultStatus: http.StatusCreated,
		Metadata: map[string]any{bootstrapOperation: true},
		Description: "On-call. A name that exists (any case) adds a credential to that principal: your own at once (201); a " +
			"machine's with 202 and a credential_create pending change; never another person's. A new name creates the " +
			"principal: the first machine orchestrator of a tenant no principal or delegation has used at once (201); any other " +
			"(a person, a finance or on-call principal, an orchestrator for a tenant in use) with 202 and a principal_create " +
			"pending change. A different on-call principal approves a pending change, after which the returned token works; " +
			"for a person, the 202 carries token_part instead, the first part of the person's credential, and the approval's " +
			"answer the second. " +
			"The bootstrap credential may create the first two on-call principals, and nothing else (except under dev).",
	}, s.createToken)
	huma.Register(s.api, huma.Operation{
		OperationID: "list-principals", Method: http.MethodGet, Path: "/admin/v1/principals", Tags: tags,
		Summary: "List principals", Security: bearerAuth,
	}, s.listPrincipals)
	huma.Register(s.api, huma.Operation{
		OperationID: "get-principal", Method: http.MethodGet, Path: "/admin/v1/principals/{id}", Tags: tags,
		Summary: "Get a principal", Security: bearerAuth,
	}, s.getPrincipal)
	huma.Register(s.api, huma.Operation{
		OperationID: "disable-principal", Method: http.MethodPost, Path: "/admin/v1/principals/{id}/disable", Tags: tags,
		Summary: "Disable a principal and revoke all its credentials", Security: bearerAuth,
		Description: "On-call, at once (no second approver: taking access away must be fast). Every credential of the principal stops working on every replica within a second, and its open event streams end.",
	}, s.disablePrincipal)
	huma.Register(s.api, huma.Operation{
		OperationID: "grant-role", Method: http.MethodPost, Path: "/admin/v1/principals/{id}/role", Tags: tags,
		Summary: "Ask for a principal to get another role", Security: bearerAuth,
		Description: "On-call. 202 with a pending change a different on-call principal approves.",
	}, s.grantRole)
	huma.Register(s.api, huma.Operation{
		OperationID: "link-oidc", Method: http.MethodPost, Path: "/admin/v1/principals/{id}/oidc", Tags: tags,
		Summary: "Ask for an OpenID Connect identity to sign in as a person principal", Security: bearerAuth,
		Description: "On-call. 202 with an oidc_link pending change that the identity's holder confirms: they sign in to the console " +
			"through OpenID Connect as that identity and confirm it there (no approval, the principal's own included, applies it: " +
			"POST /admin/v1/pending-changes/{id}/approve answers 409 oidc_link_needs_identity). From then on the " +
			"identity's console sessions act as the principal, and a principal recorded at the identity's earlier sign-ins is " +
			"the same person for four-eyes. 404 for an unknown principal; 409 principal_not_person, principal_disabled, " +
			"principal_bootstrap, principal_linked (the principal is itself linked to another), oidc_identity_linked.",
	}, s.linkOIDC)
	huma.Register(s.api, huma.Operation{
		OperationID: "mark-no-identity-provider-account", Method: http.MethodPost, Path: "/admin/v1/principals/{id}/no-identity-provider-account", Tags: tags,
		Summary: "Ask for a person principal to be marked as having no identity-provider account", Security: bearerAuth,
		Description: "On-call. 202 with a no_identity_provider_account pending change a different on-call person approves. Outside dev, " +
			"until a person principal is so marked or linked to an OpenID Connect identity, an identity signing in on its own and " +
			"that principal are never the two persons of a four-eyes decision (403 identity_not_linked). 404 for an unknown " +
			"principal; 409 principal_not_person, principal_disabled, principal_bootstrap, principal_linked (it has an identity), " +
			"principal_marked.",
	}, s.markNoIdentityProviderAccount)
	s.registerCredentials(tags)
	s.registerPendingChanges(tags)
}

// registerCredentials is the route table of the credential endpoints.
func (s *Server) registerCredentials(tags []string) {
	huma.Register(s.api, huma.Operation{
		OperationID: "list-credentials", Method: http.MethodGet, Path: "/admin/v1/credentials", Tags: tags,
		Summary: "List credentials (never their secrets)", Security: bearerAuth,
		Description: "On-call sees every principal's; anyone else only their own.",
	}, s.listCredentials)
	huma.Register(s.api, huma.Operation{
		OperationID: "revoke-credential", Method: http.MethodPost, Path: "/admin/v1/credentials/{id}/revoke", Tags: tags,
		Summary: "Revoke a credential", Security: bearerAuth,
		Description: "Your own, or (on-call) anyone's. It gets 401 on every replica within a second, and its open event streams end. 409 token_already_revoked if it was.",
	}, s.revokeCredential)
	huma.Register(s.api, huma.Operation{
		OperationID: "rotate-credential", Method: http.MethodPost, Path: "/admin/v1/credentials/{id}/rotate", Tags: tags,
		Summary: "Issue a new credential and revoke this one", Security: bearerAuth, DefaultStatus: http.StatusCreated,
		Description: "Your own at once (201): the new secret is returned once and the old credential is revoked in the same " +
			"transaction. On-call may rotate a machine principal's: 202 with a credential_create pending change; once a different " +
			"on-call principal approves, the new secret works and the old credential is revoked.",
	}, s.rotateCredential)
}

// registerPendingChanges is the route table of the pending-change
// endpoints: privileged changes and their second approver.
func (s *Server) registerPendingChanges(tags []string) {
	huma.Register(s.api, huma.Operation{
		OperationID: "list-pending-changes", Method: http.MethodGet, Path: "/admin/v1/pending-changes", Tags: tags,
		Summary: "List privileged changes awaiting (or past) approval", Security: bearerAuth,
	}, s.listPendingChanges)
	huma.Register(s.api, huma.Operation{
		OperationID: "get-pending-change", Method: http.MethodGet, Path: "/admin/v1/pending-changes/{id}", Tags: tags,
		Summary: "Get a pending change, with the change it applies", Security: bearerAuth,
	}, s.getPendingChange)
	huma.Register(s.api, huma.Operation{
		OperationID: "approve-pending-change", Method: http.MethodPost, Path: "/admin/v1/pending-changes/{id}/approve", Tags: tags,
		Summary: "Approve a pending change: it applies now", Security: bearerAuth,
		Description: "On-call, and a different person from the one that asked (403 self_approval otherwise, whatever credential, name or linked principal is used). 409 change_not_pending, change_expired. " +
			"Approving a person's principal_create answers token_part: the second part of the person's credential, shown once.",
	}, s.approvePendingChange)
	huma.Register(s.api, huma.Operation{
		OperationID: "refuse-pending-change", Method: http.MethodPost, Path: "/admin/v1/pending-changes/{id}/refuse", Tags: tags,
		Summary: "Refuse (or withdraw) a pending change", Security: bearerAuth,
	}, s.refusePendingChange)
}

type createTokenInput struct {
	Body struct {
		Role      string     `json:"role" enum:"orchestrator,finance,oncall"`
		Tenant    string     `json:"tenant,omitempty" doc:"Required for orchestrator tokens, refused for others."`
		Name      string     `json:"name" minLength:"1" maxLength:"200" doc:"The principal: an existing one (by name, any case) gets another credential; a new name creates the principal."`
		Kind      string     `json:"kind,omitempty" enum:"person,machine" doc:"A new principal's kind; by default orchestrators are machines, finance and on-call people."`
		ExpiresAt *time.Time `json:"expires_at,omitempty" doc:"When the credential stops working; by default a person's lasts QUITTANCE_PERSON_CREDENTIAL_TTL and a machine's never expires. A person's is at most QUITTANCE_PERSON_CREDENTIAL_MAX_TTL away (422 beyond)."`
		Label     string     `json:"label,omitempty" maxLength:"200" doc:"A name for the credential itself (default the principal's name)."`
	}
}

type issuedTokenOutput struct {
	Status int
	Body   issuedTokenBody
}

// createToken serves POST /admin/v1/tokens: issue an API credential
// (creating its principal if new).
func (s *Server) createToken(ctx context.Context, in *createTokenInput) (*issuedTokenOutput, error) {
	b := in.Body
	ti := access.TokenInput{Role: ledger.Role(b.Role), Tenant: b.Tenant, Name: b.Name, Kind: ledger.PrincipalKind(b.Kind), Label: b.Label}
	if b.ExpiresAt != nil {
		ti.ExpiresAt = *b.ExpiresAt
	}
	t, err := s.access.CreateToken(ctx, principal(ctx), ti)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return issuedToken(t), nil
}

type listPrincipalsOutput struct {
	Body struct {
		Principals []PrincipalBody `json:"principals"`
	}
}

// listPrincipals serves GET /admin/v1/principals: list principals.
func (s *Server) listPrincipals(ctx context.Context, _ *struct{}) (*listPrincipalsOutput, error) {
	rs, err := s.access.ListPrincipals(ctx, principal(ctx))
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	out := &listPrincipalsOutput{}
	out.Body.Principals = bodies(rs, principalBody)
	return out, nil
}

type uuidPathInput struct {
	ID uuid.UUID `path:"id"`
}

type principalOutput struct {
	Status int
	Body   PrincipalBody
}

// getPrincipal serves GET /admin/v1/principals/{id}: get a principal.
func (s *Server) getPrincipal(ctx context.Context, in *uuidPathInput) (*principalOutput, error) {
	r, err := s.access.GetPrincipal(ctx, principal(ctx), in.ID)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return &principalOutput{Status: http.StatusOK, Body: principalBody(r)}, nil
}

type disablePrincipalInput struct {
	ID   uuid.UUID `path:"id"`
	Body struct {
		Reason string `json:"reason" minLength:"1" maxLength:"4096"`
	}
}

type disablePrincipalOutput struct {
	Body struct {
		Principal          PrincipalBody `json:"principal"`
		CredentialsRevoked int64         `json:"credentials_revoked"`
	}
}

// disablePrincipal serves POST /admin/v1/principals/{id}/disable: disable a
// principal and revoke all its credentials.
func (s *Server) disablePrincipal(ctx context.Context, in *disablePrincipalInput) (*disablePrincipalOutput, error) {
	r, n, err := s.access.DisablePrincipal(ctx, principal(ctx), in.ID, in.Body.Reason)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	out := &disablePrincipalOutput{}
	out.Body.Principal, out.Body.CredentialsRevoked = principalBody(r), n
	return out, nil
}

type grantRoleInput struct {
	ID   uuid.UUID `path:"id"`
	Body struct {
		Role   string `json:"role" enum:"orchestrator,finance,oncall"`
		Tenant string `json:"tenant,omitempty"`
	}
}

type grantRoleOutput struct {
	Status int
	Body   struct {
		Principal     PrincipalBody      `json:"principal"`
		PendingChange *PendingChangeBody `json:"pending_change,omitempty"`
	}
}

// grantRole serves POST /admin/v1/principals/{id}/role: ask for a principal
// to get another role.
func (s *Server) grantRole(ctx context.Context, in *grantRoleInput) (*grantRoleOutput, error) {
	r, err := s.access.RequestRoleGrant(ctx, principal(ctx), in.ID, ledger.Role(in.Body.Role), in.Body.Tenant)
	return s.principalChanged(ctx, r, err)
}

// principalChanged answers a request for a change of principal r: 200 with
// r when it applied at once, 202 with the pending change when it waits
// for a second person, or the problem of err.
func (s *Server) principalChanged(ctx context.Context, r ledger.PrincipalRecord, err error) (*grantRoleOutput, error) {
	status, pc, err := s.changeStatus(ctx, err, http.StatusOK)
	if err != nil {
		return nil, err
	}
	out := &grantRoleOutput{Status: status}
	out.Body.Principal, out.Body.PendingChange = principalBody(r), pc
	return out, nil
}

type linkOIDCInput struct {
	ID   uuid.UUID `path:"id"`
	Body struct {
		Issuer  string `json:"issuer" minLength:"1" maxLength:"2048" doc:"The identity provider's issuer URL, exactly as its ID tokens' iss claim."`
		Subject string `json:"subject" minLength:"1" maxLength:"255" doc:"The person's subject at the identity provider: its ID tokens' sub claim."`
	}
}

// linkOIDC serves POST /admin/v1/principals/{id}/oidc: ask for an OpenID
// Connect identity to sign in as a person principal.
func (s *Server) linkOIDC(ctx context.Context, in *linkOIDCInput) (*grantRoleOutput, error) {
	r, err := s.access.RequestOIDCLink(ctx, principal(ctx), in.ID, in.Body.Issuer, in.Body.Subject)
	return s.principalChanged(ctx, r, err)
}

// markNoIdentityProviderAccount serves POST
// /admin/v1/principals/{id}/no-identity-provider-account: ask for a person
// principal to be marked as having no identity-provider account.
func (s *Server) markNoIdentityProviderAccount(ctx context.Context, in *uuidPathInput) (*grantRoleOutput, error) {
	r, err := s.access.RequestNoIdentityProviderAccount(ctx, principal(ctx), in.ID)
	return s.principalChanged(ctx, r, err)
}

type listCredentialsInput struct {
	PrincipalID string `query:"principal_id" doc:"Only this principal's credentials (on-call); others always see only their own."`
}

type listCredentialsOutput struct {
	Body struct {
		Credentials []CredentialBody `json:"credentials"`
	}
}

// listCredentials serves GET /admin/v1/credentials: list credentials (never
// their secrets).
func (s *Server) listCredentials(ctx context.Context, in *listCredentialsInput) (*listCredentialsOutput, error) {
	pid, err := queryFilter(in.PrincipalID, "", uuid.Parse, "principal_id", "must be a UUID")
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	ts, err := s.access.ListCredentials(ctx, principal(ctx), pid)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	out := &listCredentialsOutput{}
	out.Body.Credentials = bodies(ts, credentialBody)
	return out, nil
}

type revokeCredentialInput struct {
	ID   uuid.UUID `path:"id"`
	Body *struct {
		Reason string `json:"reason,omitempty" maxLength:"4096"`
	} `required:"false"`
}

type credentialOutput struct {
	Body CredentialBody
}

// revokeCredential serves POST /admin/v1/credentials/{id}/revoke: revoke a
// credential.
func (s *Server) revokeCredential(ctx context.Context, in *revokeCredentialInput) (*credentialOutput, error) {
	reason := ""
	if in.Body != nil {
		reason = in.Body.Reason
	}
	t, err := s.access.RevokeCredential(ctx, principal(ctx), in.ID, reason)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return &credentialOutput{Body: credentialBody(t)}, nil
}

type rotateCredentialInput struct {
	ID   uuid.UUID `path:"id"`
	Body *struct {
		ExpiresAt *time.Time `json:"expires_at,omitempty"`
	} `required:"false"`
}

// rotateCredential serves POST /admin/v1/credentials/{id}/rotate: issue a
// new credential and revoke this one.
func (s *Server) rotateCredential(ctx context.Context, in *rotateCredentialInput) (*issuedTokenOutput, error) {
	var expires time.Time
	if in.Body != nil && in.Body.ExpiresAt != nil {
		expires = *in.Body.ExpiresAt
	}
	t, err := s.access.RotateCredential(ctx, principal(ctx), in.ID, expires)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return issuedToken(t), nil
}

type listPendingInput struct {
	Status string `query:"status" enum:"pending,applied,refused,expired,all" default:"pending"`
}

type listPendingOutput struct {
	Body struct {
		Changes []*PendingChangeBody `json:"changes"`
	}
}

// listPendingChanges serves GET /admin/v1/pending-changes: list privileged
// changes awaiting (or past) approval.
func (s *Server) listPendingChanges(ctx context.Context, in *listPendingInput) (*listPendingOutput, error) {
	st, err := queryFilter(in.Status, "all", ledger.ParsePendingStatus, "status", "must be pending, applied, refused, expired or all")
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	cs, err := s.access.ListPendingChanges(ctx, principal(ctx), st)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	out := &listPendingOutput{}
	out.Body.Changes = bodies(cs, pendingChangeBody)
	return out, nil
}

type pendingOutput struct {
	Body *PendingChangeBody
}

// getPendingChange serves GET /admin/v1/pending-changes/{id}: get a pending
// change, with the change it applies.
func (s *Server) getPendingChange(ctx context.Context, in *uuidPathInput) (*pendingOutput, error) {
	c, err := s.access.GetPendingChange(ctx, principal(ctx), in.ID)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	b := pendingChangeBody(c)
	b.Change = c.Payload
	return &pendingOutput{Body: b}, nil
}

// approvePendingChange serves POST /admin/v1/pending-changes/{id}/approve:
// approve a pending change: it applies now.
func (s *Server) approvePendingChange(ctx context.Context, in *uuidPathInput) (*pendingOutput, error) {
	c, err := s.access.ApprovePendingChange(ctx, principal(ctx), in.ID)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	b := pendingChangeBody(c)
	b.TokenPart = c.IssuedTokenPart
	return &pendingOutput{Body: b}, nil
}

type refusePendingInput struct {
	ID   uuid.UUID `path:"id"`
	Body struct {
		Reason string `json:"reason" minLength:"1" maxLength:"4096"`
	}
}

// refusePendingChange serves POST /admin/v1/pending-changes/{id}/refuse:
// refuse (or withdraw) a pending change.
func (s *Server) refusePendingChange(ctx context.Context, in *refusePendingInput) (*pendingOutput, error) {
	c, err := s.access.RefusePendingChange(ctx, principal(ctx), in.ID, in.Body.Reason)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return &pendingOutput{Body: pendingChangeBody(c)}, nil
}
