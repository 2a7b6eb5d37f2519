package httpapi

import (
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/quittance/quittance/cmd/quittance/internal/telemetry"
)

// RateLimit configures the per-credential rate limit: a token bucket per
// bearer token (keyed by a prefix of the token's SHA-256, never the token)
// or, for requests without one, per client IP. The health probes and
// /metrics are not limited. A zero RPS disables the limit.
type RateLimit struct {
	// RPS is the sustained rate, in requests per second.
	RPS float64
	// Burst is the bucket size: how many requests may arrive at once.
	Burst int
}

// exemptPaths are never rate limited: probes and scrapes must not be
// starved by API traffic.
var exemptPaths = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

// limiter is a set of token buckets, one per key.
type limiter struct {
	rate  float64
	burst float64
	now   func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
	swept   time.Time
}

type bucket struct {
	tokens float64
	last   time.Time
}

func newLimiter(cfg RateLimit, now func() time.Time) *limiter {
	if cfg.RPS <= 0 {
		return nil
	}
	burst := float64(cfg.Burst)
	if burst < 1 {
		burst = math.Max(1, math.Ceil(cfg.RPS))
	}
	return &limiter{rate: cfg.RPS, burst: burst, now: now, buckets: map[string]*bucket{}}
}

// allow takes a token from key's bucket. When the bucket is empty it
// returns false and how long until a token is available.
func (l *limiter) allow(key string) (bool, time.Duration) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(now)
	b, ok := l.buckets[key]
	if !ok {
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[key] = b
	}
	b.tokens = math.Min(l.burst, b.tokens+now.Sub(b.last).Seconds()*l.rate)
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	wait := time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
	return false, wait
}

// sweep forgets buckets that have been full for a while, so the map does
// not grow with every client ever seen. Called with l.mu held.
func (l *limiter) sweep(now time.Time) {
	if now.Sub(l.swept) < time.Minute {
		return
	}
	l.swept = now
	full := time.Duration(l.burst / l.rate * float64(time.Second))
	for k, b := range l.buckets {
		if now.Sub(b.last) > full+time.Minute {
			delete(l.buckets, k)
		}
	}
}

// rateKey identifies the credential of a request: a prefix of the bearer
// token's SHA-256, or the client IP when there is no bearer token.
func rateKey(r *http.Request) string {
	if secret := bearerSecret(r.Header.Get("Authorization")); secret != "" {
		sum := sha256.Sum256([]byte(secret))
		return "token:" + hex.EncodeToString(sum[:8])
	}
	return "ip:" + clientIP(r)
}

// clientIP is the connection's peer address. Forwarded headers are not
// trusted: behind a proxy, the proxy is the client.
func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
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
		r = r.WithContext(telemetry.ExtractTrace(r.Context(), r.Header))
		rec := &statusRecorder{ResponseWriter: w}
		limited := false
		if s.limiter != nil && !exemptPaths[r.URL.Path] {
			if ok, wait := s.limiter.allow(rateKey(r)); !ok {
				limited = true
				retry := int(math.Ceil(wait.Seconds()))
				if retry < 1 {
					retry = 1
				}
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
				slog.Duration("duration", time.Since(start)), slog.String("remote_ip", clientIP(r)),
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
