package console_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/go-jose/go-jose/v4"

	"github.com/quittance/quittance/cmd/quittance/internal/console"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/ledger"
)

// issuer is a small OpenID Connect provider on loopback: discovery, JWKS,
// an authorization endpoint that signs the configured person in at once,
// and a token endpoint that insists on the PKCE verifier.
type issuer struct {
	t        *testing.T
	srv      *httptest.Server
	key      *rsa.PrivateKey
	clientID string
	secret   string

	mu     sync.Mutex
	codes  map[string]grant
	person map[string]any
	// exchanges counts token requests that passed the PKCE check.
	exchanges int
}

type grant struct {
	challenge, nonce, redirect string
}

func newIssuer(t *testing.T) *issuer {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	is := &issuer{t: t, key: key, clientID: "quittance-console", secret: "s3cret", codes: map[string]grant{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", is.discovery)
	mux.HandleFunc("GET /jwks", is.jwks)
	mux.HandleFunc("GET /authorize", is.authorize)
	mux.HandleFunc("POST /token", is.token)
	is.srv = httptest.NewServer(mux)
	t.Cleanup(is.srv.Close)
	return is
}

func (is *issuer) signInAs(claims map[string]any) {
	is.mu.Lock()
	defer is.mu.Unlock()
	is.person = claims
}

func (is *issuer) discovery(w http.ResponseWriter, _ *http.Request) {
	u := is.srv.URL
	_ = json.NewEncoder(w).Encode(map[string]any{
		"issuer": u, "authorization_endpoint": u + "/authorize", "token_endpoint": u + "/token", "jwks_uri": u + "/jwks",
		"response_types_supported": []string{"code"}, "subject_types_supported": []string{"public"},
		"id_token_signing_alg_values_supported": []string{"RS256"}, "code_challenge_methods_supported": []string{"S256"},
	})
}

func (is *issuer) jwks(w http.ResponseWriter, _ *http.Request) {
	_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &is.key.PublicKey, KeyID: "idp-1", Algorithm: "RS256", Use: "sig"}}})
}

func (is *issuer) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Get("client_id") != is.clientID || q.Get("response_type") != "code" || q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" {
		http.Error(w, "bad authorization request", http.StatusBadRequest)
		return
	}
	code := rand.Text()
	is.mu.Lock()
	is.codes[code] = grant{challenge: q.Get("code_challenge"), nonce: q.Get("nonce"), redirect: q.Get("redirect_uri")}
	is.mu.Unlock()
	back, _ := url.Parse(q.Get("redirect_uri"))
	v := back.Query()
	v.Set("code", code)
	v.Set("state", q.Get("state"))
	back.RawQuery = v.Encode()
	http.Redirect(w, r, back.String(), http.StatusFound)
}

func (is *issuer) token(w http.ResponseWriter, r *http.Request) {
	id, secret, ok := r.BasicAuth()
	if !ok {
		id, secret = r.PostFormValue("client_id"), r.PostFormValue("client_secret")
	}
	is.mu.Lock()
	g, found := is.codes[r.PostFormValue("code")]
	delete(is.codes, r.PostFormValue("code"))
	person := is.person
	is.mu.Unlock()
	sum := sha256.Sum256([]byte(r.PostFormValue("code_verifier")))
	switch {
	case id != is.clientID || secret != is.secret:
		http.Error(w, `{"error":"invalid_client"}`, http.StatusUnauthorized)
		return
	case !found || g.redirect != r.PostFormValue("redirect_uri"):
		http.Error(w, `{"error":"invalid_grant"}`, http.StatusBadRequest)
		return
	case base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge:
		http.Error(w, `{"error":"invalid_grant","error_description":"PKCE verifier mismatch"}`, http.StatusBadRequest)
		return
	}
	now := time.Now()
	claims := map[string]any{"iss": is.srv.URL, "aud": is.clientID, "iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix(), "nonce": g.nonce}
	for k, v := range person {
		claims[k] = v
	}
	payload, _ := json.Marshal(claims)
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: is.key}, (&jose.SignerOptions{}).WithHeader("kid", "idp-1").WithType("JWT"))
	if err != nil {
		is.t.Error(err)
		return
	}
	jws, err := signer.Sign(payload)
	if err != nil {
		is.t.Error(err)
		return
	}
	idToken, _ := jws.CompactSerialize()
	is.mu.Lock()
	is.exchanges++
	is.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"access_token": rand.Text(), "token_type": "Bearer", "expires_in": 300, "id_token": idToken})
}

// TestBrowserOIDCSignIn signs in through the loopback issuer with the
// authorization code flow and PKCE: the person's groups claim maps to the
// on-call role; a person with no mapped group cannot sign in.
func TestBrowserOIDCSignIn(t *testing.T) {
	is := newIssuer(t)
	oidc, err := console.NewOIDC(console.OIDCConfig{
		IssuerURL: is.srv.URL, ClientID: is.clientID, ClientSecret: is.secret, RedirectURL: "/console/oidc/callback",
		RoleClaim: "groups", Roles: map[string]ledger.Role{"quittance-oncall": ledger.RoleOncall, "quittance-finance": ledger.RoleFinance},
	})
	if err != nil {
		t.Fatal(err)
	}
	e := apitest.New(t, apitest.WithOIDC(oidc))
	b := &tab{t: t, ctx: browser(t), base: e.URL, dir: screenshotDir(t)}

	is.signInAs(map[string]any{"sub": "u-1001", "email": "alice@example.com", "groups": []string{"staff", "quittance-oncall"}})
	b.open("/console/obligations", "#token")
	b.do(chromedp.Click(chromedp.CSS(`a[href^="/console/oidc/login"]`)), chromedp.WaitVisible(chromedp.CSS("h1")))
	b.do(chromedp.WaitVisible(chromedp.CSS(".me")))
	if me := b.text(".me"); !strings.Contains(me, "oidc:alice@example.com") || !strings.Contains(me, "oncall") {
		t.Fatalf("signed in as %q", me)
	}
	if loc := b.location(); !strings.HasSuffix(loc, "/console/obligations") {
		t.Fatalf("after sign-in at %s, want the obligations page", loc)
	}
	is.mu.Lock()
	exchanges := is.exchanges
	is.mu.Unlock()
	if exchanges != 1 {
		t.Fatalf("%d PKCE-checked token exchanges, want 1", exchanges)
	}
	b.signOut()

	is.signInAs(map[string]any{"sub": "u-1002", "email": "mallory@example.com", "groups": []string{"staff"}})
	b.do(chromedp.Click(chromedp.CSS(`a[href^="/console/oidc/login"]`)), chromedp.WaitVisible(chromedp.CSS("h1")))
	if h := b.text("h1"); h != "No console role" {
		t.Fatalf("a person without a mapped group got %q", h)
	}
	b.open("/console/", "#token")
}
