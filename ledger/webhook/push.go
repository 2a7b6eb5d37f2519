package webhook

import (
	"context"
	"encoding/base64"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/ledger"
)

// PushConfig is an A2A push notification config of a task the gateway
// serves (a delegation of Tenant): Quittance POSTs the task to URL each
// time it changes, as a delivery of this package (an outbox row per event
// of the delegation, retried with backoff, dead-lettered, redriven).
type PushConfig struct {
	// Tenant is the orchestrator tenant whose delegation it is.
	Tenant       string
	DelegationID uuid.UUID
	// ID is the config's id on its task: the client's, or one Quittance
	// gives it.
	ID string
	// URL receives the pushes (POST).
	URL string
	// Token is sent as the A2A-Notification-Token header (0.3's
	// X-A2A-Notification-Token), and keys the signature (PushSecret). The
	// client's, or one Quittance makes.
	Token string
	// AuthScheme ("Bearer" or "Basic") and AuthCredentials, when set, are
	// sent as the Authorization header.
	AuthScheme      string
	AuthCredentials string
	// ProtocolVersion is the A2A version of the interface that registered
	// the config, which its pushes speak: PushV1 (the default, when empty)
	// or PushV03.
	ProtocolVersion string
	CreatedAt       time.Time
	UpdatedAt       time.Time
}

// Redacted is c without its secrets (Token, AuthCredentials): what is
// shown of a config after the answer that registered it.
func (c PushConfig) Redacted() PushConfig {
	c.Token, c.AuthCredentials = "", ""
	return c
}

// MaxPushConfigs is how many push configs one task may have.
const MaxPushConfigs = 10

// ErrPushConfigLimit reports a task that has MaxPushConfigs configs
// already (the store's answer to one more).
var ErrPushConfigLimit = errors.New("webhook: the task has as many push configs as it may")

// The A2A versions a push config speaks.
const (
	PushV1  = "1.0"
	PushV03 = "0.3"
)

// PushRenderer renders a push: the JSON body Quittance POSTs to a push
// config of a delegation, the task as it stands when the push is sent (the
// A2A gateway's: an A2A 1.0 StreamResponse, or for a config of version
// PushV03 the 0.3 task, as a2a-go v0.3's push sender posts it).
type PushRenderer interface {
	RenderPush(ctx context.Context, tenant string, delegationID uuid.UUID, version string) ([]byte, error)
}

// PushSecret is the Standard Webhooks signing secret of a push config's
// deliveries: "whsec_" and the base64 of its token's bytes. A receiver
// verifies webhook-signature with it as with an endpoint's secret; Sign is
// the one rule for both.
func PushSecret(token string) string {
	return "whsec_" + base64.StdEncoding.EncodeToString([]byte(token))
}

// PushMessageID is the webhook-id of the push of event seq: the same on
// every attempt and to every config.
func PushMessageID(seq int64) string { return "qp_" + strconv.FormatInt(seq, 10) }

// checkPushConfig refuses a config Quittance will not send to: an id out
// of the pattern, a URL longer than 2048 characters or that the egress
// policy refuses (a scheme other than https, or http where the policy
// allows it; userinfo; a private destination), a token or credentials
// too long or not a header value, an authentication scheme other than
// Bearer or Basic, or one without credentials.
func (s *Service) checkPushConfig(c PushConfig) error {
	switch {
	case c.ID != "" && !idPattern.MatchString(c.ID):
		return ledger.Invalid("id", "must be 1-128 characters of letters, digits, '.', '_', ':' or '-'")
	case c.URL == "":
		return ledger.Invalid("url", "is required")
	case len(c.URL) > 2048:
		return ledger.Invalid("url", "is at most 2048 characters")
	case len(c.Token) > 512 || !headerValue(c.Token):
		return ledger.Invalid("token", "is at most 512 visible ASCII characters")
	case len(c.AuthCredentials) > 4096 || !headerValue(c.AuthCredentials):
		return ledger.Invalid("authentication.credentials", "is at most 4096 visible ASCII characters")
	case c.AuthScheme == "" && c.AuthCredentials != "":
		return ledger.Invalid("authentication.scheme", "is required with credentials")
	case c.AuthScheme != "" && !strings.EqualFold(c.AuthScheme, "Bearer") && !strings.EqualFold(c.AuthScheme, "Basic"):
		return ledger.Invalid("authentication.scheme", "must be Bearer or Basic")
	case c.AuthScheme != "" && c.AuthCredentials == "":
		return ledger.Invalid("authentication.credentials", "is required with a scheme")
	case c.ProtocolVersion != "" && c.ProtocolVersion != PushV1 && c.ProtocolVersion != PushV03:
		return ledger.Invalid("protocol_version", "must be %s or %s", PushV1, PushV03)
	}
	if err := s.cfg.ValidateURL(c.URL); err != nil {
		return ledger.Invalid("url", "refused by the egress policy: %v", err)
	}
	return nil
}

// headerValue reports whether v is visible ASCII and spaces only: what may
// go in a header as it is.
func headerValue(v string) bool {
	for _, r := range v {
		if r < 0x20 || r > 0x7e {
			return false
		}
	}
	return true
}

// CheckPushConfig says whether PutPushConfig would take c, without
// storing it: the gateway checks a config given with a new task's message
// before the task is created.
func (s *Service) CheckPushConfig(p ledger.Principal, c PushConfig) error {
	if err := ledger.Authorize(p, ledger.ActionDelegate); err != nil {
		return err
	}
	return s.checkPushConfig(c)
}

