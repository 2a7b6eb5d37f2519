// Package apitest runs Quittance's HTTP API in tests: an httptest.Server
// serving what app.New builds, the graph the quittance binary runs, on a
// fresh, migrated PostgreSQL database (from sql/pgtest), with a settable
// clock, optionally running the A2A and webhook workers, and helpers to make
// tokens, budgets, orgs and task classes and to do JSON requests through a
// real HTTP client.
//
// It also checks the ledger's invariants straight from the database
// (CheckInvariants) and takes snapshots of everything written
// (Snapshot), so a test can assert that a refused request wrote nothing.
//
// It is for tests only and must never be imported by non-test code.
package apitest

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quittance/quittance/cmd/quittance/internal/app"
	"github.com/quittance/quittance/cmd/quittance/internal/console"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/telemetry"
	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/delegate/egress"
	"github.com/quittance/quittance/internal/jose"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/access"
	"github.com/quittance/quittance/ledger/report"
	"github.com/quittance/quittance/ledger/webhook"
	"github.com/quittance/quittance/sql/pgstore"
	"github.com/quittance/quittance/sql/pgtest"
	"github.com/quittance/quittance/sql/pgtypes"
)

// Epoch is the fake clock's time when an Env starts.
var Epoch = time.Date(2026, time.March, 2, 9, 0, 0, 0, time.UTC)

// Clock is a settable ledger.Clock, safe for concurrent use. It does not
// move unless a test moves it.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock stopped at t.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

