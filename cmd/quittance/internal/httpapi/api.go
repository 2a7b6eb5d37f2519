package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"strings"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/quittance/quittance/cmd/quittance/internal/ratelimit"
	"github.com/quittance/quittance/cmd/quittance/internal/telemetry"
	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/access"
	"github.com/quittance/quittance/ledger/audit"
	"github.com/quittance/quittance/ledger/report"
	"github.com/quittance/quittance/ledger/webhook"
)

// Config wires the API to the domain services.
type Config struct {
	Ledger *ledger.Service
	// Access authenticates every request and serves principals,
	// credentials and pending changes.
	Access *access.Service
	// Ready reports whether the service can serve: database reachable and migrated.
	Ready func(context.Context) error
	Log   *slog.Logger
	// Version is reported in the OpenAPI document.
	Version string
	// Compensation serves signed acks and declarations, the sweep, identity
	// revocation and write-offs; their operations are registered only when
	// it is set.
	Compensation *compensation.Service
	// Reports serves reconciliation (obligations, summary, anomalies,
	// evidence); those operations are registered only when it is set.
	Reports *report.Reports
	// LedgerID is this ledger's id, the audience of signed tokens; the
	// evidence endpoint reports it so tokens can be re-verified.
	LedgerID string
	// Metrics records request durations; nil records nothing.
	Metrics *telemetry.Metrics
	// Limiter is the rate limiter (RateLimit), shared with the console;
	// nil limits nothing.
	Limiter *ratelimit.Limiter
	// Push receives A2A push notifications at /a2a/push/{delegation_id};
	// the endpoint is served only when it is set.
	Push PushReceiver
	// Orchestrator continues interrupted tasks and serves task snapshots;
	// those operations are registered only when it is set.
	Orchestrator Orchestrator
	// Feed serves the replayable event streams; they are served only when
	// it is set.
	Feed report.Feed
	// Stream tunes the event streams.
	Stream StreamConfig
	// Streams are the event streams' caps and shared reads, when they are
	// shared with the A2A gateway's task streams (app builds them once from
	// Stream); nil: the API builds its own from Stream.
	Streams *EventStreams
	// Webhooks manages webhook endpoints and deliveries; those operations
	// are registered only when it is set.
	Webhooks *webhook.Service
	// JWKS returns the ledger's public JWK Set, served at
	// /.well-known/jwks.json when set.
	JWKS func() []byte
	// Cases serves case handling (owners, notes, snoozes) and the
	// needs-action queue; those operations are registered only when it is
	// set.
	Cases *report.Cases
	// Checkpoints signs and serves checkpoints over the event streams'
	// heads; those operations are registered only when it is set.
	Checkpoints *audit.Checkpoints
	// Gateway is the A2A gateway (cmd/quittance/internal/gateway), served
	// under GatewayPrefix behind the API's middleware when set.
	Gateway http.Handler
}

// GatewayPrefix is the path under which the A2A gateway is served.
const GatewayPrefix = "/a2a/orgs/"

// Server is the HTTP API.
type Server struct {
	ledger *ledger.Service
	access *access.Service
	ready  func(context.Context) error
	log    *slog.Logger
	api    huma.API
	mux    *http.ServeMux

	// compensation is nil when the compensation operations are not served.
	compensation *compensation.Service

	// reports is nil when the reconciliation operations are not served.
	reports  *report.Reports
	ledgerID string
	metrics  *telemetry.Metrics
	limiter  *ratelimit.Limiter
	handler  http.Handler

	// push is nil when the A2A push receiver is not served.
	push PushReceiver

	orchestrator Orchestrator
	feed         report.Feed
	stream       StreamConfig
	streamLimits *streamLimits
	streamHubs   *streamHubs
	webhooks     *webhook.Service
	jwks         func() []byte
	cases        *report.Cases
	checkpoints  *audit.Checkpoints
}

// bearerAuth is the security requirement of every authenticated operation.
var bearerAuth = []map[string][]string{{"bearer": {}}}