// PutPushConfig registers a push config on delegation c.DelegationID of
// p's tenant, which the caller has found p may see, or replaces the one of
// the same id. A config without an id gets a new one; without a token,
// a new one (NewSecret's form). The answer carries the secrets: the only
// one that does. A task with MaxPushConfigs already is refused.
func (s *Service) PutPushConfig(ctx context.Context, p ledger.Principal, c PushConfig) (PushConfig, error) {
	if err := s.CheckPushConfig(p, c); err != nil {
		return PushConfig{}, err
	}
	c.Tenant = p.Tenant
	if c.ID == "" {
		c.ID = uuid.Must(uuid.NewV7()).String()
	}
	if c.Token == "" {
		c.Token = NewSecret()
	}
	if c.ProtocolVersion == "" {
		c.ProtocolVersion = PushV1
	}
	switch {
	case strings.EqualFold(c.AuthScheme, "Bearer"):
		c.AuthScheme = "Bearer"
	case strings.EqualFold(c.AuthScheme, "Basic"):
		c.AuthScheme = "Basic"
	}
	out, err := s.cfg.Store.PutPushConfig(ctx, c, MaxPushConfigs, s.now())
	if errors.Is(err, ErrPushConfigLimit) {
		return PushConfig{}, ledger.Invalid("push_config", "a task has at most %d push notification configs", MaxPushConfigs)
	}
	return out, err
}

// PushConfig returns a push config of a delegation of p's tenant, without
// its secrets; ledger.ErrNotFound when there is none.
func (s *Service) PushConfig(ctx context.Context, p ledger.Principal, delegationID uuid.UUID, id string) (PushConfig, error) {
	if err := ledger.Authorize(p, ledger.ActionDelegate); err != nil {
		return PushConfig{}, err
	}
	c, err := s.cfg.Store.PushConfig(ctx, delegationID, id)
	if err == nil && c.Tenant != p.Tenant {
		err = ledger.ErrNotFound
	}
	return c.Redacted(), err
}

// PushConfigs lists a delegation's push configs (of p's tenant), oldest
// first, without their secrets.
func (s *Service) PushConfigs(ctx context.Context, p ledger.Principal, delegationID uuid.UUID) ([]PushConfig, error) {
	if err := ledger.Authorize(p, ledger.ActionDelegate); err != nil {
		return nil, err
	}
	cs, err := s.cfg.Store.PushConfigs(ctx, delegationID)
	if err != nil {
		return nil, err
	}
	out := make([]PushConfig, 0, len(cs))
	for _, c := range cs {
		if c.Tenant == p.Tenant {
			out = append(out, c.Redacted())
		}
	}
	return out, nil
}

// DeletePushConfig removes a push config of a delegation of p's tenant,
// and the pushes not yet delivered to it. Removing one that is not there
// is not an error: a retried delete succeeds.
func (s *Service) DeletePushConfig(ctx context.Context, p ledger.Principal, delegationID uuid.UUID, id string) error {
	if err := ledger.Authorize(p, ledger.ActionDelegate); err != nil {
		return err
	}
	return s.cfg.Store.DeletePushConfig(ctx, p.Tenant, delegationID, id)
}

// deliverPush makes one attempt of a push and records its outcome. The
// body is the task as it stands now, so a push that succeeds also
// delivers the config's pushes pending when this attempt began: their
// events, committed then, are in it.
func (s *Service) deliverPush(ctx context.Context, d Delivery) error {
	if s.cfg.Push == nil {
		return errors.New("webhook: a push delivery, and no Config.Push to render it")
	}
	c, err := s.cfg.Store.PushConfig(ctx, d.PushDelegationID, d.PushConfigID)
	if err != nil {
		return err
	}
	before, err := s.cfg.Store.PendingPushes(ctx, d)
	if err != nil {
		return err
	}
	var status int
	problem := "the task could not be read"
	if body, err := s.cfg.Push.RenderPush(ctx, c.Tenant, c.DelegationID, c.ProtocolVersion); err != nil {
		s.cfg.Log.ErrorContext(ctx, "push not rendered", slog.Int64("delivery_id", d.ID), slog.Any("error", err))
	} else {
		h := http.Header{}
		tokenHeader := "A2A-Notification-Token"
		if c.ProtocolVersion == PushV03 {
			tokenHeader = "X-A2A-Notification-Token"
		}
		h.Set(tokenHeader, c.Token)
		if c.AuthScheme != "" {
			h.Set("Authorization", c.AuthScheme+" "+c.AuthCredentials)
		}
		status, problem = s.post(ctx, request{url: c.URL, secret: PushSecret(c.Token), msgID: PushMessageID(d.EventSeq), header: h, body: body})
	}
	now := s.now()
	if problem == "" {
		if err := s.cfg.Store.SupersedePushes(ctx, before, status, now); err != nil {
			return err
		}
		return s.cfg.Store.DeliveryDone(ctx, d, status, now)
	}
	dead := d.Attempts >= s.cfg.MaxAttempts
	s.cfg.Log.WarnContext(ctx, "push delivery attempt failed", slog.Int64("delivery_id", d.ID),
		slog.String("push_config_id", d.PushConfigID), slog.Int("attempt", d.Attempts), slog.Bool("dead", dead), slog.String("problem", problem))
	return s.cfg.Store.DeliveryFailed(ctx, d, Failure{Dead: dead, Next: now.Add(s.backoff.Wait(d.Attempts)), HTTPStatus: status, Problem: problem}, now)
}
