package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/access"
)

// randomBearer sends GET /v1/delegations with a new random bearer token
// and, when header is set, that header with each of values (one line
// each), as a proxy would; it returns the status.
func randomBearer(t *testing.T, e *apitest.Env, header string, values ...string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.URL+"/v1/delegations", nil)
	req.Header.Set("Authorization", "Bearer "+access.NewTokenSecret())
	for _, v := range values {
		req.Header.Add(header, v)
	}
	r := e.Send(t, req)
	if r.Status != http.StatusUnauthorized && r.Status != http.StatusTooManyRequests {
		t.Fatalf("random bearer token: %d %s", r.Status, r.Body)
	}
	return r.Status
}

// spend sends burst random bearer tokens from the address the header
// values give, each refused with 401, then one more that must get 429.
func spend(t *testing.T, e *apitest.Env, burst int, header string, values ...string) {
	t.Helper()
	for i := range burst {
		if got := randomBearer(t, e, header, values...); got != http.StatusUnauthorized {
			t.Fatalf("%v: request %d of the burst got %d", values, i+1, got)
		}
	}
	if got := randomBearer(t, e, header, values...); got != http.StatusTooManyRequests {
		t.Fatalf("%v: the request past the burst got %d", values, got)
	}
}

// TestTrustedProxyHeader: behind QUITTANCE_TRUSTED_PROXY_HEADER each
// client address the balancer reports has its own bucket; for
// X-Forwarded-For that is the right-most entry, so entries a client puts
// before it do not buy it a fresh bucket; a value that is not an IP
// address counts as absent (the connection's address), and without the
// setting the header is ignored.
func TestTrustedProxyHeader(t *testing.T) {
	t.Parallel()
	const burst = 3
	xff := "X-Forwarded-For"
	t.Run("x-forwarded-for", func(t *testing.T) {
		t.Parallel()
		e := apitest.New(t, apitest.WithRateLimit(httpapi.RateLimit{RPS: 0.001, Burst: burst, ClientIPHeader: xff}))
		spend(t, e, burst, xff, "203.0.113.1")
		// Prepended entries, on the same line or a line of their own,
		// are the client's and do not count.
		for _, v := range [][]string{{"198.51.100.7, 203.0.113.1"}, {"198.51.100.8,203.0.113.1"}, {"198.51.100.9", "203.0.113.1"}} {
			if got := randomBearer(t, e, xff, v...); got != http.StatusTooManyRequests {
				t.Fatalf("%q: %d, a fresh bucket", v, got)
			}
		}
		// Another client of the balancer has its own bucket.
		spend(t, e, burst, xff, "203.0.113.2")
		// Garbage is the connection's address (loopback), one bucket
		// for all of it.
		spend(t, e, burst, xff, "not-an-address")
		for _, v := range []string{"garbage-2", "203.0.113.3, unknown", ""} {
			if got := randomBearer(t, e, xff, v); got != http.StatusTooManyRequests {
				t.Fatalf("%q: %d, a fresh bucket", v, got)
			}
		}
	})
	t.Run("other header", func(t *testing.T) {
		t.Parallel()
		real := "X-Real-Ip"
		e := apitest.New(t, apitest.WithRateLimit(httpapi.RateLimit{RPS: 0.001, Burst: burst, ClientIPHeader: real}))
		// Values that are not addresses share the connection's bucket.
		for i := range burst {
			if got := randomBearer(t, e, real, fmt.Sprintf("junk-%d", i)); got != http.StatusUnauthorized {
				t.Fatalf("junk %d: %d", i, got)
			}
		}
		if got := randomBearer(t, e, real, "junk-x"); got != http.StatusTooManyRequests {
			t.Fatalf("unparsable values got fresh buckets: %d", got)
		}
		spend(t, e, burst, real, "203.0.113.9")
		if got := randomBearer(t, e, real, "203.0.113.9:4711"); got != http.StatusTooManyRequests {
			t.Fatalf("an address with a port is another bucket: %d", got)
		}
	})
	t.Run("unset", func(t *testing.T) {
		t.Parallel()
		e := apitest.New(t, apitest.WithRateLimit(httpapi.RateLimit{RPS: 0.001, Burst: burst}))
		for i := range burst {
			if got := randomBearer(t, e, xff, fmt.Sprintf("203.0.113.%d", i)); got != http.StatusUnauthorized {
				t.Fatalf("request %d: %d", i, got)
			}
		}
		if got := randomBearer(t, e, xff, "203.0.113.200"); got != http.StatusTooManyRequests {
			t.Fatalf("the header chose the bucket without the setting: %d", got)
		}
	})
}

// TestClientAddressBuckets: an IPv6 client is its /64 (one subscriber's
// block: its other addresses share the bucket), an IPv4-mapped address is
// the IPv4 address, and the buckets are bounded: past MaxBuckets new
// addresses share one overflow bucket, limited as one client.
func TestClientAddressBuckets(t *testing.T) {
	t.Parallel()
	const burst = 3
	xff := "X-Forwarded-For"
	e := apitest.New(t, apitest.WithRateLimit(httpapi.RateLimit{RPS: 0.001, Burst: burst, ClientIPHeader: xff, MaxBuckets: 4}))
	spend(t, e, burst, xff, "2001:db8:1:2::1")
	for _, a := range []string{"2001:db8:1:2::2", "2001:db8:1:2:ffff:ffff:ffff:ffff", "[2001:db8:1:2::3]:443"} {
		if got := randomBearer(t, e, xff, a); got != http.StatusTooManyRequests {
			t.Fatalf("%s, in the same /64: %d", a, got)
		}
	}
	spend(t, e, burst, xff, "2001:db8:1:3::1") // the next /64
	spend(t, e, burst, xff, "::ffff:192.0.2.1")
	if got := randomBearer(t, e, xff, "192.0.2.1"); got != http.StatusTooManyRequests {
		t.Fatalf("an IPv4-mapped address and its IPv4 address differ: %d", got)
	}
	spend(t, e, burst, xff, "192.0.2.2") // the fourth bucket: the limit
	// Every new address shares the overflow bucket.
	for i := range burst {
		if got := randomBearer(t, e, xff, fmt.Sprintf("198.51.100.%d", i)); got != http.StatusUnauthorized {
			t.Fatalf("overflow %d: %d", i, got)
		}
	}
	if got := randomBearer(t, e, xff, "198.51.100.200"); got != http.StatusTooManyRequests {
		t.Fatalf("a new address past the bound got a bucket of its own: %d", got)
	}
}