// Now implements ledger.Clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set stops the clock at t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// Advance moves the clock forward by d and returns the new time.
func (c *Clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// Env is a running API on its own database, built by app.New as the
// quittance binary builds it: the ledger with the real JWKS,
// agent-endpoint and dispatch-message validators, compensation, reports,
// the event feed, the A2A worker and orchestrator, webhooks and metrics on
// a private registry. Only what the options say differs: the clock, the
// loopback egress policy, test intervals, whether the background workers
// run (WithWorker) and a ledger signing identity (WithIdentity).
type Env struct {
	// Server is the API's test server; URL is its base URL.
	Server *httptest.Server
	URL    string
	// Client is a real HTTP client for Server.
	Client *http.Client
	// Pool is the test database; Store and Ledger are the store and
	// service the API runs on.
	Pool   *pgxpool.Pool
	Store  *pgstore.Store
	Ledger *ledger.Service
	// Access is the access service: principals, credentials, pending
	// changes.
	Access *access.Service
	// Clock is the service's clock; nil when the Env runs on another clock
	// (WithClock).
	Clock *Clock
	// OncallToken is the bearer token of an on-call (admin) principal.
	OncallToken string

	// Compensation, Reports and Webhooks are the other services the API
	// serves.
	Compensation *compensation.Service
	Reports      *report.Reports
	Webhooks     *webhook.Service
	// LedgerID is the ledger's id, the audience of signed tokens.
	LedgerID string
	// Registry is the Env's private metrics registry; Metrics records to it.
	Registry *prometheus.Registry
	Metrics  *telemetry.Metrics
	// Worker is the A2A worker; it runs only with WithWorker.
	Worker *delegate.Worker
	// Identity is the ledger's signing identity (WithIdentity); nil without
	// one.
	Identity *jose.Identity
	// Cases is case handling; Console is the web console, served under
	// /console/ on Server.
	Cases   *report.Cases
	Console *console.Console

	startWorker func()
}

// LoopbackEgress is the egress policy of an Env: plain http to 127.0.0.1
// only, where test peers listen.
var LoopbackEgress = egress.Policy{AllowHTTP: true, AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}

// Worker configures the background workers an Env runs (WithWorker): the
// A2A outbox workers and, if asked, webhook deliveries, both through
// LoopbackEgress, on intervals short enough for tests. The compensation
// sweep does not run by itself; tests sweep through the API.
type Worker struct {
	// Stopped leaves the workers stopped until Env.StartWorker runs them.
	Stopped bool
	// NoPush leaves the public URL unset, so remote agents are asked for no
	// push notifications and dispatched tasks are polled.
	NoPush bool
	// PollAfter is how long a dispatched task may go without news before it
	// is polled (default 1h: never within a test).
	PollAfter time.Duration
	// PollInterval is how often a polled task is asked again (default 20ms).
	PollInterval time.Duration
	// Streaming subscribes to tasks whose agent card declares streaming,
	// looking for tasks to stream every 20ms (the binary's default is on;
	// an Env's is off, so tests see push and poll alone unless they ask).
	Streaming bool
	// CompensationMaxAttempts bounds the compensation requests sent for one
	// obligation (the worker's default when zero).
	CompensationMaxAttempts int
	// DispatchMaxAttempts bounds the attempts of one dispatch (the
	// worker's default when zero).
	DispatchMaxAttempts int
	// CardTTL is how long a checked agent card is reused (the worker's
	// default, 5m, when zero).
	CardTTL time.Duration
	// Webhooks runs webhook deliveries too.
	Webhooks bool
	// WebhookMaxAttempts is how many attempts a webhook delivery gets
	// before it is dead-lettered (default 5).
	WebhookMaxAttempts int
	// Transport, when set, wraps the A2A client's transport
	// (app.Config.WrapA2ATransport).
	Transport func(http.RoundTripper) http.RoundTripper
}

// Option changes what New and Start build.
type Option func(*options)

type options struct {
	privateCluster bool
	clock          ledger.Clock
	ledgerID       string
	threshold      int64
	currencyLimits map[string]int64
	registerEgress *egress.Policy
	oncallToken    string
	rateLimit      httpapi.RateLimit
	stream         httpapi.StreamConfig
	worker         *Worker
	identity       bool
	production     bool
	personTTL      [2]time.Duration
	oidc           *console.OIDC
	secureCookies  bool
	log            *slog.Logger
	pendingSweep   time.Duration
	kidInterval    time.Duration
	refusalTime    time.Duration
	recorder       *Recorder
}

// WithClock runs every service on c instead of a new Clock stopped at
// Epoch; ledger.SystemClock{} for tests that run the workers.
func WithClock(c ledger.Clock) Option { return func(o *options) { o.clock = c } }

// WithLedgerID sets the ledger's id (default "ledger-test").
func WithLedgerID(id string) Option { return func(o *options) { o.ledgerID = id } }

// WithWriteOffThreshold sets the largest write-off one on-call identity may
// make alone (default 100000, the service's default).
func WithWriteOffThreshold(minor int64) Option { return func(o *options) { o.threshold = minor } }

// WithCurrencyWriteOffThresholds gives currencies write-off approval
// thresholds of their own (QUITTANCE_WRITE_OFF_APPROVAL_THRESHOLDS_MINOR).
func WithCurrencyWriteOffThresholds(minor map[string]int64) Option {
	return func(o *options) { o.currencyLimits = minor }
}

// WithRegistrationEgress sets the policy org registration checks agent
// endpoints against (default LoopbackEgress); the workers still dial
// through LoopbackEgress.
func WithRegistrationEgress(p egress.Policy) Option {
	return func(o *options) { o.registerEgress = &p }
}

// WithOncallToken sets the secret of the on-call principal's token (default a new
// one), so an Env started again on the same database keeps it.
func WithOncallToken(secret string) Option { return func(o *options) { o.oncallToken = secret } }

// WithRateLimit sets the API's per-credential rate limit (default none).
func WithRateLimit(r httpapi.RateLimit) Option { return func(o *options) { o.rateLimit = r } }

// WithStream sets how often the event streams poll the table and how long
// they may be idle before a heartbeat (defaults: the API's).
func WithStream(poll, heartbeat time.Duration) Option {
	return func(o *options) { o.stream.Poll, o.stream.Heartbeat = poll, heartbeat }
}

// WithStreamCaps sets how many event streams one principal may have open,
// and how many the service serves in all (defaults: the API's).
func WithStreamCaps(perPrincipal, open int) Option {
	return func(o *options) { o.stream.MaxPerPrincipal, o.stream.MaxOpen = perPrincipal, open }
}

// WithStreamBatch sets how many events an event stream reads at a time
// (default the API's), so a short backlog takes many pages to replay.
func WithStreamBatch(n int) Option { return func(o *options) { o.stream.Batch = n } }

// WithWorker runs the background workers, configured by w (without it they
// are built, as always, but never run).
func WithWorker(w Worker) Option { return func(o *options) { o.worker = &w } }

// WithProduction runs the ledger as `quittance serve` does, not as `dev`
// (the default of an Env, so tests can do privileged things with the
// bootstrap on-call token alone): the bootstrap token (OncallToken) may
// then create the first two on-call principals and nothing else, and every
// privileged change waits for a second on-call principal (see
// Env.TwoOncall).
func WithProduction() Option { return func(o *options) { o.production = true } }

// WithPersonCredentialLifetime sets a person's default credential lifetime
// and the longest one may be issued for (by default a person's credential
// outlives every test).
func WithPersonCredentialLifetime(ttl, maxTTL time.Duration) Option {
	return func(o *options) { o.personTTL = [2]time.Duration{ttl, maxTTL} }
}

// WithLog sends the service's operational log (every component's, as
// the binary's) to log instead of discarding it.
func WithLog(log *slog.Logger) Option { return func(o *options) { o.log = log } }

// WithPendingChangeSweep sets how often the Env's background work expires
// pending changes past their expiry (default every second of real time;
// what is past its expiry is judged by the Env's clock); a test that wants approval itself to find a change expired sets
// it beyond the test's length.
func WithPendingChangeSweep(d time.Duration) Option { return func(o *options) { o.pendingSweep = d } }

// WithOrgJWKSUnknownKidInterval sets the shortest time between two fetches
// of an org's JWKS URL for tokens or receipts naming a kid none of its keys
// in force has (default the service's, a minute). An Env never fetches
// orgs' JWKS URLs periodically: only such a kid, or on-call, makes it fetch.
func WithOrgJWKSUnknownKidInterval(d time.Duration) Option {
	return func(o *options) { o.kidInterval = d }
}

// WithEvidenceRefusalTime sets how long after it arrived a posted token
// refused without a reason told is answered (default zero: at once).
func WithEvidenceRefusalTime(d time.Duration) Option { return func(o *options) { o.refusalTime = d } }

// WithIdentity gives the ledger a fresh signing identity: compensation
// requests are signed and its JWK Set is served.
func WithIdentity() Option { return func(o *options) { o.identity = true } }

// WithPrivateCluster runs the API on a database of a throwaway cluster of
// its own (pgtest.Cluster) rather than the shared test server. The event
// feed's cut (pg_snapshot_xmin) is the whole cluster's, so a transaction
// open for long in one database of the shared server holds back the feeds
// of the tests on every other: tests of the feed's timing run on a
// cluster of their own, and so do tests whose own transactions run for
// long (the plan checks' seeding of tens of thousands of rows).
func WithPrivateCluster() Option { return func(o *options) { o.privateCluster = true } }

// New starts an API on a fresh migrated database. Everything is torn down
// when t ends.
func New(t testing.TB, opts ...Option) *Env {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	var dbURL string
	switch {
	case o.privateCluster:
		_, dbURL = pgtest.Cluster(t)
	case o.recorder != nil:
		dbURL = pgtest.URL(t)
	default:
		return Start(t, pgtest.Pool(t), opts...)
	}
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatalf("apitest: %v", err)
	}
	cfg.AfterConnect = pgtypes.AfterConnect
	if o.recorder != nil {
		cfg.ConnConfig.Tracer = o.recorder
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("apitest: %v", err)
	}
	t.Cleanup(pool.Close)
	return Start(t, pool, opts...)
}

