package egress

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// loopbackPolicy is the test policy: plain http allowed, and 127.0.0.1 only
// among the special-purpose addresses.
var loopbackPolicy = Policy{AllowHTTP: true, AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}

// serveOn starts a test HTTP server listening on the given loopback
// address (such as 127.0.0.2), skipping the test if it cannot listen there.
func serveOn(t *testing.T, ip string, h http.Handler) *httptest.Server {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Skipf("cannot listen on %s: %v", ip, err)
	}
	s := httptest.NewUnstartedServer(h)
	s.Listener.Close()
	s.Listener = l
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// countingHandler answers 200 "ok" and counts requests.
type countingHandler struct{ hits atomic.Int32 }

func (h *countingHandler) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	h.hits.Add(1)
	io.WriteString(w, "ok")
}

// fakeDNS is a DNS server, reached through a net.Resolver's Dial hook, that
// answers every A query with one address the test can change at any time.
type fakeDNS struct {
	mu   sync.Mutex
	addr netip.Addr
}

func newFakeDNS(addr string) *fakeDNS {
	return &fakeDNS{addr: netip.MustParseAddr(addr)}
}

func (f *fakeDNS) set(addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.addr = netip.MustParseAddr(addr)
}

func (f *fakeDNS) current() netip.Addr {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.addr
}

func (f *fakeDNS) resolver() *net.Resolver {
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
			client, server := net.Pipe()
			go f.serve(server)
			return client, nil
		},
	}
}

// serve speaks DNS over a stream connection (two-byte length prefix), which
// the Go resolver uses for any connection that is not a PacketConn.
func (f *fakeDNS) serve(c net.Conn) {
	defer c.Close()
	for {
		var n [2]byte
		if _, err := io.ReadFull(c, n[:]); err != nil {
			return
		}
		query := make([]byte, binary.BigEndian.Uint16(n[:]))
		if _, err := io.ReadFull(c, query); err != nil {
			return
		}
		resp, err := f.answer(query)
		if err != nil {
			return
		}
		out := binary.BigEndian.AppendUint16(nil, uint16(len(resp)))
		if _, err := c.Write(append(out, resp...)); err != nil {
			return
		}
	}
}

func (f *fakeDNS) answer(query []byte) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, err
	}
	questions, err := p.AllQuestions()
	if err != nil {
		return nil, err
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true})
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	for _, q := range questions {
		if err := b.Question(q); err != nil {
			return nil, err
		}
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	addr := f.current()
	for _, q := range questions {
		if q.Type != dnsmessage.TypeA || !addr.Is4() {
			continue
		}
		rh := dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 0}
		if err := b.AResource(rh, dnsmessage.AResource{A: addr.As4()}); err != nil {
			return nil, err
		}
	}
	return b.Finish()
}
