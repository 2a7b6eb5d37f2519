package egress

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"code.dny.dev/ssrf"
)

func TestValidateURL(t *testing.T) {
	t.Parallel()
	prod := Policy{}
	tests := []struct {
		name   string
		policy Policy
		url    string
		ok     bool
	}{
		{"https name", prod, "https://agent.example.com/a2a", true},
		{"https name with port", prod, "https://agent.example.com:8443/a2a", true},
		{"https public IP", prod, "https://93.184.215.14/", true},
		{"http refused in production", prod, "http://agent.example.com/", false},
		{"http allowed in dev", loopbackPolicy, "http://agent.example.com/", true},
		{"ftp refused", loopbackPolicy, "ftp://agent.example.com/", false},
		{"userinfo refused", prod, "https://user:pass@agent.example.com/", false},
		{"user without password refused", prod, "https://user@agent.example.com/", false},
		{"relative refused", prod, "/a2a", false},
		{"opaque refused", prod, "https:agent.example.com", false},
		{"loopback literal refused", prod, "https://127.0.0.1/", false},
		{"loopback allowed by CIDR", loopbackPolicy, "http://127.0.0.1:8080/", true},
		{"other loopback not in CIDR", loopbackPolicy, "http://127.0.0.2/", false},
		{"private literal refused", prod, "https://10.1.2.3/", false},
		{"link-local metadata refused", prod, "https://169.254.169.254/latest/meta-data", false},
		{"IPv6 loopback refused", prod, "https://[::1]/", false},
		{"IPv4-mapped loopback refused", prod, "https://[::ffff:127.0.0.1]/", false},
		{"IPv6 ULA refused", prod, "https://[fd00::1]/", false},
		{"zoned IPv6 refused", prod, "https://[fe80::1%25eth0]/", false},
		{"unspecified refused", prod, "https://0.0.0.0/", false},
		{"localhost refused", prod, "https://localhost/", false},
		{"sub.localhost refused", prod, "https://a.localhost/", false},
		{"localhost allowed with loopback CIDR", loopbackPolicy, "http://localhost:8080/", true},
		{"decimal IPv4 refused", prod, "https://2130706433/", false},
		{"short IPv4 refused", prod, "https://127.1/", false},
		{"hex IPv4 refused", prod, "https://0x7f.1/", false},
		{"bad host chars refused", prod, "https://agent_ex%20ample.com/", false},
		{"port zero refused", prod, "https://agent.example.com:0/", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.policy.ValidateURL(tc.url)
			if tc.ok && err != nil {
				t.Fatalf("ValidateURL(%q) = %v, want nil", tc.url, err)
			}
			if !tc.ok && !errors.Is(err, ErrDenied) {
				t.Fatalf("ValidateURL(%q) = %v, want ErrDenied", tc.url, err)
			}
		})
	}
}