// Start starts an API on pool's database, with new services: what a fresh
// replica or a restarted process runs. The on-call token is created unless
// it exists. Everything Start starts is stopped when t ends; pool is left
// open.
func Start(t testing.TB, pool *pgxpool.Pool, opts ...Option) *Env {
	t.Helper()
	o := options{
		clock: NewClock(Epoch), ledgerID: "ledger-test", threshold: 100_000,
		oncallToken: access.NewTokenSecret(), pendingSweep: time.Second,
	}
	for _, opt := range opts {
		opt(&o)
	}
	e := &Env{Pool: pool, OncallToken: o.oncallToken, LedgerID: o.ledgerID, Registry: prometheus.NewRegistry()}
	e.Clock, _ = o.clock.(*Clock)
	if o.identity {
		keyFile, err := jose.NewIdentityFile("test", time.Now())
		if err != nil {
			t.Fatalf("apitest: new signing key: %v", err)
		}
		if e.Identity, err = jose.LoadIdentity(o.ledgerID, keyFile); err != nil {
			t.Fatalf("apitest: load signing key: %v", err)
		}
	}

	// The server starts first: the worker registers push notifications at
	// its URL.
	var api http.Handler
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { api.ServeHTTP(w, r) }))
	t.Cleanup(srv.Close)
	e.Server, e.URL, e.Client = srv, srv.URL, srv.Client()
	e.Client.Timeout = 30 * time.Second

	w := Worker{}
	if o.worker != nil {
		w = *o.worker
	}
	// Closing the streams' Done (before the server closes: cleanups run
	// last first) ends open event streams.
	streamsDone := make(chan struct{})
	t.Cleanup(func() { close(streamsDone) })
	stream := o.stream
	stream.Done = streamsDone
	built := app.New(app.Config{
		Pool: pool, Registry: e.Registry, Clock: o.clock, LedgerID: o.ledgerID, Version: "test", Identity: e.Identity,
		WriteOffApprovalThresholdMinor: o.threshold, WriteOffApprovalThresholdsMinor: o.currencyLimits, Egress: LoopbackEgress, AgentRegistrationEgress: o.registerEgress,
		A2A: w.a2aConfig(e.URL), WrapA2ATransport: w.Transport, Webhooks: w.webhookConfig(), RateLimit: o.rateLimit, Stream: stream,
		Dev: !o.production, OrgJWKSUnknownKidInterval: o.kidInterval, EvidenceRefusalTime: o.refusalTime,
		// Tests move the clock by weeks; a person's credential outlives them
		// unless a test gives it an expiry.
		PersonCredentialTTL: cmp.Or(o.personTTL[0], 100*365*24*time.Hour), PersonCredentialMaxTTL: o.personTTL[1],
		Console: app.ConsoleConfig{OIDC: o.oidc, SecureCookies: o.secureCookies},
		Log:     o.log,
	})
	e.Store, e.Metrics, e.Ledger, e.Compensation, e.Reports = built.Store, built.Metrics, built.Ledger, built.Compensation, built.Reports
	e.Access = built.Access
	{
		// As in the binary: revocations reach the authentication cache
		// through LISTEN/NOTIFY, and pending changes expire.
		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan struct{})
		go func() { defer close(stopped); _ = e.Access.Run(ctx, o.pendingSweep) }()
		t.Cleanup(func() { cancel(); <-stopped })
	}
	e.Worker, e.Webhooks = built.Worker, built.Webhooks
	e.Cases, e.Console = built.Cases, built.Console
	api = withConsole(built)

	if _, err := e.Access.EnsureToken(context.Background(), access.TokenInput{Role: ledger.RoleOncall, Name: "oncall"}, e.OncallToken); err != nil {
		t.Fatalf("apitest: create on-call token: %v", err)
	}
	if o.worker != nil {
		e.startWorker = w.starter(t, e)
		if !w.Stopped {
			e.StartWorker()
		}
	}
	return e
}

