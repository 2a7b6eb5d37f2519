package telemetry

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"path"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// TraceContext is the W3C Trace Context propagator (traceparent and
// tracestate headers) used for inbound and outbound requests.
var TraceContext propagation.TextMapPropagator = propagation.TraceContext{}

// A2A outcomes, the outcome label of quittance_a2a_request_duration_seconds.
const (
	A2AOutcomeOK          = "ok"
	A2AOutcomeClientError = "client_error"
	A2AOutcomeServerError = "server_error"
	A2AOutcomeTimeout     = "timeout"
	A2AOutcomeError       = "error"
)

// a2aOutcomes are the outcome label values.
var a2aOutcomes = []string{A2AOutcomeOK, A2AOutcomeClientError, A2AOutcomeServerError, A2AOutcomeTimeout, A2AOutcomeError}

// calledA2AMethods are the method label values of the calls Quittance
// makes (delegate/a2a's v1.0 and v0.3 wire encodings, and agent card
// fetches): their histograms exist from start-up, so rate() counts the first
// call after a replica starts. TestCalledA2AMethodsStartAtZero drives every
// a2a.Client method in both versions and fails when one is missing here.
var calledA2AMethods = []string{
	"agent_card",
	"SendMessage", "GetTask", "ListTasks", "CancelTask", "SubscribeToTask", "CreateTaskPushNotificationConfig",
	"message/send", "tasks/get", "tasks/list", "tasks/cancel", "tasks/resubscribe", "tasks/pushNotificationConfig/set",
}

// a2aMethods are the method label values: the JSON-RPC methods of A2A v1.0
// and v0.3. Anything else is "other", so a remote cannot grow the label set.
var a2aMethods = map[string]bool{
	"SendMessage": true, "SendStreamingMessage": true, "GetTask": true, "CancelTask": true,
	"SubscribeToTask": true, "SetTaskPushNotificationConfig": true, "GetTaskPushNotificationConfig": true,
	"CreateTaskPushNotificationConfig": true, "ListTasks": true, "GetExtendedAgentCard": true,
	"message/send": true, "message/stream": true, "tasks/get": true, "tasks/list": true, "tasks/cancel": true,
	"tasks/resubscribe": true, "tasks/pushNotificationConfig/set": true, "tasks/pushNotificationConfig/get": true,
	"agent/getAuthenticatedExtendedCard": true,
}

// Transport wraps base (nil: http.DefaultTransport) for outbound A2A calls:
// it records quittance_a2a_request_duration_seconds and sends a W3C
// traceparent header through otelhttp, continuing the trace of the request's
// context (an inbound API request's, see ExtractTrace) or starting one.
// m may be nil.
func Transport(base http.RoundTripper, m *Metrics) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	inner := otelhttp.NewTransport(base,
		otelhttp.WithPropagators(TraceContext),
		otelhttp.WithTracerProvider(tracenoop.NewTracerProvider()),
		otelhttp.WithMeterProvider(noop.NewMeterProvider()),
	)
	return &a2aTransport{inner: inner, base: base, metrics: m}
}

type a2aTransport struct {
	inner   http.RoundTripper
	base    http.RoundTripper
	metrics *Metrics
}

// RoundTrip implements http.RoundTripper.
func (t *a2aTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	method := a2aMethod(req)
	ctx := trace.ContextWithSpanContext(req.Context(), childSpan(trace.SpanContextFromContext(req.Context())))
	start := time.Now()
	resp, err := t.inner.RoundTrip(req.WithContext(ctx))
	t.metrics.ObserveA2A(method, a2aOutcome(resp, err), time.Since(start))
	return resp, err
}

// Unwrap returns the wrapped transport: A2A's gRPC binding dials through
// the egress transport beneath (delegate/a2a, grpc.go), unmeasured here.
func (t *a2aTransport) Unwrap() http.RoundTripper { return t.base }

