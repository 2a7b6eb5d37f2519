package ledger

import (
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
)

// Role is what an API token may do.
type Role string

// The roles. Orchestrators act within one tenant; finance reads everything;
// on-call administers.
const (
	RoleOrchestrator Role = "orchestrator"
	RoleFinance      Role = "finance"
	RoleOncall       Role = "oncall"
)

// ParseRole accepts exactly the role names.
func ParseRole(raw string) (Role, error) {
	switch r := Role(raw); r {
	case RoleOrchestrator, RoleFinance, RoleOncall:
		return r, nil
	}
	return "", fmt.Errorf("unknown role %q", raw)
}

// RoleBootstrap is the role of the bootstrap credential
// (QUITTANCE_BOOTSTRAP_TOKEN) outside dev: it may create the first two
// on-call principals and nothing else, so every other role check refuses
// it. It is never stored and ParseRole does not accept it.
const RoleBootstrap Role = "bootstrap"

// PrincipalKind says whether a principal is a person or a machine.
type PrincipalKind string

// The principal kinds.
const (
	// KindPerson is a human: on-call staff, finance.
	KindPerson PrincipalKind = "person"
	// KindMachine is a program: an orchestrating agent, a finance job.
	KindMachine PrincipalKind = "machine"
)

// ParsePrincipalKind accepts exactly the kind names.
func ParsePrincipalKind(raw string) (PrincipalKind, error) {
	switch k := PrincipalKind(raw); k {
	case KindPerson, KindMachine:
		return k, nil
	}
	return "", fmt.Errorf("unknown principal kind %q", raw)
}

// Token is an API credential as stored: never the secret itself, only its
// hash. It belongs to one principal and carries the principal's role and
// tenant as they were when it was issued (authentication uses the
// principal's).
type Token struct {
	ID           uuid.UUID
	PrincipalID  uuid.UUID
	Name         string
	Role         Role
	Tenant       string
	Hash         []byte
	CreatedAt    time.Time
	ExpiresAt    time.Time
	LastUsedAt   time.Time
	RevokedAt    time.Time
	RevokedBy    uuid.UUID
	RevokeReason string
}

// Usable reports whether the credential authenticates at now: not revoked
// and not expired.
func (t Token) Usable(now time.Time) bool {
	return t.RevokedAt.IsZero() && (t.ExpiresAt.IsZero() || now.Before(t.ExpiresAt))
}

// PrincipalRecord is a principal as stored.
type PrincipalRecord struct {
	ID     uuid.UUID
	Kind   PrincipalKind
	Name   string
	Role   Role
	Tenant string
	// Bootstrap marks the principal of the bootstrap credential.
	Bootstrap      bool
	CreatedBy      uuid.UUID
	CreatedAt      time.Time
	DisabledAt     time.Time
	DisabledBy     uuid.UUID
	DisabledReason string
	// Aliases are the other principals of the same person: an OpenID
	// Connect identity's own principal and the principal it was linked to
	// (ledger/access/PRINCIPALS.md#linking-an-identity-to-a-principal).
	Aliases []uuid.UUID `json:",omitempty"`
	// OIDC lists the OpenID Connect identities that sign in as this
	// principal, as the store's principal reads return it.
	OIDC []OIDCIdentity `json:",omitempty"`
	// CreatedByIdentityProvider marks a principal recorded at an OpenID
	// Connect identity's first sign-in: the identity provider is the
	// authority for it. The store's principal reads set it.
	CreatedByIdentityProvider bool `json:",omitempty"`
	// NoIdentityProviderAccountAt and NoIdentityProviderAccountBy say
	// when, and on whose approval, the principal was marked as a person
	// with no identity-provider account; zero unless it was.
	NoIdentityProviderAccountAt time.Time `json:",omitzero"`
	NoIdentityProviderAccountBy uuid.UUID `json:",omitzero"`
}

// Disabled reports whether the principal was disabled.
func (r PrincipalRecord) Disabled() bool { return !r.DisabledAt.IsZero() }

// Principal is the authenticated caller of an API request: a principal
// and the credential it presented.
type Principal struct {
	// ID is the principal's id: what four-eyes compares.
	ID uuid.UUID
	// TokenID is the id of the credential the request presented.
	TokenID uuid.UUID
	// Name is the principal's display name.
	Name string
	Kind PrincipalKind
	Role Role
	// Tenant is set for orchestrators only.
	Tenant string
	// Bootstrap is set for the bootstrap principal.
	Bootstrap bool
	// CredentialExpiresAt is when the presented credential expires; zero
	// for never.
	CredentialExpiresAt time.Time
	// Aliases are the other principals of the same person
	// (PrincipalRecord.Aliases), read when the principal authenticated.
	Aliases []uuid.UUID
	// OIDCSession is set when the caller is a console session signed in
	// through OpenID Connect (not a credential): only such a session
	// confirms a link of its identity (access.Service.ConfirmOIDCLink).
	OIDCSession bool
}

// SamePerson reports whether id is this principal or another principal of
// the same person. Every four-eyes check asks it: a write-off or a
// privileged change is never decided by the person who asked for it,
// under whichever of their principals either was done.
func (p Principal) SamePerson(id uuid.UUID) bool {
	return id == p.ID || slices.Contains(p.Aliases, id)
}

// Actor is how the principal is named in events: "principal:<id>". The id
// never changes and never collides, whatever the display name.
func (p Principal) Actor() string { return PrincipalActor(p.ID) }

// PrincipalActor is the event actor of the principal with id.
func PrincipalActor(id uuid.UUID) string { return "principal:" + id.String() }

// SeesTenant reports whether the principal may see a tenant's data.
func (p Principal) SeesTenant(tenant string) bool {
	return p.Permits(ActionReadAllEvents) || (p.Permits(ActionReadTenantEvents) && p.Tenant == tenant)
}

// OIDCIdentity is a person's identity at an OpenID Connect identity
// provider, (Issuer, Subject), and the principal it signs in to the
// console as (ledger/access/PRINCIPALS.md#people-signed-in-by-openid-connect).
type OIDCIdentity struct {
	Issuer  string
	Subject string
	// PrincipalID is the principal its console sessions act as.
	PrincipalID uuid.UUID
	// RecordedPrincipalID is the principal recorded for it at its first
	// sign-in (OIDCPrincipalID); uuid.Nil for an identity linked before
	// it ever signed in.
	RecordedPrincipalID uuid.UUID
	// LinkedBy is the on-call principal whose link made PrincipalID what
	// it is; uuid.Nil when the first sign-in recorded it.
	LinkedBy uuid.UUID
	LinkedAt time.Time
}
