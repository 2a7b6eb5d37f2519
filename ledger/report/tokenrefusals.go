package report

import (
	"context"
	"time"

	"github.com/quittance/quittance/ledger"

	"github.com/google/uuid"
)

// Refused signed evidence is not an event (ledger/DESIGN.md §3): anyone can
// post a token to the public evidence endpoints, so a refused one must not
// grow a delegation's chain nor fan out to its webhooks. It is counted per
// (org, reason) instead, with the last TokenRefusalSampleSize kept as
// samples, and both are listed with the anomalies.

// TokenRefusalSampleSize is how many of the latest refused tokens are kept
// per (org, reason).
const TokenRefusalSampleSize = 10

// TokenRefusal is one refused token, as it is counted and sampled.
type TokenRefusal struct {
	// OrgID is the registered org the token named, or "" when it named
	// none (or could not be read): unregistered names are not kept as
	// keys, so the counts stay bounded by the orgs an operator registered.
	OrgID string
	// Reason is the server-side refusal code; the caller is never told it.
	Reason string
	// Kind is the endpoint's token kind: compensation-ack+jwt or
	// no-compensation-required+jwt.
	Kind string
	// TokenSHA256 is the sha256 of the token as received; the token itself
	// is never kept.
	TokenSHA256 []byte
	// TokenBytes is the token's length.
	TokenBytes int
	// ClaimedIssuer is the unverified iss the token carried, shortened to
	// MaxClaimedIssuer bytes.
	ClaimedIssuer string
	// ClientAddress is the address the request came from (behind a trusted
	// proxy, what its header says).
	ClientAddress string
	// At is when it was refused.
	At time.Time
}

// MaxClaimedIssuer bounds the unverified iss kept with a sample.
const MaxClaimedIssuer = 128

// TokenRefusalTotal is the refused tokens of one (org, reason).
type TokenRefusalTotal struct {
	OrgID   string
	Reason  string
	Refused int64
	FirstAt time.Time
	LastAt  time.Time
	// Samples are the latest refusals kept, newest first.
	Samples []TokenRefusal
}

// SharedRemoteTask is a remote task id of one org that delegations of
// more than one tenant record. Evidence for it is matched to a delegation
// by the compensation idempotency key it carries; a declaration without
// one matches none of them.
type SharedRemoteTask struct {
	OrgID         string
	RemoteTaskID  string
	DelegationIDs []uuid.UUID
	Tenants       []string
	// LastCreatedAt is when the latest of these delegations was created.
	LastCreatedAt time.Time
}

// TokenRefusalReader is the read side of the refusal counts and of the
// shared remote task ids, for the anomalies.
type TokenRefusalReader interface {
	// TokenRefusalTotals returns the counts last updated at or after since
	// (all when since is zero), by org and reason, with their samples.
	TokenRefusalTotals(ctx context.Context, since time.Time) ([]TokenRefusalTotal, error)
	// SharedRemoteTasks returns up to limit remote task ids recorded by
	// delegations of more than one tenant.
	SharedRemoteTasks(ctx context.Context, limit int) ([]SharedRemoteTask, error)
}

// MaxSharedRemoteTasks bounds the shared remote task ids one anomalies
// answer lists.
const MaxSharedRemoteTasks = 100

// TokenRefusals returns the refused-token counts and samples updated at or
// after since, for finance and on-call.
func (r *Reports) TokenRefusals(ctx context.Context, p ledger.Principal, since time.Time) ([]TokenRefusalTotal, error) {
	if err := ledger.Authorize(p, ledger.ActionReadReports); err != nil {
		return nil, err
	}
	return r.store.TokenRefusalTotals(ctx, since)
}

// SharedRemoteTasks returns the remote task ids recorded by more than one
// tenant (at most MaxSharedRemoteTasks), for finance and on-call.
func (r *Reports) SharedRemoteTasks(ctx context.Context, p ledger.Principal) ([]SharedRemoteTask, error) {
	if err := ledger.Authorize(p, ledger.ActionReadReports); err != nil {
		return nil, err
	}
	return r.store.SharedRemoteTasks(ctx, MaxSharedRemoteTasks)
}
