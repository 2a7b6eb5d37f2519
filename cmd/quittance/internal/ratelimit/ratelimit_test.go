package ratelimit_test

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/cmd/quittance/internal/ratelimit"
)

// TestHeldTokens: a lookup in flight holds its address's token, so
// concurrent lookups never get more than the bucket has; a lookup that
// proves a principal's gives its token back, one refused spends it.
func TestHeldTokens(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := ratelimit.New(ratelimit.Config{RPS: 1, Burst: 2}, nil, func() time.Time { return now })
	r := httptest.NewRequest("GET", "/", nil)
	first, ok1, _ := l.Lookup(r)
	second, ok2, _ := l.Lookup(r)
	if !ok1 || !ok2 {
		t.Fatal("the burst's two lookups were refused")
	}
	if _, ok, wait := l.Lookup(r); ok || wait <= 0 {
		t.Fatalf("a third lookup while two hold the bucket's tokens: ok %v, wait %s", ok, wait)
	}
	if ok, _ := first.Known(uuid.New()); !ok {
		t.Fatal("the principal's bucket refused its first request")
	}
	third, ok, _ := l.Lookup(r)
	if !ok {
		t.Fatal("the token a known lookup gave back is not available")
	}
	second.Refused()
	third.Refused()
	third.Refused() // twice spends once
	if _, ok, _ := l.Lookup(r); ok {
		t.Fatal("two refused lookups did not spend the bucket")
	}
	now = now.Add(time.Second)
	if _, ok, _ := l.Lookup(r); !ok {
		t.Fatal("the bucket did not refill")
	}
}

// TestNilLimiter: a disabled limiter allows everything.
func TestNilLimiter(t *testing.T) {
	l := ratelimit.New(ratelimit.Config{}, nil, time.Now)
	lk, ok, _ := l.Lookup(httptest.NewRequest("GET", "/", nil))
	if !ok {
		t.Fatal("refused")
	}
	lk.Refused()
	if ok, _ := lk.Known(uuid.New()); !ok {
		t.Fatal("refused")
	}
	if ok, _ := l.AllowPrincipal(uuid.New()); !ok {
		t.Fatal("refused")
	}
}
