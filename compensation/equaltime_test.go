package compensation_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"sync"
	"testing"
	"time"

	gojose "github.com/go-jose/go-jose/v4"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/report"
)

// TestRefusalsCostOneSignatureCheck: a posted token that passes the header
// rules costs exactly one signature check before it is refused, whether
// its iss names no org (or no possible org id), a revoked org, an org
// without usable keys, its kid no key of the org or a key of another
// algorithm, or its signature is wrong — the work done, and so the time
// taken, does not tell which orgs and kids exist. A token that the header
// rules refuse costs none, for a registered org as for an unknown one.
// The reason recorded for each stays what it was.
func TestRefusalsCostOneSignatureCheck(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	b := setupDB(t, start) // registers org-b, without keys
	ctx := context.Background()

	signers := []*compensationtest.Signer{
		compensationtest.NewEd25519Signer(t, "k-eddsa"),
		compensationtest.NewES256Signer(t, "k-es256"),
		compensationtest.NewES384Signer(t, "k-es384"),
		compensationtest.NewPS256Signer(t, "k-ps256"),
	}
	var jwks []gojose.JSONWebKey
	for _, s := range signers {
		jwks = append(jwks, s.PublicJWK())
	}
	keys := compensationtest.JWKS(jwks...)
	if err := b.store.InTx(ctx, func(tx ledger.Tx) error {
		for _, o := range []ledger.Org{
			{ID: "org-keys", Name: "Keys", JWKS: keys, AllowedHosts: []string{}, CreatedAt: start, UpdatedAt: start},
			{ID: "org-revoked", Name: "Revoked", JWKS: keys, IdentityRevokedAt: start, IdentityRevokedReason: "key leaked", AllowedHosts: []string{}, CreatedAt: start, UpdatedAt: start},
			{ID: "org-broken", Name: "Broken", JWKS: []byte(`{"keys":5}`), AllowedHosts: []string{}, CreatedAt: start, UpdatedAt: start},
			{ID: "org-url", Name: "URL", JWKSURL: "https://keys.example/jwks.json", AllowedHosts: []string{}, CreatedAt: start, UpdatedAt: start},
		} {
			if err := tx.Admin().PutOrg(ctx, o); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	var (
		mu        sync.Mutex
		reasons   = map[string]string{} // by the token's hex sha256
		refreshes = map[string]int{}    // by org
	)
	comp := compensation.NewService(compensation.Config{
		Store: b.store.Compensation(), Clock: b.clock, LedgerID: "ledger",
		OnRefusal: func(r report.TokenRefusal) {
			mu.Lock()
			defer mu.Unlock()
			reasons[hex.EncodeToString(r.TokenSHA256)] = r.Reason
		},
		RefreshOrgKeysForKid: func(_ context.Context, orgID, _ string) bool {
			mu.Lock()
			defer mu.Unlock()
			refreshes[orgID]++
			return false
		},
	})
	claims := func(iss string) map[string]any {
		return compensationtest.DeclarationClaims(iss, "ledger", "task-nobody-recorded", start)
	}
	decl := string(compensation.KindDeclaration)

	type tc struct {
		name, token, reason string
		checks              int
	}
	var cases []tc
	for i, s := range signers {
		other := signers[(i+1)%len(signers)] // a registered key of another algorithm
		forger := compensationtest.NewEd25519Signer(t, s.KeyID())
		switch s.Algorithm() {
		case gojose.ES256:
			forger = compensationtest.NewES256Signer(t, s.KeyID())
		case gojose.ES384:
			forger = compensationtest.NewES384Signer(t, s.KeyID())
		case gojose.PS256:
			forger = compensationtest.NewPS256Signer(t, s.KeyID())
		}
		alg := string(s.Algorithm()) + ": "
		cases = append(cases,
			tc{alg + "garbage iss", s.Sign(t, decl, claims("org-\x00keys")), compensation.CodeTokenOrgUnknown, 1},
			tc{alg + "unknown org", s.Sign(t, decl, claims("org-nobody")), compensation.CodeTokenOrgUnknown, 1},
			tc{alg + "revoked org", s.Sign(t, decl, claims("org-revoked")), compensation.CodeTokenOrgRevoked, 1},
			tc{alg + "org without keys", s.Sign(t, decl, claims("org-b")), compensation.CodeTokenKeyUnknown, 1},
			tc{alg + "org whose keys do not parse", s.Sign(t, decl, claims("org-broken")), compensation.CodeTokenKeyUnknown, 1},
			tc{alg + "unknown kid", s.Sign(t, decl, claims("org-keys"), compensationtest.WithHeader("kid", "k-nobody")), compensation.CodeTokenKeyUnknown, 1},
			tc{alg + "kid of a key of another algorithm", s.Sign(t, decl, claims("org-keys"), compensationtest.WithHeader("kid", other.KeyID())), compensation.CodeTokenKeyUnusable, 1},
			tc{alg + "wrong signature", forger.Sign(t, decl, claims("org-keys")), compensation.CodeTokenSignatureInvalid, 1},
			tc{alg + "verified, unknown task", s.Sign(t, decl, claims("org-keys")), compensation.CodeTokenDelegationUnknown, 1},
			// Refused by the header rules: no check, whatever the org.
			tc{alg + "refused header, registered org", s.Sign(t, decl, claims("org-keys"), compensationtest.WithHeader("jku", "https://evil.example/")), compensation.CodeTokenHeaderRefused, 0},
			tc{alg + "refused header, unknown org", s.Sign(t, decl, claims("org-nobody"), compensationtest.WithHeader("jku", "https://evil.example/")), compensation.CodeTokenOrgUnknown, 0},
		)
	}
	cases = append(cases,
		tc{"none, registered org", compensationtest.NoneToken(claims("org-keys"), compensationtest.WithHeader("typ", decl), compensationtest.WithHeader("kid", "k-eddsa")), compensation.CodeTokenAlgorithmRefused, 0},
		tc{"none, unknown org", compensationtest.NoneToken(claims("org-nobody"), compensationtest.WithHeader("typ", decl), compensationtest.WithHeader("kid", "k-eddsa")), compensation.CodeTokenOrgUnknown, 0},
		tc{"HS256, registered org", compensationtest.HS256Token([]byte("secret"), claims("org-keys"), compensationtest.WithHeader("typ", decl), compensationtest.WithHeader("kid", "k-eddsa")), compensation.CodeTokenAlgorithmRefused, 0},
		tc{"HS256, unknown org", compensationtest.HS256Token([]byte("secret"), claims("org-nobody"), compensationtest.WithHeader("typ", decl), compensationtest.WithHeader("kid", "k-eddsa")), compensation.CodeTokenOrgUnknown, 0},
	)

	for _, c := range cases {
		_, err := comp.SubmitDeclaration(ctx, []byte(c.token), "192.0.2.1")
		var ref *compensation.RefusalError
		if !errors.As(err, &ref) || ref.Code != compensation.CodeTokenRefused {
			t.Errorf("%s: %v, want the uniform refusal", c.name, err)
			continue
		}
		sum := sha256.Sum256([]byte(c.token))
		mu.Lock()
		reason := reasons[hex.EncodeToString(sum[:])]
		mu.Unlock()
		if reason != c.reason {
			t.Errorf("%s: refused for %q, want %q", c.name, reason, c.reason)
		}
		if n := compensation.SignatureChecks(c.token); n != c.checks {
			t.Errorf("%s: %d signature checks, want %d", c.name, n, c.checks)
		}
	}

	// The refresh for an unknown kid is asked of the org that serves its
	// keys at a JWKS URL only: for any other it would only read the org
	// again, which an unknown org is spared.
	mu.Lock()
	got := map[string]int{}
	for org, n := range refreshes {
		got[org] = n
	}
	mu.Unlock()
	if len(got) != 0 {
		t.Errorf("refreshes asked for orgs without a JWKS URL: %v", got)
	}
	token := signers[0].Sign(t, decl, claims("org-url"))
	if _, err := comp.SubmitDeclaration(ctx, []byte(token), "192.0.2.1"); err == nil {
		t.Fatal("a token of an org without fetched keys was accepted")
	}
	mu.Lock()
	defer mu.Unlock()
	if refreshes["org-url"] != 1 || compensation.SignatureChecks(token) != 1 {
		t.Errorf("org with a JWKS URL: %d refreshes, %d signature checks; want 1 and 1", refreshes["org-url"], compensation.SignatureChecks(token))
	}
}
