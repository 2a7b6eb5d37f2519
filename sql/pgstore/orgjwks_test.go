package pgstore_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/delegate/egress"
	"github.com/quittance/quittance/internal/jose"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/pgstore"
	"github.com/quittance/quittance/sql/pgtest"
)

// TestOrgJWKSURLUnderDev: under dev, the bootstrap principal's JWKS URL
// applies at once, as its inline JWKS does (every other principal's waits
// for approval: TestOrgKeysFromJWKSURL); jwks with jwks_url, and a URL the
// egress policy refuses, are invalid and change nothing.
func TestOrgJWKSURLUnderDev(t *testing.T) {
	t.Parallel()
	store := pgstore.New(pgtest.Pool(t))
	ctx := context.Background()
	signer := compensationtest.NewEd25519Signer(t, "dev-key")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(signer.JWKS()) }))
	defer srv.Close()
	policy := egress.Policy{AllowHTTP: true, AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
	svc := ledger.NewService(ledger.Config{
		Store: store, Clock: fixedClock{epoch}, Dev: true,
		ValidateJWKS:    func(raw []byte) error { _, err := jose.ParseOrgJWKS(raw); return err },
		FetchJWKS:       jose.NewJWKSFetcher(egress.NewClient(policy)),
		ValidateJWKSURL: policy.ValidateURL,
	})
	bootstrap := ledger.Principal{Role: ledger.RoleOncall, Name: "bootstrap", Bootstrap: true}

	o, _, err := svc.PutOrg(ctx, bootstrap, "dev-org", ledger.OrgInput{Name: "Dev", JWKSURL: srv.URL})
	if err != nil || o.JWKSURL != srv.URL {
		t.Fatalf("bootstrap under dev: %+v, %v; want applied at once", o, err)
	}
	o, r, err := svc.RefreshOrgKeys(ctx, bootstrap, "dev-org")
	if err != nil || len(r.Added) != 1 || r.Added[0].KeyID != "dev-key" || o.JWKSFetch.FetchedAt.IsZero() || o.JWKSFetch.Error != "" {
		t.Fatalf("refresh: %+v %+v, %v", o, r, err)
	}

	var invalid *ledger.ValidationError
	for name, in := range map[string]ledger.OrgInput{
		"both sources":      {Name: "Dev", JWKS: signer.JWKS(), JWKSURL: srv.URL},
		"refused by egress": {Name: "Dev", JWKSURL: "http://10.0.0.1/jwks.json"},
	} {
		if _, _, err := svc.PutOrg(ctx, bootstrap, "dev-org", in); !errors.As(err, &invalid) || invalid.Field != "jwks_url" {
			t.Errorf("%s: %v, want invalid jwks_url", name, err)
		}
	}
	if o, err := svc.GetOrg(ctx, bootstrap, "dev-org"); err != nil || o.JWKSURL != srv.URL || len(o.KeySet()) == 0 {
		t.Errorf("the org after the refused changes: %+v, %v", o, err)
	}
}
