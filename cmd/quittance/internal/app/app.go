package app

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quittance/quittance/cmd/quittance/internal/console"
	"github.com/quittance/quittance/cmd/quittance/internal/gateway"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/ratelimit"
	"github.com/quittance/quittance/cmd/quittance/internal/telemetry"
	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/delegate/egress"
	"github.com/quittance/quittance/internal/jose"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/access"
	"github.com/quittance/quittance/ledger/audit"
	"github.com/quittance/quittance/ledger/report"
	"github.com/quittance/quittance/ledger/webhook"
	"github.com/quittance/quittance/sql/pgstore"
)

// Config says what to build Quittance on and how to tune it. Zero values
// take each service's defaults.
type Config struct {
	// Pool is the migrated database everything runs on.
	Pool *pgxpool.Pool
	// ReadPool, when set, is a standby of Pool that serves the reads that
	// tolerate lag (pgstore.Reads); nil serves every read from Pool.
	ReadPool *pgxpool.Pool
	// Registry receives the metrics (never Prometheus's global registry):
	// the API's, the A2A calls', commits, and the scrape-time collector.
	Registry *prometheus.Registry
	// Log receives operational logs; they are discarded when nil.
	Log *slog.Logger
	// Clock tells every service the time; the system clock when nil.
	Clock ledger.Clock
	// LedgerID is this ledger's id, the audience of signed tokens.
	LedgerID string
	// Version is the build's version, reported in the OpenAPI document.
	Version string
	// Identity, when set, signs outbound compensation requests, and its JWK
	// Set is served at /.well-known/jwks.json.
	Identity *jose.Identity
	// WriteOffApprovalThresholdMinor is the amount above which a write-off
	// needs a second on-call approver (the compensation service's default
	// when zero).
	WriteOffApprovalThresholdMinor int64
	// WriteOffApprovalThresholdsMinor are thresholds of their own for some
	// currencies (ISO 4217 code to minor units).
	WriteOffApprovalThresholdsMinor map[string]int64
	// Egress says where every outbound call (A2A, webhook deliveries) may
	// go, and so which agent endpoints and webhook URLs may be registered.
	Egress egress.Policy
	// AgentRegistrationEgress, when set, is the policy agent endpoints are
	// checked against when an admin registers them, instead of Egress. Tests
	// use it to register an agent that the worker must then refuse to dial.
	AgentRegistrationEgress *egress.Policy
	// A2A tunes the outbox worker: PublicURL, intervals, lease, backoff,
	// attempts, streaming, snapshot limits. New sets its Store,
	// Compensation, HTTPClient, Clock, Log, LedgerID and Identity.
	A2A delegate.Config
	// WrapA2ATransport, when set, wraps the A2A client's transport: tests
	// put a remote that misbehaves below HTTP behind it.
	WrapA2ATransport func(http.RoundTripper) http.RoundTripper
	// Webhooks tunes webhook deliveries: attempts, backoff, interval,
	// lease, timeout. New sets its Store, Clock, Log, ValidateURL,
	// HTTPClient and Wake.
	Webhooks webhook.Config
	// RateLimit is the rate limit of the API and the console, per principal
	// and per client address; zero disables it.
	RateLimit httpapi.RateLimit
	// Stream tunes the API's event streams; closing its Done ends them.
	Stream httpapi.StreamConfig
	// WriteBatchMax, WriteQueueMax and WriteFlushers tune the write
	// coalescer (pgstore.Coalescing; pgstore.DefaultCoalescing's where
	// zero).
	WriteBatchMax, WriteQueueMax, WriteFlushers int
	// Dev makes the bootstrap credential's privileged changes take effect
	// at once (quittance dev), so one developer can try everything alone.
	Dev bool
	// PersonCredentialTTL is how long a person's credential lasts unless it
	// is issued with its own expiry (the ledger's default when zero).
	PersonCredentialTTL time.Duration
	// PersonCredentialMaxTTL is the longest a person's credential may be
	// issued for (the ledger's default when zero).
	PersonCredentialMaxTTL time.Duration
	// PendingChangeTTL is how long a privileged change waits for its second
	// on-call approver (the ledger's default when zero).
	PendingChangeTTL time.Duration
	// OrgJWKSUnknownKidInterval rate-limits fetches of an org's JWKS URL
	// for tokens naming an unknown kid (the ledger's default when zero).
	OrgJWKSUnknownKidInterval time.Duration
	// EvidenceRefusalTime is how long after it arrived a posted token
	// refused without a reason told is answered (compensation.Config.RefusalTime;
	// zero answers at once).
	EvidenceRefusalTime time.Duration
	// Console tunes the web console.
	Console ConsoleConfig
	// UnconfirmedAlertGrace is exported for the alert rules: how long an
	// obligation may stay compensation_unconfirmed before on-call is paged
	// (DefaultUnconfirmedAlertGrace when zero).
	UnconfirmedAlertGrace time.Duration
	// CheckpointInterval is exported for the alert rules: how often the
	// caller runs Checkpoints (zero: it runs none).
	CheckpointInterval time.Duration
}