// New builds the API's handler.
func New(cfg Config) *Server {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	hc := huma.DefaultConfig("Quittance", cfg.Version)
	hc.Info.Description = "A delegator-side ledger for work delegated to other organizations' agents over A2A."
	hc.CreateHooks = nil // no $schema links in bodies
	hc.DocsPath = ""
	hc.Components.SecuritySchemes = map[string]*huma.SecurityScheme{
		"bearer": {Type: "http", Scheme: "bearer", Description: "An API token (roles: orchestrator, finance, oncall)."},
	}
	s := &Server{ledger: cfg.Ledger, access: cfg.Access, ready: cfg.Ready, log: cfg.Log, mux: mux}
	s.compensation = cfg.Compensation
	s.push = cfg.Push
	streams := cfg.Streams
	if streams == nil {
		streams = NewEventStreams(cfg.Feed, cfg.Stream, cfg.Log, cfg.Metrics)
	}
	s.orchestrator, s.feed, s.stream, s.webhooks, s.jwks = cfg.Orchestrator, cfg.Feed, streams.cfg, cfg.Webhooks, cfg.JWKS
	s.reports, s.ledgerID, s.metrics = cfg.Reports, cfg.LedgerID, cfg.Metrics
	s.limiter = cfg.Limiter
	s.streamLimits, s.streamHubs = streams.limits, streams.hubs
	s.api = humago.New(mux, hc)
	s.api.UseMiddleware(s.authenticate)
	s.registerHealth()
	s.registerDelegations()
	s.registerAdmin()
	s.registerOrgKeys()
	s.registerWriteOffThreshold()
	s.registerCompensation()
	s.registerBatch()
	s.registerCompensationRedrive()
	s.registerDispatchResolve()
	s.registerExtraTaskWriteOff()
	s.registerExtraTaskRedrive()
	s.registerReporting()
	s.registerEvidencePack()
	s.registerRevokedReleases()
	s.registerPush()
	s.registerOrchestrator()
	s.registerStreams()
	s.registerWebhooks()
	s.registerJWKS()
	s.cases = cfg.Cases
	s.registerCases()
	s.checkpoints = cfg.Checkpoints
	s.registerCheckpoints()
	if cfg.Gateway != nil {
		mux.Handle(GatewayPrefix, cfg.Gateway)
	}
	s.handler = s.middleware(s.routeStreams(mux))
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// API exposes the huma API, for the OpenAPI document.
func (s *Server) API() huma.API { return s.api }

type principalKey struct{}

// bootstrapOperation marks, in an operation's Metadata, the one operation
// the bootstrap credential may call outside dev (creating the first two
// on-call principals); access.Service.Authenticate refuses it everywhere
// else.
const bootstrapOperation = "bootstrap"

// authenticate resolves the bearer token of operations that declare
// security and refuses the request with 401 if it is missing or invalid.
func (s *Server) authenticate(ctx huma.Context, next func(huma.Context)) {
	if len(ctx.Operation().Security) == 0 {
		next(ctx)
		return
	}
	authenticate := s.access.Authenticate
	if ctx.Operation().Metadata[bootstrapOperation] == true {
		authenticate = s.access.AuthenticateBootstrap
	}
	p, err := authenticate(ctx.Context(), BearerSecret(ctx.Header("Authorization")))
	if err != nil {
		s.writeProblem(ctx, problemFor(ctx.Context(), s.log, err))
		return
	}
	if !s.chargePrincipal(ctx.Context(), p, ctx.SetHeader, func(pr *Problem) { s.writeProblem(ctx, pr) }) {
		return
	}
	next(huma.WithValue(ctx, principalKey{}, p))
}

// BearerSecret is the token of an "Authorization: Bearer <token>" header
// value; empty for any other scheme or none. The A2A gateway reads its
// callers' tokens with it too.
func BearerSecret(header string) string {
	scheme, secret, _ := strings.Cut(header, " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(secret)
}

func (s *Server) writeProblem(ctx huma.Context, err error) {
	p := err.(*Problem)
	if p.Status == http.StatusUnauthorized {
		ctx.SetHeader("WWW-Authenticate", `Bearer realm="`+apiRealm+`"`)
	}
	for k, vs := range p.GetHeaders() {
		for _, v := range vs {
			ctx.AppendHeader(k, v) // Retry-After of a 503, as huma sends it for a handler's problem
		}
	}
	ctx.SetHeader("Content-Type", "application/problem+json")
	ctx.SetStatus(p.Status)
	_ = jsonEncode(ctx.BodyWriter(), p)
}

// principal is the caller of an authenticated operation.
func principal(ctx context.Context) ledger.Principal {
	p, _ := ctx.Value(principalKey{}).(ledger.Principal)
	return p
}

// fail maps a domain error to its problem.
func (s *Server) fail(ctx context.Context, err error) error { return problemFor(ctx, s.log, err) }

// registerHealth is the route table of the liveness and readiness probes.
func (s *Server) registerHealth() {
	huma.Register(s.api, huma.Operation{
		OperationID: "healthz", Method: http.MethodGet, Path: "/healthz", Tags: []string{"health"},
		Summary: "Liveness: the process is up",
	}, s.healthz)
	huma.Register(s.api, huma.Operation{
		OperationID: "readyz", Method: http.MethodGet, Path: "/readyz", Tags: []string{"health"},
		Summary: "Readiness: the database is reachable and fully migrated",
	}, s.readyz)
}

type healthOutput struct {
	Body struct {
		Status string `json:"status" example:"ok"`
	}
}

// healthz serves GET /healthz: liveness: the process is up.
func (s *Server) healthz(ctx context.Context, _ *struct{}) (*healthOutput, error) {
	out := &healthOutput{}
	out.Body.Status = "ok"
	return out, nil
}

// readyz serves GET /readyz: readiness: the database is reachable and fully
// migrated.
func (s *Server) readyz(ctx context.Context, _ *struct{}) (*healthOutput, error) {
	if err := s.ready(ctx); err != nil {
		s.log.WarnContext(ctx, "not ready", slog.Any("error", err))
		return nil, newProblem(http.StatusServiceUnavailable, "not_ready", "the database is unreachable or not migrated")
	}
	out := &healthOutput{}
	out.Body.Status = "ready"
	return out, nil
}

// bodies maps each of xs to its API body, keeping the order. It returns an
// empty, never nil, slice for no xs, so a list encodes as [] and not null.
func bodies[T, B any](xs []T, body func(T) B) []B {
	out := make([]B, len(xs))
	for i, x := range xs {
		out[i] = body(x)
	}
	return out
}

// queryFilter parses a list's optional query filter: raw equal to none
// (the value that means every item) is the zero F, no filter; anything
// else parse must accept, or it is a 422 on field saying want.
func queryFilter[F any](raw, none string, parse func(string) (F, error), field, want string) (F, error) {
	var f F
	if raw == none {
		return f, nil
	}
	f, err := parse(raw)
	if err != nil {
		return f, ledger.Invalid(field, "%s", want)
	}
	return f, nil
}
