package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/internal/backoff"
	"github.com/quittance/quittance/internal/panics"
	"github.com/quittance/quittance/internal/text"
	"github.com/quittance/quittance/ledger"
)

// Delivery statuses.
const (
	// StatusPending: not delivered yet; retried until MaxAttempts.
	StatusPending = "pending"
	// StatusDelivered: the endpoint answered 2xx.
	StatusDelivered = "delivered"
	// StatusDead: every attempt failed; waits for a redrive.
	StatusDead = "dead"
)

// Endpoint is a tenant's webhook endpoint.
type Endpoint struct {
	// Tenant owns the endpoint; only its delegations' events are sent.
	Tenant string
	// ID is the tenant's name for the endpoint.
	ID string
	// URL receives the deliveries (POST).
	URL string
	// EventTypes are the event types sent; empty sends all.
	EventTypes []string
	// Secret is the signing secret, "whsec_" + base64 of the key.
	Secret    string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Delivery is one event to deliver to one endpoint.
type Delivery struct {
	ID     int64
	Tenant string
	// EndpointID is the webhook endpoint delivered to; empty for a push,
	// which PushDelegationID and PushConfigID name the config of.
	EndpointID       string
	PushDelegationID uuid.UUID
	PushConfigID     string
	EventSeq         int64
	Status           string
	Attempts         int
	NextAttemptAt    time.Time
	// LastStatus is the HTTP status of the last attempt (0: no response).
	LastStatus  int
	LastError   string
	CreatedAt   time.Time
	DeliveredAt time.Time
	// LeaseToken identifies the claim of a worker delivering it.
	LeaseToken string
}

// DeliveryFilter selects deliveries of one endpoint, newest first.
type DeliveryFilter struct {
	Tenant     string
	EndpointID string
	// Status, if set, selects one status.
	Status string
	// Before, if set, returns only deliveries with a smaller id (paging).
	Before int64
	Limit  int
}

// ErrLeaseLost reports that a delivery's lease expired and another worker
// took it over.
var ErrLeaseLost = errors.New("webhook: delivery lease lost")

// Store is what the webhook service needs. Error contract: a missing row is
// ledger.ErrNotFound (wrapped).
type Store interface {
	// PutEndpoint creates the endpoint (with e.Secret) or updates its URL and
	// event types (keeping its secret); created says which.
	PutEndpoint(ctx context.Context, e Endpoint, now time.Time) (out Endpoint, created bool, err error)
	// Endpoint returns a tenant's endpoint.
	Endpoint(ctx context.Context, tenant, id string) (Endpoint, error)
	// Deliveries lists deliveries, newest first.
	Deliveries(ctx context.Context, f DeliveryFilter) ([]Delivery, error)
	// Redrive puts dead deliveries (all, or of one tenant and endpoint when
	// given) back to pending with their attempts reset, due at now, and makes
	// pending ones due now; it returns how many were dead. In the same
	// transaction it calls record with that count, to append the event
	// that says who did it.
	Redrive(ctx context.Context, tenant, endpointID string, now time.Time, record func(tx ledger.EventAppender, redriven int) error) (int, error)
	// ClaimDeliveries leases up to limit due deliveries until leaseUntil,
	// counting one more attempt on each; concurrent claimers never get the
	// same row.
	ClaimDeliveries(ctx context.Context, now, leaseUntil time.Time, leaseToken string, limit int) ([]Delivery, error)
	// DeliveryDone marks a claimed delivery delivered, or ErrLeaseLost.
	DeliveryDone(ctx context.Context, d Delivery, httpStatus int, now time.Time) error
	// DeliveryFailed records a failed attempt: due again at f.Next, or
	// dead, or ErrLeaseLost.
	DeliveryFailed(ctx context.Context, d Delivery, f Failure, now time.Time) error
	// Event returns the event with sequence seq.
	Event(ctx context.Context, seq int64) (ledger.Event, error)
	// PutPushConfig creates a push config (c.ID set) or replaces the
	// delegation's config of that id; ErrPushConfigLimit when it would be
	// the delegation's max+1th.
	PutPushConfig(ctx context.Context, c PushConfig, max int, now time.Time) (PushConfig, error)
	// PushConfig returns a delegation's push config.
	PushConfig(ctx context.Context, delegationID uuid.UUID, id string) (PushConfig, error)
	// PushConfigs lists a delegation's push configs, oldest first.
	PushConfigs(ctx context.Context, delegationID uuid.UUID) ([]PushConfig, error)
	// DeletePushConfig removes tenant's push config of a delegation, and
	// its deliveries; none there is no error.
	DeletePushConfig(ctx context.Context, tenant string, delegationID uuid.UUID, id string) error
	// PendingPushes are the ids of the pending deliveries to the push
	// config of claimed push delivery d, but d.
	PendingPushes(ctx context.Context, d Delivery) ([]int64, error)
	// SupersedePushes marks delivered, with httpStatus, the deliveries ids
	// that are still pending and not claimed.
	SupersedePushes(ctx context.Context, ids []int64, httpStatus int, now time.Time) error
}

// Failure is a failed delivery attempt, as Store.DeliveryFailed records it.
type Failure struct {
	// Dead gives the delivery up; otherwise it is due again at Next.
	Dead bool
	Next time.Time
	// HTTPStatus is the endpoint's answer (0: none); Problem says what
	// went wrong.
	HTTPStatus int
	Problem    string
}

// Config wires a Service. Zero values take the defaults given.
type Config struct {
	Store Store
	Clock ledger.Clock
	Log   *slog.Logger
	// ValidateURL checks an endpoint URL a tenant registers against the
	// egress policy (https only, no private destinations, unless the policy
	// allows them); the rules live with the SSRF-safe client, and the
	// wiring passes the policy's check. Required.
	ValidateURL func(rawURL string) error
	// HTTPClient delivers; it must be the SSRF-safe client of the same
	// egress policy ValidateURL checks against. Required.
	HTTPClient *http.Client
	// MaxAttempts is how many attempts are made before a delivery is
	// dead-lettered (default 40: with the default backoff, more than a day).
	MaxAttempts int
	// BackoffBase and BackoffMax bound the exponential backoff between
	// attempts (defaults 5s and 1h).
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// Interval is how often due deliveries are looked for (default 1s).
	Interval time.Duration
	// Lease is how long a claimed delivery is reserved (default 1m).
	Lease time.Duration
	// Timeout bounds one attempt (default 15s).
	Timeout time.Duration
	// Wake, if set, returns a channel that receives when deliveries may
	// have been queued, to look for them before the next tick.
	Wake func() (<-chan struct{}, func())
	// OnPanic is told of each panic recovered in a delivery (PanicDelivery)
	// or a round of Run (PanicRound); nil counts nothing.
	OnPanic func(worker string)
	// Push renders the pushes to the A2A gateway's push configs; nil
	// fails each push attempt.
	Push PushRenderer
}

// Where deliveries recover from panics, the worker names OnPanic is given.
const (
	// PanicDelivery is one delivery attempt: it counts as a failed
	// attempt, retried after its backoff (or dead-lettered).
	PanicDelivery = "webhook_delivery"
	// PanicRound is a round of Run: it goes on at its next tick.
	PanicRound = "webhook_round"
)

// panicked logs and counts a recovered panic.
func (s *Service) panicked(where string, p *panics.Error, attrs ...slog.Attr) {
	panics.Log(s.cfg.Log, where, p, attrs...)
	if s.cfg.OnPanic != nil {
		s.cfg.OnPanic(where)
	}
}

// Service manages endpoints and delivers.
type Service struct {
	cfg     Config
	backoff backoff.Exponential
}

// NewService returns a Service.
func NewService(cfg Config) *Service {
	if cfg.Clock == nil {
		cfg.Clock = ledger.SystemClock{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.ValidateURL == nil || cfg.HTTPClient == nil {
		panic("webhook: Config.ValidateURL and Config.HTTPClient are required")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.BackoffBase, 5*time.Second)
	def(&cfg.BackoffMax, time.Hour)
	def(&cfg.Interval, time.Second)
	def(&cfg.Lease, time.Minute)
	def(&cfg.Timeout, 15*time.Second)
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 40
	}
	return &Service{cfg: cfg, backoff: backoff.Exponential{Base: cfg.BackoffBase, Max: cfg.BackoffMax}}
}

func (s *Service) now() time.Time { return ledger.StoredTime(s.cfg.Clock.Now()) }

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)

// NewSecret returns a fresh signing secret: "whsec_" and the base64 of 32
// random bytes.
func NewSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms.
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

// Sign returns the webhook-signature header value of a delivery: "v1,"
// and the base64 HMAC-SHA256, keyed with the secret's decoded bytes, of
// "<msgID>.<unix timestamp>.<body>".
func Sign(secret, msgID string, ts time.Time, body []byte) (string, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return "", fmt.Errorf("webhook secret is not whsec_<base64>: %w", err)
	}
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%d.", msgID, ts.Unix())
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)), nil
}