// DefaultUnconfirmedAlertGrace is the unconfirmed alert's grace when none is
// configured.
const DefaultUnconfirmedAlertGrace = 15 * time.Minute

// App is Quittance built: every part, so that the caller can run the
// background loops it wants and serve API.
type App struct {
	// Store is the PostgreSQL store every service runs on.
	Store *pgstore.Store
	// Reads routes the reads that tolerate lag to Config.ReadPool.
	Reads *pgstore.Reads
	// Metrics records to Config.Registry.
	Metrics *telemetry.Metrics
	// Ledger records delegations, budgets, orgs and task classes.
	Ledger *ledger.Service
	// Access authenticates, and serves principals, credentials, OpenID
	// Connect identities and pending changes; run its background work
	// (the authentication cache, expiries) with Access.Run.
	Access *access.Service
	// Compensation takes evidence, runs the deadline sweep and write-offs.
	Compensation *compensation.Service
	// Reports serves reconciliation.
	Reports *report.Reports
	// Worker makes the outbound A2A calls; run it with Worker.Run.
	Worker *delegate.Worker
	// Orchestrator continues interrupted tasks and serves task snapshots.
	Orchestrator *delegate.Orchestrator
	// Webhooks manages webhook endpoints; run deliveries with Webhooks.Run.
	Webhooks *webhook.Service
	// API is the HTTP API over all of them.
	API http.Handler
	// Cases is case handling on obligations (owners, notes, snoozes) and
	// the needs-action queue.
	Cases *report.Cases
	// Console is the web console, to be served under console.Prefix.
	Console *console.Console
	// Checkpoints signs incremental checkpoints over the stream heads that
	// moved with the ledger's Identity; run the periodic ones with
	// Checkpoints.Run.
	Checkpoints *audit.Checkpoints
}

// New builds Quittance on cfg.Pool. Nothing runs until the caller runs it.
func New(cfg Config) *App {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	metrics := telemetry.New(cfg.Registry)
	grace := cfg.UnconfirmedAlertGrace
	if grace == 0 {
		grace = DefaultUnconfirmedAlertGrace
	}
	telemetry.RegisterAlertSettings(cfg.Registry, grace, cfg.CheckpointInterval)
	writes := pgstore.Coalescing{
		MaxBatch: cfg.WriteBatchMax, MaxQueue: cfg.WriteQueueMax, Flushers: cfg.WriteFlushers,
		ObserveBatch: metrics.ObserveWriteBatch, Refused: metrics.WriteQueueFull,
	}
	store := pgstore.New(cfg.Pool, pgstore.WithAfterCommit(metrics.ObserveCommitted), pgstore.WithCoalescing(writes))
	cfg.Registry.MustRegister(pgstore.NewCollector(store, pgstore.WithCollectorLog(log)))

	readMetrics := telemetry.NewReadMetrics(cfg.Registry, pgstore.ReadFallbackReasons)
	reads := pgstore.NewReads(store, cfg.ReadPool, pgstore.ReadObserver{Fallback: readMetrics.Fallback, Lag: readMetrics.Lag})

	a := &App{Store: store, Reads: reads, Metrics: metrics}
	a.buildDomain(cfg, log)
	a.buildWorkers(cfg, log)
	a.buildHandlers(cfg, log)
	return a
}