func TestParseAllowCIDRs(t *testing.T) {
	t.Parallel()
	got, err := ParseAllowCIDRs(" 127.0.0.1/32, ::1 ,,10.0.0.0/8 ")
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{
		netip.MustParsePrefix("127.0.0.1/32"),
		netip.MustParsePrefix("::1/128"),
		netip.MustParsePrefix("10.0.0.0/8"),
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if got, err := ParseAllowCIDRs(""); err != nil || len(got) != 0 {
		t.Fatalf("empty: got %v, %v", got, err)
	}
	if _, err := ParseAllowCIDRs("127.0.0.1/33"); err == nil {
		t.Fatal("bad prefix accepted")
	}
	if _, err := ParseAllowCIDRs("::ffff:127.0.0.1/128"); err == nil {
		t.Fatal("IPv4-mapped prefix accepted")
	}
	if _, err := ParseAllowCIDRs("not-an-ip"); err == nil {
		t.Fatal("bad address accepted")
	}
}

func get(ctx context.Context, hc *http.Client, u string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// isDialRefusal reports whether err is an egress refusal raised while
// connecting (by the dialer's Control hook), not by the static URL check.
func isDialRefusal(err error) bool {
	var opErr *net.OpError
	return errors.Is(err, ErrDenied) && errors.Is(err, ssrf.ErrProhibitedIP) && errors.As(err, &opErr)
}

func TestDialRefusesAddressOutsideAllowList(t *testing.T) {
	t.Parallel()
	target := &countingHandler{}
	srv := serveOn(t, "127.0.0.2", target)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())

	dns := newFakeDNS("127.0.0.2")
	hc := newClient(loopbackPolicy, dns.resolver())
	u := "http://agent.quittance.test:" + port + "/"
	if err := loopbackPolicy.ValidateURL(u); err != nil {
		t.Fatalf("static check should pass for a name: %v", err)
	}
	_, err := get(t.Context(), hc, u)
	if !isDialRefusal(err) {
		t.Fatalf("got %v, want a dial-time egress refusal", err)
	}
	if n := target.hits.Load(); n != 0 {
		t.Fatalf("forbidden server was reached %d times", n)
	}
}

func TestDialCatchesResolverFlip(t *testing.T) {
	t.Parallel()
	allowed := &countingHandler{}
	allowedSrv := serveOn(t, "127.0.0.1", allowed)
	_, port, _ := net.SplitHostPort(allowedSrv.Listener.Addr().String())
	forbidden := &countingHandler{}
	// The forbidden server listens on the same port at 127.0.0.2 when it can.
	if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.2", port)); err == nil {
		s := httptest.NewUnstartedServer(forbidden)
		s.Listener.Close()
		s.Listener = l
		s.Start()
		t.Cleanup(s.Close)
	}

	dns := newFakeDNS("127.0.0.1")
	hc := newClient(loopbackPolicy, dns.resolver())
	u := "http://flip.quittance.test:" + port + "/"
	if err := loopbackPolicy.ValidateURL(u); err != nil {
		t.Fatal(err)
	}
	if body, err := get(t.Context(), hc, u); err != nil || body != "ok" {
		t.Fatalf("first request: %q, %v", body, err)
	}

	dns.set("127.0.0.2")
	hc.CloseIdleConnections()
	_, err := get(t.Context(), hc, u)
	if !isDialRefusal(err) {
		t.Fatalf("after the flip: got %v, want a dial-time egress refusal", err)
	}
	if allowed.hits.Load() != 1 || forbidden.hits.Load() != 0 {
		t.Fatalf("hits: allowed %d, forbidden %d", allowed.hits.Load(), forbidden.hits.Load())
	}
}

func TestRedirects(t *testing.T) {
	t.Parallel()
	forbidden := &countingHandler{}
	forbiddenSrv := serveOn(t, "127.0.0.2", forbidden)

	var finalHits, postHits int32
	mux := http.NewServeMux()
	mux.HandleFunc("/hop/{n}", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.PathValue("n"))
		if n == 0 {
			if r.Method == http.MethodPost {
				postHits++
			}
			finalHits++
			io.WriteString(w, "done")
			return
		}
		http.Redirect(w, r, "/hop/"+strconv.Itoa(n-1), http.StatusTemporaryRedirect)
	})
	mux.HandleFunc("/away", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, forbiddenSrv.URL+"/", http.StatusFound)
	})
	srv := serveOn(t, "127.0.0.1", mux)
	hc := NewClient(loopbackPolicy)

	if body, err := get(t.Context(), hc, srv.URL+"/hop/3"); err != nil || body != "done" {
		t.Fatalf("3 redirects: %q, %v", body, err)
	}
	if _, err := get(t.Context(), hc, srv.URL+"/hop/4"); !errors.Is(err, ErrDenied) {
		t.Fatalf("4 redirects: got %v, want ErrDenied", err)
	}
	if _, err := get(t.Context(), hc, srv.URL+"/away"); !errors.Is(err, ErrDenied) {
		t.Fatalf("redirect to forbidden address: got %v, want ErrDenied", err)
	}
	if forbidden.hits.Load() != 0 {
		t.Fatal("redirect reached the forbidden address")
	}

	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/hop/1", strings.NewReader("{}"))
	resp, err := hc.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	if !errors.Is(err, ErrDenied) {
		t.Fatalf("POST redirect: got %v, want ErrDenied", err)
	}
	if finalHits != 1 || postHits != 0 {
		t.Fatalf("final hits %d, POST hits %d", finalHits, postHits)
	}
}

