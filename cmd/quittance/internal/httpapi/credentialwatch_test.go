package httpapi_test

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
)

// listenerProxy forwards TCP connections to PostgreSQL and can silence the
// ones that LISTEN for credential changes: they stay open and carry nothing
// more, either way, as a half-open connection (a peer gone without a FIN or
// RST, a firewall that dropped the flow) does.
type listenerProxy struct {
	addr string
	// closed is closed when the test ends: silenced connections stop
	// waiting.
	closed chan struct{}
	mu     sync.Mutex
	// conns are the proxied connections, with what is known of them.
	conns []*proxiedConn
}

type proxiedConn struct {
	// listens is set once the client sent LISTEN quittance_credentials.
	listens bool
	// upstreamPort is the proxy's port on its connection to PostgreSQL:
	// the backend's client_port in pg_stat_activity.
	upstreamPort int
	silenced     chan struct{}
}

// startListenerProxy proxies to target until the test ends.
func startListenerProxy(t *testing.T, target string) *listenerProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &listenerProxy{addr: ln.Addr().String(), closed: make(chan struct{})}
	var open []net.Conn
	var openMu sync.Mutex
	t.Cleanup(func() {
		close(p.closed)
		ln.Close()
		openMu.Lock()
		defer openMu.Unlock()
		for _, c := range open {
			c.Close()
		}
	})
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				client.Close()
				continue
			}
			openMu.Lock()
			open = append(open, client, server)
			openMu.Unlock()
			pc := &proxiedConn{upstreamPort: server.LocalAddr().(*net.TCPAddr).Port, silenced: make(chan struct{})}
			p.mu.Lock()
			p.conns = append(p.conns, pc)
			p.mu.Unlock()
			go p.forward(pc, server, client, true)
			go p.forward(pc, client, server, false)
		}
	}()
	return p
}

// forward copies from src to dst until either fails; once pc is silenced
// it forwards nothing more (and so reads nothing more either).
func (p *listenerProxy) forward(pc *proxiedConn, dst, src net.Conn, fromClient bool) {
	defer dst.Close()
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if fromClient && bytes.Contains(buf[:n], []byte("LISTEN quittance_credentials")) {
				p.mu.Lock()
				pc.listens = true
				p.mu.Unlock()
			}
			select {
			case <-pc.silenced:
				<-p.closed // silent until the test ends
				return
			default:
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// listeners returns the open connections that LISTEN for credential
// changes and are not silenced.
func (p *listenerProxy) listeners() []*proxiedConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*proxiedConn
	for _, pc := range p.conns {
		select {
		case <-pc.silenced:
			continue
		default:
		}
		if pc.listens {
			out = append(out, pc)
		}
	}
	return out
}

// TestRevocationReachesAReplicaWhoseListenerDied: a replica whose LISTEN
// connection dies still refuses a revoked credential it had cached within
// about a second, whether the connection went silent (half-open: nothing
// arrives, nothing fails, so only a ping the database does not answer
// shows it) or the database ended it (pg_terminate_backend); and its cache
// works again once it listens anew.
func TestRevocationReachesAReplicaWhoseListenerDied(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e1 := apitest.New(t)
	cc := e1.Pool.Config().ConnConfig
	proxy := startListenerProxy(t, net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))))
	cfg := e1.Pool.Config().Copy()
	host, port, _ := net.SplitHostPort(proxy.addr)
	p, _ := strconv.Atoi(port)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(p)
	pool2, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool2.Close)
	// e2 reaches the database through the proxy only.
	e2 := apitest.Start(t, pool2, apitest.WithOncallToken(e1.OncallToken))

	// cached mints an orchestrator credential on e1 and waits until e2
	// has it in its authentication cache, which needs e2's listener.
	cached := func(t *testing.T, name string) issued {
		t.Helper()
		orch := mint(t, e1, e1.OncallToken, map[string]any{"role": "orchestrator", "tenant": "acme", "name": name}, http.StatusCreated)
		waitFor(t, 10*time.Second, func() bool {
			e2.Do(t, http.MethodGet, "/v1/delegations", orch.Token, nil).Expect(t, http.StatusOK)
			_, ok := e2.Access.CachedPrincipal(orch.Token)
			return ok
		})
		return orch
	}
	// refusedWithin revokes orch through e1 and requires e2 to refuse it
	// within limit of the listener's death.
	refusedWithin := func(t *testing.T, orch issued, died time.Time, limit time.Duration) {
		t.Helper()
		e1.Do(t, http.MethodPost, "/admin/v1/credentials/"+orch.ID+"/revoke", e1.OncallToken, map[string]any{"reason": "leaked"}).
			Expect(t, http.StatusOK)
		for e2.Do(t, http.MethodGet, "/v1/delegations", orch.Token, nil).Status != http.StatusUnauthorized {
			if time.Since(died) > limit {
				t.Fatalf("e2 still accepts the revoked credential %s after its listener died", time.Since(died))
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("refused %s after the listener died", time.Since(died))
	}

	t.Run("half-open", func(t *testing.T) {
		orch := cached(t, "agent-silenced")
		ls := proxy.listeners()
		if len(ls) != 1 {
			t.Fatalf("%d credential listeners through the proxy, want e2's one", len(ls))
		}
		close(ls[0].silenced)
		// The revocation's notification never reaches e2: the cache must
		// stop answering on its own, a second after the last proof.
		refusedWithin(t, orch, time.Now(), 1250*time.Millisecond)
	})
	t.Run("terminated by the database", func(t *testing.T) {
		orch := cached(t, "agent-terminated") // e2 listens again
		ls := proxy.listeners()
		if len(ls) != 1 {
			t.Fatalf("%d credential listeners through the proxy, want e2's one", len(ls))
		}
		died, ended := time.Now(), false
		if err := e1.Pool.QueryRow(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE client_port = $1`, ls[0].upstreamPort).Scan(&ended); err != nil || !ended {
			t.Fatalf("terminate e2's listener: %v %v", ended, err)
		}
		refusedWithin(t, orch, died, time.Second)
	})
	cached(t, "agent-after") // and the cache works again
}
