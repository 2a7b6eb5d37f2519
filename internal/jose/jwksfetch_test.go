package jose_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/delegate/egress"
	"github.com/quittance/quittance/internal/jose"
)

// TestJWKSFetcher: an org's JWKS URL over real loopback HTTPS and HTTP.
// Through a client that trusts the server's certificate the set is
// returned as served; through the egress client, a certificate no trusted
// CA issued is refused, plain http is refused unless the policy allows it,
// and an address the policy does not allow is refused before connecting.
// Anything but a 200, and a document over jose.MaxJWKSSize, are
// errors.
func TestJWKSFetcher(t *testing.T) {
	t.Parallel()
	doc := compensationtest.NewEd25519Signer(t, "k1").JWKS()
	mux := http.NewServeMux()
	mux.HandleFunc("/jwks.json", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(doc) })
	mux.HandleFunc("/missing", http.NotFound)
	mux.HandleFunc("/huge", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(strings.Repeat(" ", jose.MaxJWKSSize+1)))
	})
	tlsSrv := httptest.NewTLSServer(mux)
	defer tlsSrv.Close()
	plain := httptest.NewServer(mux)
	defer plain.Close()
	ctx := context.Background()
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}

	trusting := jose.NewJWKSFetcher(tlsSrv.Client())
	got, err := trusting(ctx, tlsSrv.URL+"/jwks.json")
	if err != nil || string(got) != string(doc) {
		t.Fatalf("https fetch: %q, %v", got, err)
	}
	for _, path := range []string{"/missing", "/huge"} {
		if _, err := trusting(ctx, tlsSrv.URL+path); err == nil {
			t.Errorf("%s: no error", path)
		}
	}

	httpsOnly := jose.NewJWKSFetcher(egress.NewClient(egress.Policy{AllowCIDRs: loopback}))
	if _, err := httpsOnly(ctx, tlsSrv.URL+"/jwks.json"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a certificate of an untrusted CA: %v, want a certificate error", err)
	}
	if _, err := httpsOnly(ctx, plain.URL+"/jwks.json"); !errors.Is(err, egress.ErrDenied) {
		t.Errorf("plain http under an https-only policy: %v, want ErrDenied", err)
	}
	if _, err := jose.NewJWKSFetcher(egress.NewClient(egress.Policy{AllowHTTP: true}))(ctx, plain.URL+"/jwks.json"); !errors.Is(err, egress.ErrDenied) {
		t.Errorf("loopback not allowed by the policy: %v, want ErrDenied", err)
	}
	got, err = jose.NewJWKSFetcher(egress.NewClient(egress.Policy{AllowHTTP: true, AllowCIDRs: loopback}))(ctx, plain.URL+"/jwks.json")
	if err != nil || string(got) != string(doc) {
		t.Errorf("http fetch allowed by the policy: %q, %v", got, err)
	}
}