// buildDomain builds the ledger, compensation, reports and cases services
// on a.Store.
func (a *App) buildDomain(cfg Config, log *slog.Logger) {
	store, metrics := a.Store, a.Metrics
	registration := cfg.Egress
	if cfg.AgentRegistrationEgress != nil {
		registration = *cfg.AgentRegistrationEgress
	}
	a.Ledger = ledger.NewService(ledger.Config{
		Store: store, Clock: cfg.Clock,
		ValidateJWKS: func(raw []byte) error { _, err := jose.ParseOrgJWKS(raw); return err },
		ValidateAgentEndpoint: func(cardURL string, allowedHosts []string) error {
			return delegate.ValidateAgentEndpoint(registration, cardURL, allowedHosts)
		},
		ValidateDispatchMessage: delegate.ValidateDispatchMessage,
		Dev:                     cfg.Dev, PendingChangeTTL: cfg.PendingChangeTTL,
		WriteOffApprovalThresholdMinor:  cfg.WriteOffApprovalThresholdMinor,
		WriteOffApprovalThresholdsMinor: cfg.WriteOffApprovalThresholdsMinor,
		// Orgs' JWKS URLs are fetched through the egress policy, as every
		// other outbound call, on a client of their own.
		FetchJWKS: jose.NewJWKSFetcher(egress.NewClient(cfg.Egress)), ValidateJWKSURL: registration.ValidateURL,
		OrgJWKSUnknownKidInterval: cfg.OrgJWKSUnknownKidInterval, ObserveOrgJWKSFetch: metrics.OrgJWKSFetch,
		Log: log.With(slog.String("component", "org_jwks")),
	})
	a.Access = access.NewService(access.Config{
		Store: store.Principals(), Ledger: a.Ledger, Clock: cfg.Clock, Dev: cfg.Dev,
		PersonCredentialTTL: cfg.PersonCredentialTTL, PersonCredentialMaxTTL: cfg.PersonCredentialMaxTTL,
	})
	a.Compensation = compensation.NewService(compensation.Config{
		Store: store.Compensation(), Clock: cfg.Clock, Log: log, LedgerID: cfg.LedgerID,
		WriteOffApprovalThresholdMinor: cfg.WriteOffApprovalThresholdMinor, WriteOffApprovalThresholdsMinor: cfg.WriteOffApprovalThresholdsMinor,
		Dev: cfg.Dev, OnRefusal: metrics.TokenRefused,
		RefreshOrgKeysForKid: a.Ledger.RefreshOrgKeysForKid, RefusalTime: cfg.EvidenceRefusalTime,
	})
	a.Reports = report.NewReports(report.ReportsConfig{Store: a.Reads.Reports(), Reader: store, Clock: cfg.Clock})
	a.Cases = report.NewCases(report.CasesConfig{Store: a.Reads.Cases(), Clock: cfg.Clock})
}