// MessageID is the webhook-id of the delivery of event seq: the same on
// every attempt and to every endpoint, so receivers can deduplicate.
func MessageID(seq int64) string { return "qe_" + strconv.FormatInt(seq, 10) }

// PutEndpoint creates or updates an orchestrator tenant's endpoint. The URL
// must pass Config.ValidateURL, the egress policy's check. created is true
// when the endpoint is new: only then does the result carry the secret.
// Every event type named must be in the ledger's catalogue
// (ledger.ParseEventType).
func (s *Service) PutEndpoint(ctx context.Context, p ledger.Principal, id, url string, eventTypes []string) (Endpoint, bool, error) {
	if err := ledger.Authorize(p, ledger.ActionManageWebhooks); err != nil {
		return Endpoint{}, false, err
	}
	if !idPattern.MatchString(id) {
		return Endpoint{}, false, ledger.Invalid("id", "must be 1-128 characters of letters, digits, '.', '_', ':' or '-'")
	}
	if len(url) > 2048 {
		return Endpoint{}, false, ledger.Invalid("url", "is at most 2048 characters")
	}
	if err := s.cfg.ValidateURL(url); err != nil {
		return Endpoint{}, false, ledger.Invalid("url", "refused by the egress policy: %v", err)
	}
	if len(eventTypes) > 64 {
		return Endpoint{}, false, ledger.Invalid("event_types", "at most 64 types")
	}
	for _, t := range eventTypes {
		if _, err := ledger.ParseEventType(t); err != nil {
			return Endpoint{}, false, ledger.Invalid("event_types", "%q is not an event type", t)
		}
	}
	if eventTypes == nil {
		eventTypes = []string{}
	}
	e, created, err := s.cfg.Store.PutEndpoint(ctx, Endpoint{Tenant: p.Tenant, ID: id, URL: url, EventTypes: eventTypes, Secret: NewSecret()}, s.now())
	if err != nil {
		return Endpoint{}, false, err
	}
	if !created {
		e.Secret = ""
	}
	return e, created, nil
}