// a2aConfig tunes the A2A worker for tests: intervals and backoff short
// enough for a test, push notifications registered at publicURL unless
// NoPush.
func (w Worker) a2aConfig(publicURL string) delegate.Config {
	if w.PollAfter == 0 {
		w.PollAfter = time.Hour
	}
	if w.PollInterval == 0 {
		w.PollInterval = 20 * time.Millisecond
	}
	if w.NoPush {
		publicURL = ""
	}
	var streamInterval time.Duration // the worker's default
	if w.Streaming {
		streamInterval = 20 * time.Millisecond
	}
	return delegate.Config{
		PublicURL: publicURL, Interval: 20 * time.Millisecond, PollAfter: w.PollAfter, PollInterval: w.PollInterval,
		BackoffBase: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond, CompensationPollInterval: 20 * time.Millisecond,
		CompensationMaxAttempts: w.CompensationMaxAttempts, Streaming: w.Streaming, StreamInterval: streamInterval,
		DispatchMaxAttempts: w.DispatchMaxAttempts, CardTTL: w.CardTTL,
	}
}

// webhookConfig tunes webhook deliveries for tests: five attempts unless
// WebhookMaxAttempts says otherwise, milliseconds apart.
func (w Worker) webhookConfig() webhook.Config {
	maxAttempts := 5
	if w.WebhookMaxAttempts > 0 {
		maxAttempts = w.WebhookMaxAttempts
	}
	return webhook.Config{
		MaxAttempts: maxAttempts, BackoffBase: 10 * time.Millisecond, BackoffMax: 40 * time.Millisecond, Interval: 20 * time.Millisecond,
	}
}