// buildWorkers builds what calls out: the A2A worker and the orchestrator
// over it, and the webhook deliveries.
func (a *App) buildWorkers(cfg Config, log *slog.Logger) {
	store, metrics := a.Store, a.Metrics
	// Every A2A call goes through one SSRF-safe client, timed and carrying
	// a W3C traceparent.
	a2aClient := egress.NewClient(cfg.Egress)
	a2aClient.Transport = telemetry.Transport(a2aClient.Transport, metrics)
	if cfg.WrapA2ATransport != nil {
		a2aClient.Transport = cfg.WrapA2ATransport(a2aClient.Transport)
	}
	workerCfg := cfg.A2A
	workerCfg.Store, workerCfg.Compensation, workerCfg.HTTPClient = store.A2A(), a.Compensation, a2aClient
	workerCfg.Clock, workerCfg.Log = cfg.Clock, log.With(slog.String("component", "a2a"))
	workerCfg.LedgerID, workerCfg.Identity = cfg.LedgerID, cfg.Identity
	workerCfg.RefreshOrgKeysForKid = a.Ledger.RefreshOrgKeysForKid
	workerCfg.ObserveAgentCard = a.Ledger.ObserveAgentCard
	// A card signature's jku, where an org allows its host, is fetched
	// through the egress policy as orgs' JWKS URLs are.
	workerCfg.FetchJWKS = jose.NewJWKSFetcher(egress.NewClient(cfg.Egress))
	workerCfg.OnPanic = metrics.Panic
	a.Worker = delegate.NewWorker(workerCfg)
	a.Orchestrator = delegate.NewOrchestrator(delegate.OrchestratorConfig{
		Store: store.Orchestrator(), Clock: cfg.Clock, Wake: a.Worker.Wake, FetchTask: a.Worker.FetchTask,
	})

	// Webhook deliveries are outbox rows written with their events, sent
	// through the same egress policy as A2A calls (on a client of their own,
	// outside the A2A call metrics).
	webhookCfg := cfg.Webhooks
	webhookCfg.Store, webhookCfg.Clock, webhookCfg.Log = store.Webhooks(), cfg.Clock, log.With(slog.String("component", "webhooks"))
	webhookCfg.ValidateURL, webhookCfg.HTTPClient, webhookCfg.Wake = cfg.Egress.ValidateURL, egress.NewClient(cfg.Egress), store.WebhookWake
	webhookCfg.OnPanic = metrics.Panic
	// Pushes to the A2A gateway's push configs are webhook deliveries too:
	// the gateway renders what they carry, its task.
	webhookCfg.Push = gateway.NewPushRenderer(a.Ledger, a.Orchestrator, log.With(slog.String("component", "gateway")))
	a.Webhooks = webhook.NewService(webhookCfg)
}

// buildHandlers builds the checkpoint signer and what serves HTTP: the
// API and the console, behind one rate limiter.
func (a *App) buildHandlers(cfg Config, log *slog.Logger) {
	store, metrics := a.Store, a.Metrics
	var (
		jwks   func() []byte
		signer audit.CheckpointSigner // stays a nil interface without an identity
	)
	if cfg.Identity != nil {
		jwks, signer = cfg.Identity.JWKS, compensation.CheckpointSigner{Identity: cfg.Identity}
	}
	a.Checkpoints = audit.NewCheckpoints(store, signer, cfg.LedgerID, cfg.Clock, log.With(slog.String("component", "checkpoints")))
	// One limiter for the API and the console: one set of buckets, one rule.
	limiter := ratelimit.New(cfg.RateLimit, log.With(slog.String("component", "ratelimit")), time.Now)
	// The A2A gateway fronts each org's agent for orchestrators; remote
	// agent cards are fetched through the egress policy, on a client of
	// their own.
	// Its task streams count against the event streams' caps and are woken
	// by the same hubs: one set for both.
	streams := httpapi.NewEventStreams(store, cfg.Stream, log, metrics)
	gw := gateway.New(gateway.Config{
		Ledger: a.Ledger, Access: a.Access, Orchestrator: a.Orchestrator, Webhooks: a.Webhooks, CardClient: egress.NewClient(cfg.Egress),
		PublicURL: cfg.A2A.PublicURL, Streams: streams, Log: log.With(slog.String("component", "gateway")),
	})
	a.API = httpapi.New(httpapi.Config{
		Ledger: a.Ledger, Access: a.Access, Compensation: a.Compensation, Reports: a.Reports, Feed: store, Ready: store.Ping,
		Push: a.Worker, Orchestrator: a.Orchestrator, Webhooks: a.Webhooks, JWKS: jwks,
		Log: log, Version: cfg.Version, LedgerID: cfg.LedgerID, Metrics: metrics,
		Limiter: limiter, Stream: cfg.Stream, Streams: streams, Cases: a.Cases, Checkpoints: a.Checkpoints, Gateway: gw,
	})
	a.Console = newConsole(cfg, a, log, limiter)
}