func TestStaticRefusals(t *testing.T) {
	t.Parallel()
	target := &countingHandler{}
	srv := serveOn(t, "127.0.0.1", target)
	u, _ := url.Parse(srv.URL)

	prodLike := Policy{AllowCIDRs: loopbackPolicy.AllowCIDRs} // https only
	if _, err := get(t.Context(), NewClient(prodLike), srv.URL); !errors.Is(err, ErrDenied) {
		t.Fatalf("http with AllowHTTP=false: got %v", err)
	}
	withUser := "http://user:secret@" + u.Host + "/"
	if _, err := get(t.Context(), NewClient(loopbackPolicy), withUser); !errors.Is(err, ErrDenied) {
		t.Fatalf("userinfo: got %v", err)
	}
	if _, err := get(t.Context(), NewClient(Policy{AllowHTTP: true}), srv.URL); !errors.Is(err, ErrDenied) {
		t.Fatalf("loopback without allow-list: got %v", err)
	}
	if n := target.hits.Load(); n != 0 {
		t.Fatalf("refused requests reached the server %d times", n)
	}
	if body, err := get(t.Context(), NewClient(loopbackPolicy), srv.URL); err != nil || body != "ok" {
		t.Fatalf("allowed request: %q, %v", body, err)
	}
}

// Not parallel: it sets process environment variables.
func TestProxyEnvironmentIgnored(t *testing.T) {
	proxy := &countingHandler{}
	proxySrv := serveOn(t, "127.0.0.1", proxy)
	target := &countingHandler{}
	targetSrv := serveOn(t, "127.0.0.1", target)
	_, port, _ := net.SplitHostPort(targetSrv.Listener.Addr().String())
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
		t.Setenv(k, proxySrv.URL)
	}
	t.Setenv("NO_PROXY", "")
	t.Setenv("no_proxy", "")

	hc := newClient(loopbackPolicy, newFakeDNS("127.0.0.1").resolver())
	if tr := hc.Transport.(*guardedTransport); tr.base.Proxy != nil {
		t.Fatal("transport has a proxy function")
	}
	// A name, not a loopback literal: the standard library never proxies
	// requests to loopback literals, so only a name shows the difference.
	if body, err := get(t.Context(), hc, "http://agent.quittance.test:"+port+"/"); err != nil || body != "ok" {
		t.Fatalf("request: %q, %v", body, err)
	}
	if proxy.hits.Load() != 0 || target.hits.Load() != 1 {
		t.Fatalf("proxy hits %d, target hits %d", proxy.hits.Load(), target.hits.Load())
	}
}

// TestDialURL: the client's transport dials a URL's host for a protocol
// that is not sent through net/http (A2A's gRPC binding) under the same
// rules: the static checks on the URL, then the address check at connect
// time, and the TLS configuration of its requests.
func TestDialURL(t *testing.T) {
	t.Parallel()
	allowed := serveOn(t, "127.0.0.1", &countingHandler{})
	forbidden := serveOn(t, "127.0.0.2", &countingHandler{})
	_, port, _ := net.SplitHostPort(forbidden.Listener.Addr().String())
	dialer, ok := NewClient(loopbackPolicy).Transport.(interface {
		DialURL(ctx context.Context, u *url.URL) (net.Conn, error)
		TLSClientConfig() *tls.Config
	})
	if !ok {
		t.Fatal("the client's transport does not offer DialURL and TLSClientConfig")
	}
	if cfg := dialer.TLSClientConfig(); cfg == nil || cfg.MinVersion != tls.VersionTLS12 {
		t.Fatalf("TLS configuration %+v", cfg)
	}
	u, _ := url.Parse(allowed.URL)
	conn, err := dialer.DialURL(t.Context(), u)
	if err != nil {
		t.Fatalf("dial an allowed address: %v", err)
	}
	conn.Close()
	if _, err := dialer.DialURL(t.Context(), &url.URL{Scheme: "http", Host: "127.0.0.2:" + port}); !errors.Is(err, ErrDenied) {
		t.Fatalf("dial outside the allow list: %v", err)
	}
	if _, err := dialer.DialURL(t.Context(), &url.URL{Scheme: "ftp", Host: u.Host}); !errors.Is(err, ErrDenied) {
		t.Fatalf("dial for a scheme the policy refuses: %v", err)
	}
	dns := newFakeDNS("127.0.0.2")
	viaName := newClient(loopbackPolicy, dns.resolver()).Transport.(interface {
		DialURL(ctx context.Context, u *url.URL) (net.Conn, error)
	})
	if _, err := viaName.DialURL(t.Context(), &url.URL{Scheme: "http", Host: "agent.quittance.test:" + port}); !isDialRefusal(err) {
		t.Fatalf("a name resolving outside the allow list: %v, want a dial-time refusal", err)
	}
}
