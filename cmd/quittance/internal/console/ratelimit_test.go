package console_test

import (
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/access"
)

// clientFrom is a console client whose connections come from ip, another
// loopback address: another client address for the rate limiter.
func (w *world) clientFrom(t *testing.T, ip string) *browserless {
	b := w.client(t)
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	b.client.Transport = &http.Transport{DialContext: d.DialContext}
	return b
}

// TestConsoleRateLimited: the console is behind the API's limiter. Sign-in
// attempts with random tokens, and requests with random session cookies,
// each cost a database lookup, and share their client address's bucket:
// they get 429 (a page saying how long to wait) once it is empty. A person
// signed in from another address is unaffected, and is limited by their
// own principal's bucket.
func TestConsoleRateLimited(t *testing.T) {
	t.Parallel()
	const burst = 10
	e := apitest.New(t, apitest.WithRateLimit(httpapi.RateLimit{RPS: 0.001, Burst: burst}))
	w := &world{Env: e}
	w.finance = e.NewToken(t, ledger.RoleFinance, "", "finance-1")

	user := w.clientFrom(t, "127.0.0.2")
	user.signIn(w.finance)

	// Random sign-in tokens from one address.
	attacker := w.clientFrom(t, "127.0.0.3")
	csrf := attacker.get("/console/sign-in").csrf(t)
	limited := 0
	for range 3 * burst {
		res := attacker.do(http.MethodPost, "/console/sign-in", url.Values{"csrf": {csrf}, "token": {access.NewTokenSecret()}})
		switch res.status {
		case http.StatusTooManyRequests:
			limited++
			if res.header.Get("Retry-After") == "" || !strings.Contains(res.header.Get("Content-Type"), "text/html") ||
				!strings.Contains(res.body, "Too many requests") {
				t.Fatalf("429 without Retry-After or its page: %v\n%s", res.header, res.body)
			}
		case http.StatusUnprocessableEntity:
			csrf = res.csrf(t) // each refusal renders a new form
		default:
			t.Fatalf("random sign-in token: %d\n%s", res.status, res.body)
		}
	}
	if limited < 2*burst-1 {
		t.Fatalf("%d of %d random sign-in tokens were limited", limited, 3*burst)
	}

	// Random session cookies from another address.
	cookies := w.clientFrom(t, "127.0.0.4")
	limited = 0
	for range 3 * burst {
		cookies.client.Jar.SetCookies(mustURL(t, w.URL+"/console/"), []*http.Cookie{{Name: "quittance_session", Value: access.NewTokenSecret()}})
		res := cookies.get("/console/")
		switch res.status {
		case http.StatusTooManyRequests:
			limited++
		case http.StatusSeeOther:
		default:
			t.Fatalf("random session cookie: %d\n%s", res.status, res.body)
		}
	}
	if limited < 2*burst {
		t.Fatalf("%d of %d random session cookies were limited", limited, 3*burst)
	}

	// The signed-in person is not starved by either flood, and has a
	// bucket of their own: the sign-in took one token of it.
	for i := range burst - 1 {
		if p := user.get("/console/"); p.status != http.StatusOK {
			t.Fatalf("signed-in request %d: %d\n%s", i, p.status, p.body)
		}
	}
	if p := user.get("/console/"); p.status != http.StatusTooManyRequests {
		t.Fatalf("request past the principal's burst: %d", p.status)
	}
}