// starter returns what runs e's A2A worker (and webhook deliveries if w
// asks for them) the first time it is called, until the test ends.
func (w Worker) starter(t testing.TB, e *Env) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			run := func(fn func(context.Context) error) {
				ctx, cancel := context.WithCancel(context.Background())
				stopped := make(chan struct{})
				go func() { defer close(stopped); _ = fn(ctx) }()
				t.Cleanup(func() { cancel(); <-stopped })
			}
			run(e.Worker.Run)
			if w.Webhooks {
				run(e.Webhooks.Run)
			}
		})
	}
}

// StartWorker runs the workers of an Env built with WithWorker(Worker{Stopped:
// true}); they stop when the test ends. It does nothing the second time,
// or without WithWorker.
func (e *Env) StartWorker() {
	if e.startWorker != nil {
		e.startWorker()
	}
}

// Response is an HTTP response with its body read.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
	// Request names the request, for failure messages.
	Request string
}

// Do sends a request with the given bearer token ("" for none) and body,
// and reads the response. body may be nil (no body), a string or []byte
// (sent verbatim), or any value (sent as JSON).
func (e *Env) Do(t testing.TB, method, path, token string, body any) *Response {
	t.Helper()
	var (
		r  io.Reader
		ct string
	)
	switch b := body.(type) {
	case nil:
	case string:
		r, ct = strings.NewReader(b), "application/json"
	case []byte:
		r, ct = bytes.NewReader(b), "application/json"
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatalf("apitest: encode body of %s %s: %v", method, path, err)
		}
		r, ct = bytes.NewReader(raw), "application/json"
	}
	req, err := http.NewRequest(method, e.URL+path, r)
	if err != nil {
		t.Fatalf("apitest: %s %s: %v", method, path, err)
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return e.Send(t, req)
}

// Send sends a prepared request (for unusual headers) and reads the response.
func (e *Env) Send(t testing.TB, req *http.Request) *Response {
	t.Helper()
	resp, err := e.Client.Do(req)
	if err != nil {
		t.Fatalf("apitest: %s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("apitest: read response of %s %s: %v", req.Method, req.URL.Path, err)
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: raw, Request: req.Method + " " + req.URL.RequestURI()}
}

// Expect fails the test unless the response has the given status.
func (r *Response) Expect(t testing.TB, status int) *Response {
	t.Helper()
	if r.Status != status {
		t.Fatalf("%s: status %d, want %d; body: %s", r.Request, r.Status, status, r.Body)
	}
	return r
}

// JSON decodes the body into v.
func (r *Response) JSON(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("%s: decode body %s: %v", r.Request, r.Body, err)
	}
}

// Problem is an RFC 9457 problem as the API sends it.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Code   string `json:"code"`
	Detail string `json:"detail"`
	Errors []struct {
		Location string `json:"location"`
		Message  string `json:"message"`
	} `json:"errors"`
}

// Problem checks that the response is a problem+json with the given status
// and code (any code when code is ""), and returns it.
func (r *Response) Problem(t testing.TB, status int, code string) Problem {
	t.Helper()
	if r.Status != status {
		t.Fatalf("%s: status %d, want %d; body: %s", r.Request, r.Status, status, r.Body)
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		t.Fatalf("%s: Content-Type %q, want application/problem+json; body: %s", r.Request, ct, r.Body)
	}
	var p Problem
	r.JSON(t, &p)
	if p.Code == "" {
		t.Fatalf("%s: problem has no code: %s", r.Request, r.Body)
	}
	if p.Status != status {
		t.Fatalf("%s: problem status member %d, want %d", r.Request, p.Status, status)
	}
	if code != "" && p.Code != code {
		t.Fatalf("%s: problem code %q, want %q; body: %s", r.Request, p.Code, code, r.Body)
	}
	return p
}

// NewToken issues a token through the admin API and returns its secret.
func (e *Env) NewToken(t testing.TB, role ledger.Role, tenant, name string) string {
	t.Helper()
	var out struct {
		Token string `json:"token"`
	}
	e.Do(t, http.MethodPost, "/admin/v1/tokens", e.OncallToken, map[string]any{
		"role": string(role), "tenant": tenant, "name": name,
	}).Expect(t, http.StatusCreated).JSON(t, &out)
	if out.Token == "" {
		t.Fatal("apitest: token response without a token")
	}
	return out.Token
}

// Oncall is an on-call principal of an Env: its id and a token.
type Oncall struct {
	ID    string
	Name  string
	Token string
}