// TestLookupChargedToPrincipal: a request whose bearer token is looked up
// and proves a principal's is charged to the principal, not to its
// address: principals behind one address (a load balancer without the
// proxy header) each make their first request, whose token is not yet
// cached, without spending the address's budget, which unknown tokens
// still spend one lookup per token. Event streams are charged to their
// principal like any other request.
func TestLookupChargedToPrincipal(t *testing.T) {
	t.Parallel()
	const burst = 3
	e := apitest.New(t, apitest.WithRateLimit(httpapi.RateLimit{RPS: 0.001, Burst: burst}))
	// Issued through the service, not the API, so no bucket is touched and
	// no token is cached.
	issue := func(name string) string {
		secret := access.NewTokenSecret()
		if _, err := e.Access.EnsureToken(context.Background(), access.TokenInput{Role: ledger.RoleOrchestrator, Tenant: "acme", Name: name}, secret); err != nil {
			t.Fatal(err)
		}
		return secret
	}
	// A stream takes a token of its principal's bucket, as a request does:
	// after burst streams, the principal is limited.
	streamer := issue("streamer")
	for i := range burst {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.URL+"/v1/events", nil)
		req.Header.Set("Authorization", "Bearer "+streamer)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := e.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("stream %d: %d", i, resp.StatusCode)
		}
		cancel()
		resp.Body.Close()
	}
	e.Do(t, http.MethodGet, "/v1/delegations", streamer, nil).Problem(t, http.StatusTooManyRequests, "rate_limited")
	for i := range 2 * burst {
		e.Do(t, http.MethodGet, "/v1/delegations", issue(fmt.Sprintf("orch-%d", i)), nil).Expect(t, http.StatusOK)
	}
	spend(t, e, burst, "")
	// While the address's bucket is empty, nothing from it is looked up:
	// a principal whose token is not cached is refused with the flood.
	e.Do(t, http.MethodGet, "/v1/delegations", issue("late"), nil).Problem(t, http.StatusTooManyRequests, "rate_limited")
}

// TestAddressFloodLeavesPrincipalsTheirBuckets: a flood from ever new IPv6
// /64s (through the trusted proxy's header) fills the table of client
// addresses and empties its overflow bucket; principals keep buckets of
// their own all the same. A principal seen for the first time after the
// flood, from an address a credential was proven from before, is looked
// up and served; the flood's next new address is still limited.
func TestAddressFloodLeavesPrincipalsTheirBuckets(t *testing.T) {
	t.Parallel()
	const burst, maxBuckets = 3, 8
	xff := "X-Forwarded-For"
	e := apitest.New(t, apitest.WithRateLimit(httpapi.RateLimit{RPS: 0.001, Burst: burst, ClientIPHeader: xff, MaxBuckets: maxBuckets}))
	// Issued through the service, not the API, so no bucket is touched
	// and no token is cached.
	issue := func(name string) string {
		secret := access.NewTokenSecret()
		if _, err := e.Access.EnsureToken(context.Background(), access.TokenInput{Role: ledger.RoleOrchestrator, Tenant: "acme", Name: name}, secret); err != nil {
			t.Fatal(err)
		}
		return secret
	}
	const office = "203.0.113.7"
	get := func(token string) int {
		req, _ := http.NewRequest(http.MethodGet, e.URL+"/v1/delegations", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set(xff, office)
		return e.Send(t, req).Status
	}
	first := issue("first")
	if got := get(first); got != http.StatusOK {
		t.Fatalf("before the flood: %d", got)
	}
	// The flood: one random bearer token from each of many /64s.
	limited := 0
	for i := range 4 * maxBuckets {
		if randomBearer(t, e, xff, fmt.Sprintf("2001:db8:%x:%x::1", i/65536, i%65536)) == http.StatusTooManyRequests {
			limited++
		}
	}
	if limited < 4*maxBuckets-maxBuckets-burst {
		t.Fatalf("the flood was limited %d times in %d requests", limited, 4*maxBuckets)
	}
	if got := randomBearer(t, e, xff, "2001:db8:ffff:ffff::1"); got != http.StatusTooManyRequests {
		t.Fatalf("a new address after the flood: %d, want 429", got)
	}
	// A principal never seen before, from the office: a bucket of its own.
	late := issue("late")
	for i := range burst {
		if got := get(late); got != http.StatusOK {
			t.Fatalf("the new principal's request %d after the flood: %d", i+1, got)
		}
	}
	if got := get(late); got != http.StatusTooManyRequests {
		t.Fatalf("the new principal past its own burst: %d", got)
	}
	// The first principal too still has its bucket.
	for i := range burst - 1 {
		if got := get(first); got != http.StatusOK {
			t.Fatalf("the first principal's request %d after the flood: %d", i+1, got)
		}
	}
}
