package httpapi_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/delegate"
)

// panickingTransport makes the A2A client panic on every request to one
// host, as a parser meeting hostile remote data would; other hosts are
// served as usual.
type panickingTransport struct {
	next   http.RoundTripper
	host   string
	panics atomic.Int64
}

func (p *panickingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Host == p.host {
		p.panics.Add(1)
		panic("hostile remote data")
	}
	return p.next.RoundTrip(r)
}

// TestA2AJobPanicIsRecovered: a remote whose answers make the A2A worker
// panic does not take the replica down: the panic is logged and counted
// (quittance_background_panics_total{worker="a2a_job"}), the job is
// rescheduled with its backoff (not retried in a tight loop, its
// last_error saying it panicked), and the next job — a dispatch to
// another org — runs.
func TestA2AJobPanicIsRecovered(t *testing.T) {
	t.Parallel()
	hostile := startV03Peer(t, &v03Peer{}, "127.0.0.1")
	good := startV03Peer(t, &v03Peer{}, "127.0.0.1")
	u, err := url.Parse(hostile.cardURL)
	if err != nil {
		t.Fatal(err)
	}
	pt := &panickingTransport{host: u.Host}
	e := newA2AEnv(t, apitest.Worker{NoPush: true, Transport: func(next http.RoundTripper) http.RoundTripper {
		pt.next = next
		return pt
	}})
	e.putOrg(t, "hostile", hostile.cardURL, http.StatusCreated)
	e.putOrg(t, "good", good.cardURL, http.StatusCreated)
	bad := e.dispatch(t, "po-hostile", "hostile")
	deadline := time.Now().Add(15 * time.Second)
	for metricValue(t, e.Registry, "quittance_background_panics_total", "worker", delegate.PanicJob) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("no panic was counted")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The replica survived; the next job runs.
	d := e.dispatch(t, "po-good", "good")
	e.waitFor(t, d.ID, "dispatch to the good org", dispatched)
	// The hostile job is rescheduled with backoff (at most 200ms in
	// tests), not claimed again at once: some tries a second, not hundreds.
	before := pt.panics.Load()
	time.Sleep(time.Second)
	if n := pt.panics.Load() - before; n > 10 {
		t.Fatalf("the panicking job was tried %d times in a second", n)
	}
	var attempts int
	var lastError string
	if err := e.Pool.QueryRow(context.Background(), `SELECT attempts, coalesce(last_error, '') FROM a2a_outbox WHERE delegation_id = $1 AND kind = 'dispatch'`, bad.ID).Scan(&attempts, &lastError); err != nil {
		t.Fatal(err)
	}
	if attempts < 1 || !strings.Contains(lastError, "panic") {
		t.Fatalf("the panicking job: %d attempts, last error %q", attempts, lastError)
	}
	if got := e.get(t, bad.ID); got.ObligationState != "held" || got.HoldState != "active" {
		t.Fatalf("the hostile org's delegation: %+v", got)
	}
}