// Endpoint returns an orchestrator tenant's endpoint, without its secret.
func (s *Service) Endpoint(ctx context.Context, p ledger.Principal, id string) (Endpoint, error) {
	if err := ledger.Authorize(p, ledger.ActionManageWebhooks); err != nil {
		return Endpoint{}, err
	}
	e, err := s.cfg.Store.Endpoint(ctx, p.Tenant, id)
	e.Secret = ""
	return e, err
}

// Deliveries lists an orchestrator tenant's deliveries to one endpoint,
// newest first.
func (s *Service) Deliveries(ctx context.Context, p ledger.Principal, f DeliveryFilter) ([]Delivery, error) {
	if _, err := s.Endpoint(ctx, p, f.EndpointID); err != nil {
		return nil, err
	}
	switch f.Status {
	case "", StatusPending, StatusDelivered, StatusDead:
	default:
		return nil, ledger.Invalid("status", "must be pending, delivered or dead")
	}
	if f.Limit <= 0 || f.Limit > 500 {
		f.Limit = 100
	}
	f.Tenant = p.Tenant
	return s.cfg.Store.Deliveries(ctx, f)
}

// RedriveStream is the stream of the events that record redrives of
// webhook deliveries.
const RedriveStream = "webhooks"

// Redrive puts dead-lettered deliveries back in the queue (all of them, or
// one tenant's endpoint's) and makes pending ones due now. On-call only.
// A webhook_deliveries_redriven event on RedriveStream records who asked,
// for what, and how many were dead, in the same transaction.
func (s *Service) Redrive(ctx context.Context, p ledger.Principal, tenant, endpointID string) (int, error) {
	if err := ledger.Authorize(p, ledger.ActionRedriveWebhooks); err != nil {
		return 0, err
	}
	if endpointID != "" && tenant == "" {
		return 0, ledger.Invalid("tenant", "is required with endpoint_id")
	}
	now := s.now()
	return s.cfg.Store.Redrive(ctx, tenant, endpointID, now, func(tx ledger.EventAppender, redriven int) error {
		_, err := ledger.Append(ctx, tx, ledger.Event{Stream: RedriveStream, Type: ledger.EventTypeWebhookDeliveriesRedriven, At: now, Actor: p.Actor()},
			ledger.WebhookDeliveriesRedrivenData{Tenant: tenant, EndpointID: endpointID, Redriven: redriven})
		return err
	})
}

