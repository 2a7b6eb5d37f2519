package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2asrv"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/access"
	"github.com/quittance/quittance/ledger/webhook"
)

// ExtensionURI is the URI of Quittance's ledger extension: the data an
// orchestrator puts in message.metadata under it, and what Quittance
// answers under it in task.metadata (ledger/extension/v1/README.md).
const ExtensionURI = "https://quittance.dev/a2a/ledger/v1"

// The paths, below /a2a/orgs/{org}, of the card and the two bindings.
const (
	CardPath    = "/.well-known/agent-card.json"
	JSONRPCPath = "/jsonrpc"
	RESTPath    = "/rest"
)

// Config wires the gateway to the services dispatch mode runs on.
type Config struct {
	// Ledger creates and cancels delegations and reads them.
	Ledger *ledger.Service
	// Access authenticates each request's bearer token.
	Access *access.Service
	// Orchestrator serves task snapshots and the orgs an orchestrator
	// may delegate to.
	Orchestrator *delegate.Orchestrator
	// Webhooks stores and delivers the tasks' push notification configs
	// (push.go); nil answers them PushNotificationNotSupportedError.
	Webhooks *webhook.Service
	// CardClient fetches remote agent cards: the egress client every
	// outbound call goes through.
	CardClient *http.Client
	// PublicURL is the service's public base URL, used in the cards'
	// interfaces; empty: the base URL the request came to.
	PublicURL string
	// Streams are the API's event streams' caps and hubs: a task's stream
	// takes a slot of them and is woken by its delegation's events, and
	// reads the task every Streams.Poll() besides (QUITTANCE_STREAM_POLL).
	// Nil: streams are not capped and read the task every second.
	Streams *httpapi.EventStreams
	// CardTTL is how long a fetched remote card is reused (default 5m).
	CardTTL time.Duration
	// Log receives what the gateway logs; nil discards it.
	Log *slog.Logger
}

// Gateway is the A2A gateway's HTTP handler, served under /a2a/orgs/.
type Gateway struct {
	cfg     Config
	mux     *http.ServeMux
	jsonrpc http.Handler
	rest    http.Handler
	// restTenant serves the HTTP+JSON paths that start with a tenant
	// (/{tenant}/tasks/...), as a2a-go's REST client sends a request's
	// tenant.
	restTenant http.Handler
	cards      *cardCache
}

// New builds the gateway.
func New(cfg Config) *Gateway {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.CardTTL <= 0 {
		cfg.CardTTL = 5 * time.Minute
	}
	if cfg.CardClient == nil {
		cfg.CardClient = http.DefaultClient
	}
	g := &Gateway{cfg: cfg, cards: newCardCache(cfg.CardClient, cfg.CardTTL)}
	h := &handler{g: g}
	var opts []a2asrv.TransportOption
	if cfg.Streams != nil {
		// An idle stream (a canceled task waiting for its compensation) is
		// kept open through proxies as the event streams are.
		opts = append(opts, a2asrv.WithTransportKeepAlive(cfg.Streams.Heartbeat()))
	}
	g.jsonrpc = a2asrv.NewJSONRPCHandler(h, opts...)
	g.rest = a2asrv.NewRESTHandler(h, opts...)
	g.restTenant = a2asrv.NewTenantRESTHandler("/{*}", h, opts...)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /a2a/orgs/{org}"+CardPath, g.serveCard)
	mux.HandleFunc("/a2a/orgs/{org}"+JSONRPCPath, g.serveJSONRPC)
	mux.HandleFunc("/a2a/orgs/{org}"+RESTPath+"/", g.serveREST)
	g.mux = mux
	return g
}

// ServeHTTP implements http.Handler.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) { g.mux.ServeHTTP(w, r) }

// call is what every A2A call of a request runs as: the authenticated
// orchestrator, the org whose agent the path names, the A2A version the
// client speaks (webhook.PushV1 or PushV03: what a push config it
// registers is pushed in), and the bearer secret it authenticated with
// (what an open stream checks again).
type call struct {
	p       ledger.Principal
	org     string
	version string
	secret  string
}

type callKey struct{}

// withCall is r's context carrying the call of principal p, authenticated
// from r, in version.
func withCall(r *http.Request, p ledger.Principal, version string) context.Context {
	c := call{p: p, org: r.PathValue("org"), version: version, secret: httpapi.BearerSecret(r.Header.Get("Authorization"))}
	return context.WithValue(r.Context(), callKey{}, c)
}

// callOf is the call the request's context carries.
func callOf(ctx context.Context) (call, bool) {
	c, ok := ctx.Value(callKey{}).(call)
	return c, ok
}

// binding tells how a refusal before the SDK's handler is written.
type binding int

const (
	bindingCard binding = iota
	bindingJSONRPC
	bindingREST
)

