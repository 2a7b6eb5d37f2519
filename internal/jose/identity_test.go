package jose_test

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gojose "github.com/go-jose/go-jose/v4"

	"github.com/quittance/quittance/internal/jose"
)

var identityNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newIdentity(t *testing.T, ledgerID string) *jose.Identity {
	t.Helper()
	raw, err := jose.NewIdentityFile(ledgerID, identityNow)
	if err != nil {
		t.Fatal(err)
	}
	id, err := jose.LoadIdentity(ledgerID, raw)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestIdentitySignVerify: what an identity signs verifies against the JWK
// Set it publishes, as the typ it was signed as, by its active kid; not as
// another typ, and not against another identity's keys.
func TestIdentitySignVerify(t *testing.T) {
	t.Parallel()
	id := newIdentity(t, "ledger-a")
	if id.LedgerID() != "ledger-a" || !strings.HasPrefix(id.ActiveKeyID(), "ledger-a-20260301-") {
		t.Fatalf("identity %q, kid %q", id.LedgerID(), id.ActiveKeyID())
	}
	jws, kid, err := id.Sign(testTyp, []byte(`{"n":1}`))
	if err != nil || kid != id.ActiveKeyID() {
		t.Fatalf("Sign: kid %q, %v", kid, err)
	}
	payload, kid, err := jose.VerifySigned(jws, id.JWKS(), testTyp)
	if err != nil || string(payload) != `{"n":1}` || kid != id.ActiveKeyID() {
		t.Fatalf("VerifySigned = %s, %q, %v", payload, kid, err)
	}
	if _, _, err := jose.VerifySigned(jws, id.JWKS(), "other+jwt"); err == nil {
		t.Error("verified as another typ")
	}
	if _, _, err := jose.VerifySigned(jws, newIdentity(t, "ledger-a").JWKS(), testTyp); err == nil {
		t.Error("verified against another identity's keys")
	}
	if _, _, err := jose.VerifySigned(jws, []byte("nope"), testTyp); err == nil {
		t.Error("verified against no JWK Set")
	}
	var published gojose.JSONWebKeySet
	if err := json.Unmarshal(id.JWKS(), &published); err != nil || len(published.Keys) != 1 || !published.Keys[0].IsPublic() {
		t.Fatalf("published JWKS %s: %v", id.JWKS(), err)
	}
}

// TestLoadIdentity: a PEM Ed25519 key (its kid its thumbprint) or a JWK
// Set of private Ed25519 keys, the first of which signs and all of which
// are published; anything else is refused.
func TestLoadIdentity(t *testing.T) {
	t.Parallel()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	id, err := jose.LoadIdentity("l", pemKey)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := jose.Thumbprint(gojose.JSONWebKey{Key: priv.Public()})
	if err != nil || id.ActiveKeyID() != tp {
		t.Fatalf("PEM key's kid %q, want its thumbprint %q (%v)", id.ActiveKeyID(), tp, err)
	}

	_, retired, _ := ed25519.GenerateKey(rand.Reader)
	set := func(keys ...gojose.JSONWebKey) []byte {
		b, err := json.Marshal(gojose.JSONWebKeySet{Keys: keys})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	two := set(gojose.JSONWebKey{Key: priv, KeyID: "new"}, gojose.JSONWebKey{Key: retired, KeyID: "old"})
	id, err = jose.LoadIdentity("l", two)
	if err != nil || id.ActiveKeyID() != "new" || strings.Count(string(id.JWKS()), `"kid"`) != 2 {
		t.Fatalf("two keys: %v, kid %q, JWKS %s", err, id.ActiveKeyID(), id.JWKS())
	}

	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	for name, raw := range map[string][]byte{
		"garbage":       []byte("nope"),
		"no keys":       set(),
		"public key":    set(gojose.JSONWebKey{Key: priv.Public(), KeyID: "p"}),
		"EC key":        set(gojose.JSONWebKey{Key: ec, KeyID: "e"}),
		"no kid":        set(gojose.JSONWebKey{Key: priv}),
		"duplicate kid": set(gojose.JSONWebKey{Key: priv, KeyID: "k"}, gojose.JSONWebKey{Key: retired, KeyID: "k"}),
	} {
		if _, err := jose.LoadIdentity("l", raw); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := jose.LoadIdentity("", pemKey); err == nil {
		t.Error("an empty ledger id: accepted")
	}
}

// TestLoadOrCreateIdentityFile: a missing key file is written (mode 0600)
// only when asked, and read back as the same identity.
func TestLoadOrCreateIdentityFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "keys", "ledger.jwks")
	if _, err := jose.LoadOrCreateIdentityFile("l", path, false, identityNow); err == nil {
		t.Fatal("a missing file was not an error")
	}
	created, err := jose.LoadOrCreateIdentityFile("l", path, true, identityNow)
	if err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, %v", info, err)
	}
	again, err := jose.LoadOrCreateIdentityFile("l", path, true, identityNow)
	if err != nil || again.ActiveKeyID() != created.ActiveKeyID() || string(again.JWKS()) != string(created.JWKS()) {
		t.Fatalf("read back: %v", err)
	}
}