// TwoOncall creates two on-call principals with the bootstrap token (the
// two it may create outside dev) and returns them.
func (e *Env) TwoOncall(t testing.TB, a, b string) (Oncall, Oncall) {
	t.Helper()
	mk := func(name string) Oncall {
		var out struct {
			Token       string `json:"token"`
			PrincipalID string `json:"principal_id"`
		}
		e.Do(t, http.MethodPost, "/admin/v1/tokens", e.OncallToken, map[string]any{"role": "oncall", "name": name}).
			Expect(t, http.StatusCreated).JSON(t, &out)
		return Oncall{ID: out.PrincipalID, Name: name, Token: out.Token}
	}
	return mk(a), mk(b)
}

// NewPerson asks, with the requester's token, for a new person principal
// of role, which the approver's token approves (production mode: a
// principal_create change), and returns its principal id and its token:
// the requester's part of the split credential joined to the approver's.
func (e *Env) NewPerson(t testing.TB, requester, approver string, role ledger.Role, name string) (id, token string) {
	t.Helper()
	var asked struct {
		PrincipalID   string `json:"principal_id"`
		TokenPart     string `json:"token_part"`
		PendingChange struct {
			ID string `json:"id"`
		} `json:"pending_change"`
	}
	e.Do(t, http.MethodPost, "/admin/v1/tokens", requester, map[string]any{"role": string(role), "name": name}).
		Expect(t, http.StatusAccepted).JSON(t, &asked)
	var approved struct {
		TokenPart string `json:"token_part"`
	}
	e.Do(t, http.MethodPost, "/admin/v1/pending-changes/"+asked.PendingChange.ID+"/approve", approver, nil).
		Expect(t, http.StatusOK).JSON(t, &approved)
	if asked.TokenPart == "" || approved.TokenPart == "" {
		t.Fatalf("apitest: person %q: parts %q and %q", name, asked.TokenPart, approved.TokenPart)
	}
	return asked.PrincipalID, asked.TokenPart + approved.TokenPart
}

// Approve approves a pending change with token, expecting 200.
func (e *Env) Approve(t testing.TB, token, changeID string) {
	t.Helper()
	e.Do(t, http.MethodPost, "/admin/v1/pending-changes/"+changeID+"/approve", token, nil).Expect(t, http.StatusOK)
}

// PrincipalID returns the principal id of a token's holder.
func (e *Env) PrincipalID(t testing.TB, token string) string {
	t.Helper()
	p, err := e.Access.AuthenticateBootstrap(context.Background(), token)
	if err != nil {
		t.Fatalf("apitest: authenticate: %v", err)
	}
	return p.ID.String()
}

// Actor is how events name the holder of token.
func (e *Env) Actor(t testing.TB, token string) string {
	t.Helper()
	return "principal:" + e.PrincipalID(t, token)
}

// NewOrchestrator issues an orchestrator token for tenant.
func (e *Env) NewOrchestrator(t testing.TB, tenant string) string {
	t.Helper()
	return e.NewToken(t, ledger.RoleOrchestrator, tenant, "orchestrator-"+tenant)
}

// DefaultBudgetTenants are the tenants PutBudget names: those the tests'
// orchestrators belong to unless a test says otherwise.
var DefaultBudgetTenants = []string{"acme", "globex"}

// PutBudget creates a budget or changes its funding through the admin API,
// naming DefaultBudgetTenants (at once: the Env runs under dev with the
// bootstrap token).
func (e *Env) PutBudget(t testing.TB, id, currency string, funded int64) httpapi.BudgetBody {
	t.Helper()
	return e.PutBudgetFor(t, id, currency, funded, DefaultBudgetTenants...)
}

// PutBudgetFor is PutBudget naming tenants instead.
func (e *Env) PutBudgetFor(t testing.TB, id, currency string, funded int64, tenants ...string) httpapi.BudgetBody {
	t.Helper()
	if tenants == nil {
		tenants = []string{}
	}
	r := e.Do(t, http.MethodPut, "/admin/v1/budgets/"+id, e.OncallToken, map[string]any{
		"currency": currency, "funded_minor": funded, "tenants": tenants,
	})
	if r.Status != http.StatusCreated && r.Status != http.StatusOK {
		t.Fatalf("%s: status %d: %s", r.Request, r.Status, r.Body)
	}
	var b httpapi.BudgetBody
	r.JSON(t, &b)
	return b
}