// authenticate resolves the request's bearer token to an orchestrator;
// otherwise it writes the refusal (401, 403, or 503 while the credential
// cannot be checked) in the binding's shape and reports false.
func (g *Gateway) authenticate(w http.ResponseWriter, r *http.Request, b binding) (ledger.Principal, bool) {
	p, err := g.cfg.Access.Authenticate(r.Context(), httpapi.BearerSecret(r.Header.Get("Authorization")))
	switch {
	case err == nil && !p.Permits(ledger.ActionDelegate):
		err = ledger.ErrForbidden
	case err == nil:
		return p, true
	}
	// The API's one mapping decides the status (and logs what it does not
	// know); the binding's shape only names it.
	problem := httpapi.ProblemOf(r.Context(), g.cfg.Log, err)
	status, msg := problem.Status, problem.Detail
	code := map[int]string{http.StatusUnauthorized: "UNAUTHENTICATED", http.StatusForbidden: "UNAUTHORIZED",
		http.StatusServiceUnavailable: "UNAVAILABLE"}[status]
	if code == "" {
		code = "INTERNAL_ERROR"
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="quittance"`)
	}
	writeRefusal(w, b, status, code, msg)
	return ledger.Principal{}, false
}

// writeRefusal writes a refusal made before the SDK's handler: a JSON-RPC
// error object, a google.rpc.Status body (HTTP+JSON) or a problem (card).
func writeRefusal(w http.ResponseWriter, b binding, status int, reason, msg string) {
	info := map[string]any{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason, "domain": "a2a-protocol.org"}
	var body any
	switch b {
	case bindingJSONRPC:
		code := map[string]int{"UNAUTHENTICATED": -31401, "UNAUTHORIZED": -31403}[reason]
		if code == 0 {
			code = -32603
		}
		body = map[string]any{"jsonrpc": "2.0", "id": nil, "error": map[string]any{"code": code, "message": msg, "data": []any{info}}}
	case bindingREST:
		grpc := map[int]string{http.StatusUnauthorized: "UNAUTHENTICATED", http.StatusForbidden: "PERMISSION_DENIED", http.StatusNotFound: "NOT_FOUND"}[status]
		if grpc == "" {
			grpc = "UNAVAILABLE"
		}
		body = map[string]any{"error": map[string]any{"code": status, "status": grpc, "message": msg, "details": []any{info}}}
	default:
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]any{
			"type": "about:blank", "title": http.StatusText(status), "status": status, "code": strings.ToLower(reason), "detail": msg,
		})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// serveJSONRPC serves /a2a/orgs/{org}/jsonrpc with a2asrv's JSON-RPC
// binding, as the authenticated orchestrator.
func (g *Gateway) serveJSONRPC(w http.ResponseWriter, r *http.Request) {
	p, ok := g.authenticate(w, r, bindingJSONRPC)
	if !ok {
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBytes+1))
	if err != nil {
		return
	}
	if len(body) > maxRequestBytes {
		writeRPCError(w, nil, -32600, "the request is larger than 2 MiB")
		return
	}
	var head struct {
		Method string `json:"method"`
		ID     any    `json:"id"`
	}
	_ = json.Unmarshal(body, &head)
	if isV03Method(head.Method) {
		// An A2A 0.3 method (message/send, …): the 0.3 face (v03.go).
		g.serveV03(w, r, p, body)
		return
	}
	if v := r.Header.Get("A2A-Version"); v != "" && v != "1" && !strings.HasPrefix(v, "1.") {
		// A 1.0 method under another version: 1.0's
		// VersionNotSupportedError rather than MethodNotFound, so it says
		// why.
		writeRPCError(w, head.ID, -32009, "A2A-Version "+v+" is not served with A2A 1.0's methods: "+
			"this agent serves A2A 1.0 (JSON-RPC and HTTP+JSON) and A2A 0.3's JSON-RPC methods (message/send, …)")
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	ctx := withCall(r, p, webhook.PushV1)
	g.jsonrpc.ServeHTTP(w, r.WithContext(ctx))
}

// maxRequestBytes bounds a JSON-RPC request (a dispatched message is at
// most 256 KiB).
const maxRequestBytes = 2 << 20

// writeRPCError writes a JSON-RPC error object (HTTP 200, as a2asrv does).
func writeRPCError(w http.ResponseWriter, id any, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": msg}})
}

// serveREST serves /a2a/orgs/{org}/rest/... with a2asrv's HTTP+JSON
// binding, the prefix stripped, as the authenticated orchestrator.
func (g *Gateway) serveREST(w http.ResponseWriter, r *http.Request) {
	p, ok := g.authenticate(w, r, bindingREST)
	if !ok {
		return
	}
	org := r.PathValue("org")
	prefix := "/a2a/orgs/" + org + RESTPath
	r2 := r.WithContext(withCall(r, p, webhook.PushV1))
	u := *r.URL
	u.Path, u.RawPath = strings.TrimPrefix(r.URL.Path, prefix), ""
	r2.URL = &u
	r2 = withListQuery(r2, u.Path)
	first, _, _ := strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
	if first == "tasks" || first == "extendedAgentCard" || strings.HasPrefix(first, "message:") {
		g.rest.ServeHTTP(w, r2)
		return
	}
	g.restTenant.ServeHTTP(w, r2)
}

// baseURL is the public base URL the card's interfaces are under.
func (g *Gateway) baseURL(r *http.Request) string {
	if g.cfg.PublicURL != "" {
		return strings.TrimRight(g.cfg.PublicURL, "/")
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return (&url.URL{Scheme: scheme, Host: r.Host}).String()
}
