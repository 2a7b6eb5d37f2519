package ledger

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
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

// Token is an API token as stored: never the secret itself, only its hash.
type Token struct {
	ID        uuid.UUID
	Name      string
	Role      Role
	Tenant    string
	Hash      []byte
	CreatedAt time.Time
	RevokedAt time.Time
}

// Principal is the authenticated caller of an API request.
type Principal struct {
	TokenID uuid.UUID
	Name    string
	Role    Role
	// Tenant is set for orchestrators only.
	Tenant string
}

// Actor is how the principal is named in events.
func (p Principal) Actor() string { return "token:" + p.Name }

// SeesTenant reports whether the principal may see a tenant's data.
func (p Principal) SeesTenant(tenant string) bool {
	switch p.Role {
	case RoleFinance, RoleOncall:
		return true
	case RoleOrchestrator:
		return p.Tenant == tenant
	}
	return false
}

// HashToken is the stored form of a bearer token.
func HashToken(secret string) []byte {
	sum := sha256.Sum256([]byte(secret))
	return sum[:]
}

// NewTokenSecret returns a fresh bearer token: 256 random bits.
func NewTokenSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms.
	return "qt_" + base64.RawURLEncoding.EncodeToString(b)
}