// Budget reads a budget through the admin API.
func (e *Env) Budget(t testing.TB, id string) httpapi.BudgetBody {
	t.Helper()
	var b httpapi.BudgetBody
	e.Do(t, http.MethodGet, "/admin/v1/budgets/"+id, e.OncallToken, nil).Expect(t, http.StatusOK).JSON(t, &b)
	return b
}

// PutOrg registers a remote org through the admin API.
func (e *Env) PutOrg(t testing.TB, id string, sharedCoordinator bool) httpapi.OrgBody {
	t.Helper()
	r := e.Do(t, http.MethodPut, "/admin/v1/orgs/"+id, e.OncallToken, map[string]any{"name": "Org " + id, "shared_coordinator": sharedCoordinator})
	if r.Status != http.StatusCreated && r.Status != http.StatusOK {
		t.Fatalf("%s: status %d: %s", r.Request, r.Status, r.Body)
	}
	var o httpapi.OrgBody
	r.JSON(t, &o)
	return o
}

// PutTaskClass registers a task class through the admin API.
func (e *Env) PutTaskClass(t testing.TB, name string, effectCapable bool, gateOn []string, timeout time.Duration) httpapi.TaskClassBody {
	t.Helper()
	if gateOn == nil {
		gateOn = []string{}
	}
	var c httpapi.TaskClassBody
	e.Do(t, http.MethodPut, "/admin/v1/task-classes/"+name, e.OncallToken, map[string]any{
		"effect_capable": effectCapable, "gate_on": gateOn, "compensation_timeout": timeout.String(),
	}).Expect(t, http.StatusOK).JSON(t, &c)
	return c
}

// CreateRequest is the body of POST /v1/delegations.
type CreateRequest struct {
	BusinessOperationID string `json:"business_operation_id"`
	OrgID               string `json:"org_id"`
	TaskClass           string `json:"task_class"`
	BudgetID            string `json:"budget_id"`
	Hold                struct {
		AmountMinor int64  `json:"amount_minor"`
		Currency    string `json:"currency"`
	} `json:"hold"`
	Remote struct {
		TaskID    string `json:"task_id"`
		ContextID string `json:"context_id,omitempty"`
	} `json:"remote"`
}

// NewCreateRequest builds a delegation request; the remote task id is
// derived from the operation id.
func NewCreateRequest(op, org, class, budget string, amount int64, currency string) CreateRequest {
	var c CreateRequest
	c.BusinessOperationID, c.OrgID, c.TaskClass, c.BudgetID = op, org, class, budget
	c.Hold.AmountMinor, c.Hold.Currency = amount, currency
	c.Remote.TaskID, c.Remote.ContextID = "task-"+op, "ctx-"+op
	return c
}

// CreateDelegation posts req with token, expects 201, and returns the delegation.
func (e *Env) CreateDelegation(t testing.TB, token string, req CreateRequest) httpapi.DelegationBody {
	t.Helper()
	var d httpapi.DelegationBody
	e.Do(t, http.MethodPost, "/v1/delegations", token, req).Expect(t, http.StatusCreated).JSON(t, &d)
	return d
}

// ReportStatus posts a task status (with a timestamp unless at is zero),
// expects 200, and returns the delegation.
func (e *Env) ReportStatus(t testing.TB, token, id, state string, at time.Time) httpapi.DelegationBody {
	t.Helper()
	body := map[string]any{"state": state}
	if !at.IsZero() {
		body["timestamp"] = at.Format(time.RFC3339Nano)
	}
	var d httpapi.DelegationBody
	e.Do(t, http.MethodPost, "/v1/delegations/"+id+"/task-status", token, body).Expect(t, http.StatusOK).JSON(t, &d)
	return d
}

// Delegation reads a delegation with token, expecting 200.
func (e *Env) Delegation(t testing.TB, token, id string) httpapi.DelegationBody {
	t.Helper()
	var d httpapi.DelegationBody
	e.Do(t, http.MethodGet, "/v1/delegations/"+id, token, nil).Expect(t, http.StatusOK).JSON(t, &d)
	return d
}

// Events lists a delegation's events through the API, expecting 200.
func (e *Env) Events(t testing.TB, token, id string) []ledger.EventRecord {
	t.Helper()
	var out struct {
		Events []ledger.EventRecord `json:"events"`
	}
	e.Do(t, http.MethodGet, "/v1/delegations/"+id+"/events", token, nil).Expect(t, http.StatusOK).JSON(t, &out)
	return out.Events
}
