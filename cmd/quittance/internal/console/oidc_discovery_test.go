package console

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/quittance/quittance/ledger"
)

// TestOIDCDiscoveryHoldsNoLockAcrossTheCall: while the issuer does not
// answer one sign-in's discovery, another sign-in that gives up waiting
// returns at once, rather than queueing behind a lock held across the
// network call; once the issuer answers, discovery goes on.
func TestOIDCDiscoveryHoldsNoLockAcrossTheCall(t *testing.T) {
	release := make(chan struct{})
	issuer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		case <-time.After(3 * time.Second):
		}
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
	}))
	defer issuer.Close()
	o, err := NewOIDC(OIDCConfig{IssuerURL: issuer.URL, ClientID: "c", RedirectURL: "/cb", RoleClaim: "groups",
		Roles: map[string]ledger.Role{"ops": ledger.RoleOncall}})
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() {
		_, err := o.discover(context.Background())
		first <- err
	}()
	time.Sleep(100 * time.Millisecond) // the first discovery is under way
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := o.discover(ctx); err == nil {
		t.Fatal("discovery succeeded against an issuer that does not answer")
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("a sign-in that gave up after 100ms waited %s for another's discovery", d)
	}
	close(release)
	if err := <-first; err == nil {
		t.Fatal("discovery succeeded against an issuer that answered 503")
	}
}