// Run delivers until ctx ends. Several Runs, on any replicas, may work on
// the same database.
func (s *Service) Run(ctx context.Context) error {
	tick := time.NewTicker(s.cfg.Interval)
	defer tick.Stop()
	var wake <-chan struct{}
	if s.cfg.Wake != nil {
		ch, stop := s.cfg.Wake()
		defer stop()
		wake = ch
	}
	for {
		for {
			var n int
			err := panics.Recover(func() (err error) { n, err = s.RunOnce(ctx); return err })
			if p, ok := panics.As(err); ok {
				s.panicked(PanicRound, p)
			} else if err != nil && ctx.Err() == nil {
				s.cfg.Log.ErrorContext(ctx, "webhook deliveries failed", slog.Any("error", err))
			}
			if n < batchSize || err != nil || ctx.Err() != nil {
				break
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-wake:
		}
	}
}

// batchSize is how many deliveries one RunOnce claims.
const batchSize = 16

// RunOnce claims due deliveries, attempts them concurrently, and returns
// how many it attempted.
func (s *Service) RunOnce(ctx context.Context) (int, error) {
	now := s.now()
	ds, err := s.cfg.Store.ClaimDeliveries(ctx, now, now.Add(s.cfg.Lease), rand.Text(), batchSize)
	if err != nil {
		return 0, fmt.Errorf("claim webhook deliveries: %w", err)
	}
	var wg sync.WaitGroup
	for _, d := range ds {
		wg.Go(func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Lease)
			defer cancel()
			err := panics.Recover(func() error { return s.deliver(dctx, d) })
			if p, ok := panics.As(err); ok {
				s.panicked(PanicDelivery, p, slog.Int64("delivery_id", d.ID))
				now := s.now()
				err = s.cfg.Store.DeliveryFailed(dctx, d, Failure{
					Dead: d.Attempts >= s.cfg.MaxAttempts, Next: now.Add(s.backoff.Wait(d.Attempts)), Problem: text.Truncate(p.Error(), 500),
				}, now)
			}
			if err != nil {
				s.cfg.Log.ErrorContext(ctx, "webhook delivery not recorded", slog.Int64("delivery_id", d.ID), slog.Any("error", err))
			}
		})
	}
	wg.Wait()
	return len(ds), nil
}

// Payload is the JSON body of a delivery, in the Standard Webhooks shape:
// the event type, a timestamp, and the event as data, in the published form
// the API and the event streams use.
type Payload struct {
	Type      ledger.EventType   `json:"type"`
	Timestamp time.Time          `json:"timestamp"`
	Data      ledger.EventRecord `json:"data"`
}

// deliver makes one attempt and records its outcome.
func (s *Service) deliver(ctx context.Context, d Delivery) error {
	if d.PushConfigID != "" {
		return s.deliverPush(ctx, d)
	}
	ep, err := s.cfg.Store.Endpoint(ctx, d.Tenant, d.EndpointID)
	if err != nil {
		return err
	}
	ev, err := s.cfg.Store.Event(ctx, d.EventSeq)
	if err != nil {
		return err
	}
	body, err := json.Marshal(Payload{Type: ev.Type, Timestamp: ev.At, Data: ledger.NewEventRecord(ev)})
	if err != nil {
		return err
	}
	status, problem := s.post(ctx, request{url: ep.URL, secret: ep.Secret, msgID: MessageID(d.EventSeq), body: body})
	now := s.now()
	if problem == "" {
		return s.cfg.Store.DeliveryDone(ctx, d, status, now)
	}
	dead := d.Attempts >= s.cfg.MaxAttempts
	s.cfg.Log.WarnContext(ctx, "webhook delivery attempt failed", slog.Int64("delivery_id", d.ID),
		slog.String("endpoint_id", d.EndpointID), slog.Int("attempt", d.Attempts), slog.Bool("dead", dead), slog.String("problem", problem))
	return s.cfg.Store.DeliveryFailed(ctx, d, Failure{Dead: dead, Next: now.Add(s.backoff.Wait(d.Attempts)), HTTPStatus: status, Problem: problem}, now)
}

// request is one signed delivery attempt: where, the signing secret, the
// webhook-id, headers of its own (a push's token and authorization) and
// the body.
type request struct {
	url, secret, msgID string
	header             http.Header
	body               []byte
}

// post sends a signed delivery and returns the status and, for anything
// but a 2xx, a problem.
func (s *Service) post(ctx context.Context, r request) (int, string) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	ts := s.cfg.Clock.Now()
	msgID, body := r.msgID, r.body
	sig, err := Sign(r.secret, msgID, ts, body)
	if err != nil {
		return 0, "endpoint secret unusable"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url, bytes.NewReader(body))
	if err != nil {
		return 0, "bad endpoint URL"
	}
	for k, v := range r.header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Quittance-Webhooks/1")
	req.Header.Set("webhook-id", msgID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
	req.Header.Set("webhook-signature", sig)
	resp, err := s.cfg.HTTPClient.Do(req)
	if err != nil {
		// An egress refusal says so in its own text ("egress denied").
		return 0, text.Truncate(err.Error(), 500)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, "HTTP " + strconv.Itoa(resp.StatusCode)
	}
	return resp.StatusCode, ""
}
