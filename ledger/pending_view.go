package ledger

import (
	"encoding/json"

	"github.com/google/uuid"
)

// ApprovableBy reports whether p may approve c now: c is pending and p is
// an on-call principal of another person than the one that asked
// (Principal.SamePerson), and c is not an oidc_link, which the identity it
// links confirms instead (OIDCLinkToConfirm). access.Service.ApprovePendingChange
// refuses everyone else; the console asks it which controls to show.
// (Expiry is checked when the decision is made: a change past its expiry
// is expired then, not applied.)
func (c PendingChange) ApprovableBy(p Principal) bool {
	return p.Permits(ActionAdminister) && c.Status == PendingOpen && c.Kind != ChangeOIDCLink && !p.SamePerson(c.RequestedBy)
}

// OrgUpdate is what an org_update change applies: the org's id and its
// registration as it will be. ok is false for any other kind.
func (c PendingChange) OrgUpdate() (id string, in OrgInput, ok bool) {
	var pl orgUpdatePayload
	if c.Kind != ChangeOrgUpdate || json.Unmarshal(c.Payload, &pl) != nil {
		return "", OrgInput{}, false
	}
	return pl.ID, pl.Input, true
}

// TaskClassUpdate is the task class a task_class_update change registers.
// ok is false for any other kind.
func (c PendingChange) TaskClassUpdate() (TaskClass, bool) {
	var pl taskClassPayload
	if c.Kind != ChangeTaskClassUpdate || json.Unmarshal(c.Payload, &pl) != nil {
		return TaskClass{}, false
	}
	return pl.Class, true
}

// TaskClassPolicyUpdate is the task-class policy a
// task_class_policy_update change sets. ok is false for any other kind.
func (c PendingChange) TaskClassPolicyUpdate() (TaskClassPolicy, bool) {
	var pl taskClassPolicyPayload
	if c.Kind != ChangeTaskClassPolicyUpdate || json.Unmarshal(c.Payload, &pl) != nil {
		return TaskClassPolicy{}, false
	}
	return pl.Policy, true
}

// PrincipalCreate is the principal a principal_create change creates (its
// credential's hash stays in the payload). ok is false for any other kind.
func (c PendingChange) PrincipalCreate() (PrincipalRecord, bool) {
	var pl PrincipalCreatePayload
	if c.Kind != ChangePrincipalCreate || json.Unmarshal(c.Payload, &pl) != nil {
		return PrincipalRecord{}, false
	}
	return pl.Principal, true
}

// RoleGrant is what a role_grant change grants: the principal, the role
// and, for an orchestrator, the tenant. ok is false for any other kind.
func (c PendingChange) RoleGrant() (principalID uuid.UUID, role Role, tenant string, ok bool) {
	var pl RoleGrantPayload
	if c.Kind != ChangeRoleGrant || json.Unmarshal(c.Payload, &pl) != nil {
		return uuid.Nil, "", "", false
	}
	return pl.PrincipalID, pl.Role, pl.Tenant, true
}

// OIDCLink is what an oidc_link change links: the OpenID Connect identity
// and the principal. ok is false for any other kind.
func (c PendingChange) OIDCLink() (principalID uuid.UUID, issuer, subject string, ok bool) {
	var pl OIDCLinkPayload
	if c.Kind != ChangeOIDCLink || json.Unmarshal(c.Payload, &pl) != nil {
		return uuid.Nil, "", "", false
	}
	return pl.PrincipalID, pl.Issuer, pl.Subject, true
}

// OIDCPrincipalID is the id of the principal recorded for an identity at
// its first sign-in: derived from the issuer and subject, so it is the
// same on every replica and for every concurrent sign-in, and it is the
// id console sessions of the identity acted as before they were
// principals.
func OIDCPrincipalID(issuer, subject string) uuid.UUID {
	return uuid.NewSHA1(uuid.NameSpaceURL, []byte(issuer+"#"+subject))
}

// OIDCLinkToConfirm reports whether c is an oidc_link change waiting for
// the identity p is signed in as: the console offers p to confirm it.
func (c PendingChange) OIDCLinkToConfirm(p Principal) bool {
	_, issuer, subject, ok := c.OIDCLink()
	return ok && p.OIDCSession && c.Status == PendingOpen && p.ID == OIDCPrincipalID(issuer, subject)
}
