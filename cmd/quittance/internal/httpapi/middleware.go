package httpapi

import (
	"context"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/quittance/quittance/cmd/quittance/internal/ratelimit"
	"github.com/quittance/quittance/cmd/quittance/internal/telemetry"
	"github.com/quittance/quittance/ledger"
)

// RateLimit configures the rate limits (ratelimit.Config): one bucket per
// authenticated principal, and one per client address for every request
// that is not known, without a database lookup, to be a principal's:
// requests without a bearer token, public endpoints, and bearer tokens not
// in the authentication cache. Such a request holds a token of its
// address's bucket; the token is spent unless its bearer token proves to
// be a principal's, so an unknown bearer token costs at most one database
// lookup per token of its address's bucket, however many different tokens
// it tries. The health probes and /metrics are not limited. A zero RPS
// disables the limits. The console shares the API's limiter.
type RateLimit = ratelimit.Config

// exemptPaths are never rate limited: probes and scrapes must not be
// starved by API traffic.
var exemptPaths = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

// clientAddressKey carries the request's client address
// (ratelimit.Limiter.ClientAddress) to the operations that keep it: a
// refused evidence token's sample.
type clientAddressKey struct{}

// clientAddress is the client address the middleware put in ctx.
func clientAddress(ctx context.Context) string {
	a, _ := ctx.Value(clientAddressKey{}).(string)
	return a
}

// chargedKey marks a request whose principal's bucket the middleware
// already took a token from.
type chargedKey struct{}

// lookupKey carries the address token a request holds while its bearer
// token is looked up (ratelimit.Lookup).
type lookupKey struct{}

// chargePrincipal charges an authenticated request to p's bucket, unless
// the middleware did already, and gives back the client address's token
// its lookup held; false means the request is over the limit, and the 429
// is written. Every authentication of a request goes through it.
func (s *Server) chargePrincipal(ctx context.Context, p ledger.Principal, header func(string, string), write func(*Problem)) bool {
	if ctx.Value(chargedKey{}) != nil {
		return true
	}
	var ok bool
	var wait time.Duration
	if lk, held := ctx.Value(lookupKey{}).(*ratelimit.Lookup); held {
		ok, wait = lk.Known(p.ID)
	} else {
		ok, wait = s.limiter.AllowPrincipal(p.ID)
	}
	if ok {
		return true
	}
	retry := retryAfter(wait)
	header("Retry-After", strconv.Itoa(retry))
	write(rateLimitedProblem(retry))
	return false
}

// retryAfter is the Retry-After value, whole seconds, for a wait.
func retryAfter(wait time.Duration) int {
	retry := int(math.Ceil(wait.Seconds()))
	if retry < 1 {
		retry = 1
	}
	return retry
}

// statusRecorder remembers the status and size of a response.
type statusRecorder struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *statusRecorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusRecorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the connection (Flush for
// streamed exports).
func (w *statusRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush implements http.Flusher.
func (w *statusRecorder) Flush() {
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// middleware wraps the mux: trace context, rate limit, metrics and the
// request log. It never logs headers, query strings or bodies, so no
// token or signed evidence reaches a log.
func (s *Server) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		r = r.WithContext(context.WithValue(telemetry.ExtractTrace(r.Context(), r.Header), clientAddressKey{}, s.limiter.ClientAddress(r)))
		w, r = withReadFreshness(w, r)
		rec := &statusRecorder{ResponseWriter: w}
		limited, wait := false, time.Duration(0)
		if s.limiter != nil && !exemptPaths[r.URL.Path] {
			if p, cached := s.access.CachedPrincipal(BearerSecret(r.Header.Get("Authorization"))); cached {
				var ok bool
				if ok, wait = s.limiter.AllowPrincipal(p.ID); ok {
					r = r.WithContext(context.WithValue(r.Context(), chargedKey{}, true))
				}
				limited = !ok
			} else {
				// Not known to be a principal's: the address's token is
				// spent unless authentication proves otherwise.
				lk, ok, lw := s.limiter.Lookup(r)
				if ok {
					defer lk.Refused()
					r = r.WithContext(context.WithValue(r.Context(), lookupKey{}, lk))
				}
				limited, wait = !ok, lw
			}
			if limited {
				retry := retryAfter(wait)
				rec.Header().Set("Retry-After", strconv.Itoa(retry))
				rec.Header().Set("Content-Type", "application/problem+json")
				rec.WriteHeader(http.StatusTooManyRequests)
				_ = jsonEncode(rec, rateLimitedProblem(retry))
			}
		}
		defer func() {
			// The route is the pattern the mux matched, set on r by
			// ServeMux; requests that matched nothing share one label.
			route := "unmatched"
			if _, pattern, ok := strings.Cut(r.Pattern, " "); ok {
				route = pattern
			} else if r.Pattern != "" {
				route = r.Pattern
			}
			if limited {
				route = "rate_limited"
			}
			status := rec.status
			if status == 0 {
				status = http.StatusOK
			}
			if p := recover(); p != nil {
				// An aborted stream: record it, then let net/http close
				// the connection.
				s.metrics.ObserveHTTP(route, r.Method, status, time.Since(start))
				s.log.WarnContext(r.Context(), "request aborted", slog.String("method", r.Method), slog.String("route", route),
					slog.String("path", r.URL.Path), slog.Int64("bytes", rec.bytes))
				panic(p)
			}
			s.metrics.ObserveHTTP(route, r.Method, status, time.Since(start))
			attrs := []slog.Attr{
				slog.String("method", r.Method), slog.String("route", route), slog.String("path", r.URL.Path),
				slog.Int("status", status), slog.Int64("bytes", rec.bytes),
				slog.Duration("duration", time.Since(start)), slog.String("remote_ip", clientAddress(r.Context())),
			}
			if id := telemetry.TraceID(r.Context()); id != "" {
				attrs = append(attrs, slog.String("trace_id", id))
			}
			level := slog.LevelInfo
			if status >= 500 {
				level = slog.LevelError
			} else if exemptPaths[r.URL.Path] {
				level = slog.LevelDebug
			}
			s.log.LogAttrs(r.Context(), level, "request", attrs...)
		}()
		if !limited {
			next.ServeHTTP(rec, r)
		}
	})
}
