package egress

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"code.dny.dev/ssrf"
)

// ErrDenied reports an outbound request refused by the egress policy: a
// forbidden scheme, userinfo in the URL, a redirect not allowed, or a
// destination address that is private, loopback, link-local or otherwise
// special-purpose and not explicitly allowed. Its text, "egress denied",
// is in the message of every error that wraps it.
var ErrDenied = errors.New("egress denied")

// Limits of the outbound HTTP client.
const (
	dialTimeout           = 10 * time.Second
	tlsHandshakeTimeout   = 10 * time.Second
	responseHeaderTimeout = 60 * time.Second
	maxRedirects          = 3
)

// Policy says where outbound requests may go. The zero value is the
// production policy: https only, and only to globally routable addresses.
type Policy struct {
	// AllowHTTP permits plain http URLs (development and tests only).
	AllowHTTP bool
	// AllowCIDRs are address ranges permitted even though they are
	// private or special-purpose, such as 127.0.0.1/32 in tests.
	AllowCIDRs []netip.Prefix
}

// ParseAllowCIDRs parses a comma-separated list of CIDR prefixes, the format
// of QUITTANCE_EGRESS_ALLOW_CIDRS. Blank entries are skipped; a bare address
// is taken as a single-host prefix.
func ParseAllowCIDRs(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for field := range strings.SplitSeq(s, ",") {
		field = strings.TrimSpace(field)
		if field == "" {
			continue
		}
		if !strings.Contains(field, "/") {
			addr, err := netip.ParseAddr(field)
			if err != nil {
				return nil, fmt.Errorf("parse egress allow entry %q: %w", field, err)
			}
			out = append(out, netip.PrefixFrom(addr.Unmap(), addr.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(field)
		if err != nil {
			return nil, fmt.Errorf("parse egress allow entry %q: %w", field, err)
		}
		if p.Addr().Is4In6() {
			return nil, fmt.Errorf("parse egress allow entry %q: write IPv4 prefixes in dotted form", field)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// guardian builds the address checker for the policy: any port, tcp only,
// the IANA special-purpose registries denied except for AllowCIDRs.
func (p Policy) guardian() *ssrf.Guardian {
	var v4, v6 []netip.Prefix
	for _, pr := range p.AllowCIDRs {
		if pr.Addr().Is4() {
			v4 = append(v4, pr)
		} else {
			v6 = append(v6, pr)
		}
	}
	return ssrf.New(ssrf.WithAnyPort(), ssrf.WithAllowedV4Prefixes(v4...), ssrf.WithAllowedV6Prefixes(v6...))
}

// allowsLoopback reports whether the policy explicitly allows a loopback
// address, which is what makes the name "localhost" acceptable.
func (p Policy) allowsLoopback() bool {
	for _, pr := range p.AllowCIDRs {
		if pr.Contains(netip.AddrFrom4([4]byte{127, 0, 0, 1})) || pr.Contains(netip.IPv6Loopback()) {
			return true
		}
	}
	return false
}

// ValidateURL makes the static checks on an outbound URL: absolute http(s)
// URL with a host, https unless AllowHTTP, no userinfo, a host that is a
// well-formed DNS name or an IP literal the policy permits. Names are only
// resolved at dial time, where NewClient checks the resolved address. It
// is what a URL someone registers (an agent card, a webhook endpoint) must
// pass before it is stored.
func (p Policy) ValidateURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%w: unparsable URL", ErrDenied)
	}
	return p.validate(u)
}

func (p Policy) validate(u *url.URL) error {
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && p.AllowHTTP:
	default:
		return fmt.Errorf("%w: scheme %q not allowed", ErrDenied, u.Scheme)
	}
	if u.Opaque != "" || u.Host == "" {
		return fmt.Errorf("%w: URL has no host", ErrDenied)
	}
	if u.User != nil {
		return fmt.Errorf("%w: userinfo in URL", ErrDenied)
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("%w: invalid port %q", ErrDenied, port)
		}
	}
	host := u.Hostname()
	if addr, err := netip.ParseAddr(host); err == nil {
		if addr.Zone() != "" {
			return fmt.Errorf("%w: zoned address", ErrDenied)
		}
		if err := p.guardian().SafeAddr(addr.Unmap()); err != nil {
			return fmt.Errorf("%w: %w", ErrDenied, err)
		}
		return nil
	}
	if !validHostname(host) {
		return fmt.Errorf("%w: invalid host name", ErrDenied)
	}
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	if (name == "localhost" || strings.HasSuffix(name, ".localhost")) && !p.allowsLoopback() {
		return fmt.Errorf("%w: localhost not allowed", ErrDenied)
	}
	return nil
}

// validHostname accepts an LDH DNS name whose last label is not numeric (a
// numeric last label would be read as an IPv4 address by some resolvers, as
// in "127.1" or "0x7f.1").
func validHostname(host string) bool {
	host = strings.TrimSuffix(host, ".")
	if host == "" || len(host) > 253 {
		return false
	}
	labels := strings.Split(host, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	last := strings.ToLower(labels[len(labels)-1])
	if strings.HasPrefix(last, "0x") {
		return false
	}
	return strings.IndexFunc(last, func(r rune) bool { return r < '0' || r > '9' }) >= 0
}

// NewClient returns the client for every outbound request of Quittance:
// agent cards, JSON-RPC calls, SSE streams, JWKS and webhook deliveries.
// Each request URL (including each redirect) passes ValidateURL, and each
// connection is checked against the policy just before connecting, on the
// resolved address, so a name that later resolves elsewhere cannot slip
// through. Proxy environment variables are ignored. At most three redirects
// are followed, and none for a POST. The client has no overall timeout, so
// that SSE streams can stay open; callers bound requests with their context.
func NewClient(p Policy) *http.Client {
	return newClient(p, nil)
}

// newClient is NewClient with the name resolver used by the dialer (nil for
// the system resolver); tests pass one they control.
func newClient(p Policy, resolver *net.Resolver) *http.Client {
	guard := p.guardian()
	dialer := &net.Dialer{
		Timeout:   dialTimeout,
		KeepAlive: 30 * time.Second,
		Resolver:  resolver,
		Control: func(network, address string, _ syscall.RawConn) error {
			if err := guard.Safe(network, address, nil); err != nil {
				return fmt.Errorf("%w: %w", ErrDenied, err)
			}
			return nil
		},
	}
	base := &http.Transport{
		Proxy:                  nil,
		DialContext:            dialer.DialContext,
		ForceAttemptHTTP2:      true,
		TLSClientConfig:        &tls.Config{MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:    tlsHandshakeTimeout,
		ResponseHeaderTimeout:  responseHeaderTimeout,
		ExpectContinueTimeout:  time.Second,
		IdleConnTimeout:        90 * time.Second,
		MaxIdleConnsPerHost:    8,
		MaxResponseHeaderBytes: 64 << 10,
	}
	return &http.Client{
		Transport:     &guardedTransport{policy: p, base: base, tlsConfig: base.TLSClientConfig.Clone()},
		CheckRedirect: checkRedirect,
	}
}

// guardedTransport applies the static URL checks to every request the
// client sends, the first one and each redirect alike.
type guardedTransport struct {
	policy Policy
	base   *http.Transport
	// tlsConfig is base's TLS configuration as built, before base's first
	// request (which amends base's own) — read without a race.
	tlsConfig *tls.Config
}

// RoundTrip refuses a request whose URL fails the policy, then sends it.
func (t *guardedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.policy.validate(req.URL); err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	return t.base.RoundTrip(req)
}

// DialURL opens a TCP connection to the host of u (its port, or 443 for
// https and 80 for http) under the rules of the client's requests: u must
// pass the policy's static checks, and the address dialed is checked
// before connecting. It is how a protocol that is not HTTP/1 or TLS-ALPN
// HTTP/2 through net/http — A2A's gRPC binding — goes out through the
// same egress policy.
func (t *guardedTransport) DialURL(ctx context.Context, u *url.URL) (net.Conn, error) {
	if err := t.policy.validate(u); err != nil {
		return nil, err
	}
	port := u.Port()
	if port == "" {
		port = "443"
		if u.Scheme == "http" {
			port = "80"
		}
	}
	return t.base.DialContext(ctx, "tcp", net.JoinHostPort(u.Hostname(), port))
}

// TLSClientConfig returns a copy of the TLS configuration the client's
// connections use.
func (t *guardedTransport) TLSClientConfig() *tls.Config {
	return t.tlsConfig.Clone()
}

// CloseIdleConnections closes the idle connections of the underlying
// transport.
func (t *guardedTransport) CloseIdleConnections() {
	t.base.CloseIdleConnections()
}

// checkRedirect follows at most maxRedirects redirects and never redirects
// a POST (a JSON-RPC call must reach the pinned endpoint or fail).
func checkRedirect(req *http.Request, via []*http.Request) error {
	if via[0].Method != http.MethodGet && via[0].Method != http.MethodHead {
		return fmt.Errorf("%w: redirect of %s not followed", ErrDenied, via[0].Method)
	}
	if len(via) > maxRedirects {
		return fmt.Errorf("%w: more than %d redirects", ErrDenied, maxRedirects)
	}
	return nil
}