// CloseIdleConnections closes the idle connections of the wrapped transport.
func (t *a2aTransport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

func a2aOutcome(resp *http.Response, err error) string {
	switch {
	case err != nil && (errors.Is(err, context.DeadlineExceeded) || isTimeout(err)):
		return A2AOutcomeTimeout
	case err != nil:
		return A2AOutcomeError
	case resp.StatusCode >= 500:
		return A2AOutcomeServerError
	case resp.StatusCode >= 400:
		return A2AOutcomeClientError
	}
	return A2AOutcomeOK
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// maxPeek bounds how much of a request body is read to find its method.
const maxPeek = 1 << 20

// a2aMethod names the call: the JSON-RPC "method" of a replayable body, or
// agent_card for GETs of an agent card.
func a2aMethod(req *http.Request) string {
	if req.Method == http.MethodGet && (strings.Contains(req.URL.Path, "agent-card") || strings.HasSuffix(req.URL.Path, "agent.json")) {
		return "agent_card"
	}
	if m, ok := restMethod(req); ok {
		return m
	}
	if req.Method == http.MethodGet {
		return "other"
	}
	if req.GetBody == nil {
		return "other"
	}
	body, err := req.GetBody()
	if err != nil {
		return "other"
	}
	defer body.Close()
	b, _ := io.ReadAll(io.LimitReader(body, maxPeek))
	var rpc struct {
		Method string `json:"method"`
	}
	if json.NewDecoder(bytes.NewReader(b)).Decode(&rpc) != nil {
		return "other"
	}
	return knownMethod(rpc.Method)
}

// restMethod names an A2A v1.0 HTTP+JSON call by its method and the end of
// its path (a2a.proto's HTTP mapping), under the JSON-RPC method's name.
func restMethod(req *http.Request) (string, bool) {
	p := req.URL.Path
	parent := path.Base(path.Dir(p))
	switch req.Method {
	case http.MethodPost:
		switch {
		case strings.HasSuffix(p, "/message:send"):
			return "SendMessage", true
		case strings.HasSuffix(p, "/message:stream"):
			return "SendStreamingMessage", true
		case parent == "tasks" && strings.HasSuffix(p, ":cancel"):
			return "CancelTask", true
		case parent == "tasks" && strings.HasSuffix(p, ":subscribe"):
			return "SubscribeToTask", true
		case strings.HasSuffix(p, "/pushNotificationConfigs") && path.Base(path.Dir(path.Dir(p))) == "tasks":
			return "CreateTaskPushNotificationConfig", true
		}
	case http.MethodGet:
		switch {
		case strings.HasSuffix(p, "/tasks"):
			return "ListTasks", true
		case parent == "tasks":
			return "GetTask", true
		}
	}
	return "", false
}

func knownMethod(m string) string {
	if a2aMethods[m] {
		return m
	}
	return "other"
}

// childSpan returns a new span context in parent's trace, or in a new trace
// when parent is invalid, so every outbound call carries a traceparent with
// its own span id.
func childSpan(parent trace.SpanContext) trace.SpanContext {
	cfg := trace.SpanContextConfig{TraceFlags: trace.FlagsSampled}
	if parent.IsValid() {
		cfg.TraceID, cfg.TraceFlags, cfg.TraceState = parent.TraceID(), parent.TraceFlags(), parent.TraceState()
	} else {
		_, _ = rand.Read(cfg.TraceID[:])
	}
	_, _ = rand.Read(cfg.SpanID[:])
	return trace.NewSpanContext(cfg)
}

// ExtractTrace returns ctx carrying the trace context of an inbound
// request's traceparent header, if it has a valid one, so outbound calls
// made while serving it continue the caller's trace.
func ExtractTrace(ctx context.Context, h http.Header) context.Context {
	return TraceContext.Extract(ctx, propagation.HeaderCarrier(h))
}

// TraceID is the trace id of ctx, or "" when it has none.
func TraceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return sc.TraceID().String()
}
