package httpapi

import (
	"context"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/quittance/quittance/cmd/quittance/internal/telemetry"
	"github.com/quittance/quittance/ledger"
)

// RateLimit configures the rate limits, token buckets of
// golang.org/x/time/rate: one per authenticated principal, and one per
// client address for every request that is not (yet) known to be a
// principal's: requests without a bearer token, public endpoints, and
// bearer tokens that are not in the authentication cache. An unknown bearer
// token therefore costs at most one database lookup per token of its
// address's bucket, however many different tokens it tries. The health
// probes and /metrics are not limited. A zero RPS disables the limits.
type RateLimit struct {
	// RPS is the sustained rate, in requests per second.
	RPS float64
	// Burst is the bucket size: how many requests may arrive at once.
	Burst int
	// ClientIPHeader, when set, names the header a trusted load balancer
	// puts the client's address in (X-Forwarded-For: its last entry, the
	// one the balancer added; any other header: its whole value). Unset,
	// the connection's peer is the client.
	ClientIPHeader string
}

// exemptPaths are never rate limited: probes and scrapes must not be
// starved by API traffic.
var exemptPaths = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

// limiter is a set of token buckets, one per key.
type limiter struct {
	limit    rate.Limit
	burst    int
	ipHeader string
	now      func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
	swept   time.Time
}

type bucket struct {
	l    *rate.Limiter
	last time.Time
}

func newLimiter(cfg RateLimit, now func() time.Time) *limiter {
	if cfg.RPS <= 0 {
		return nil
	}
	burst := cfg.Burst
	if burst < 1 {
		burst = int(math.Max(1, math.Ceil(cfg.RPS)))
	}
	return &limiter{limit: rate.Limit(cfg.RPS), burst: burst, ipHeader: http.CanonicalHeaderKey(cfg.ClientIPHeader), now: now, buckets: map[string]*bucket{}}
}

// allow takes a token from key's bucket. When the bucket is empty it
// returns false and how long until a token is available.
func (l *limiter) allow(key string) (bool, time.Duration) {
	now := l.now()
	l.mu.Lock()
	l.sweep(now)
	b, ok := l.buckets[key]
	if !ok {
		b = &bucket{l: rate.NewLimiter(l.limit, l.burst)}
		l.buckets[key] = b
	}
	b.last = now
	l.mu.Unlock()
	r := b.l.ReserveN(now, 1)
	if !r.OK() {
		return false, time.Second
	}
	if wait := r.DelayFrom(now); wait > 0 {
		r.CancelAt(now)
		return false, wait
	}
	return true, 0
}

// sweep forgets buckets that have been full for a while, so the map does
// not grow with every client ever seen. Called with l.mu held.
func (l *limiter) sweep(now time.Time) {
	if now.Sub(l.swept) < time.Minute {
		return
	}
	l.swept = now
	full := time.Duration(float64(l.burst) / float64(l.limit) * float64(time.Second))
	for k, b := range l.buckets {
		if now.Sub(b.last) > full+time.Minute {
			delete(l.buckets, k)
		}
	}
}

// clientIP is the client's address: the connection's peer, or, behind a
// trusted proxy, what its header says.
func (l *limiter) clientIP(r *http.Request) string {
	if l != nil && l.ipHeader != "" {
		if v := r.Header.Values(l.ipHeader); len(v) > 0 {
			last := v[len(v)-1]
			if l.ipHeader == "X-Forwarded-For" {
				parts := strings.Split(last, ",")
				last = parts[len(parts)-1]
			}
			if ip := strings.TrimSpace(last); ip != "" {
				return ip
			}
		}
	}
	return clientIP(r)
}

// clientIP is the connection's peer address.
func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// clientAddressKey carries the request's client address (limiter.clientIP)
// to the operations that keep it: a refused evidence token's sample.
type clientAddressKey struct{}

// clientAddress is the client address the middleware put in ctx.
func clientAddress(ctx context.Context) string {
	a, _ := ctx.Value(clientAddressKey{}).(string)
	return a
}

// chargedKey marks a request whose principal's bucket the middleware
// already took a token from.
type chargedKey struct{}

// rateKey is the bucket of a request: its principal's, when its bearer
// token is in the authentication cache (no database lookup needed to
// know), else its client address's.
func (s *Server) rateKey(r *http.Request) (key string, principal bool) {
	if p, ok := s.ledger.CachedPrincipal(bearerSecret(r.Header.Get("Authorization"))); ok {
		return "principal:" + p.ID.String(), true
	}
	return "ip:" + s.limiter.clientIP(r), false
}

// chargePrincipal takes a token from p's bucket unless the middleware did
// already; false means the request is over the limit, and the 429 is written.
func (s *Server) chargePrincipal(ctx context.Context, p ledger.Principal, header func(string, string), write func(*Problem)) bool {
	if s.limiter == nil || ctx.Value(chargedKey{}) != nil {
		return true
	}
	ok, wait := s.limiter.allow("principal:" + p.ID.String())
	if ok {
		return true
	}
	retry := retryAfter(wait)
	header("Retry-After", strconv.Itoa(retry))
	write(rateLimitedProblem(retry))
	return false
}

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
		r = r.WithContext(context.WithValue(telemetry.ExtractTrace(r.Context(), r.Header), clientAddressKey{}, s.limiter.clientIP(r)))
		rec := &statusRecorder{ResponseWriter: w}
		limited := false
		if s.limiter != nil && !exemptPaths[r.URL.Path] {
			key, isPrincipal := s.rateKey(r)
			if ok, wait := s.limiter.allow(key); !ok {
				limited = true
				retry := retryAfter(wait)
				rec.Header().Set("Retry-After", strconv.Itoa(retry))
				rec.Header().Set("Content-Type", "application/problem+json")
				rec.WriteHeader(http.StatusTooManyRequests)
				_ = jsonEncode(rec, rateLimitedProblem(retry))
			} else if isPrincipal {
				r = r.WithContext(context.WithValue(r.Context(), chargedKey{}, true))
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
				slog.Duration("duration", time.Since(start)), slog.String("remote_ip", s.limiter.clientIP(r)),
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
