package console

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/access"
	"github.com/quittance/quittance/ledger/session"
)

// OIDCConfig configures OpenID Connect sign-in: the authorization code
// flow with PKCE against one issuer, mapping one claim of the ID token to
// console roles.
type OIDCConfig struct {
	// IssuerURL is the issuer; its discovery document is read on the
	// first sign-in.
	IssuerURL    string
	ClientID     string
	ClientSecret string
	// RedirectURL is this console's callback: <public URL>/console/oidc/callback.
	// A path alone ("/console/oidc/callback") is resolved against the
	// request's host, for a console reached at one address only (tests);
	// the identity provider refuses any callback not registered with it.
	RedirectURL string
	// RoleClaim names the ID token claim holding the person's groups or
	// roles (a string or a list of strings), e.g. "groups".
	RoleClaim string
	// Roles maps a value of RoleClaim to a role. A person with values of
	// several roles gets on-call over finance (access.Service.SignInOIDC);
	// one with none cannot sign in.
	Roles map[string]ledger.Role
	// HTTPClient reaches the issuer; a client with a 10s timeout when nil.
	HTTPClient *http.Client
}

// ParseRoleMap reads "value=role,value=role" (e.g.
// "quittance-oncall=oncall,quittance-finance=finance"). Only roles that
// may use the console (ledger.ActionUseConsole) may be mapped.
func ParseRoleMap(raw string) (map[string]ledger.Role, error) {
	out := map[string]ledger.Role{}
	for _, pair := range strings.Split(raw, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		value, role, ok := strings.Cut(pair, "=")
		r, err := ledger.ParseRole(strings.TrimSpace(role))
		if !ok || strings.TrimSpace(value) == "" || err != nil || !r.Permits(ledger.ActionUseConsole) {
			return nil, fmt.Errorf("%q is not claim-value=role with role finance or oncall", pair)
		}
		out[strings.TrimSpace(value)] = r
	}
	if len(out) == 0 {
		return nil, errors.New("no claim value is mapped to a role")
	}
	return out, nil
}

// OIDC is a configured OpenID Connect sign-in.
type OIDC struct {
	cfg OIDCConfig

	// mu guards provider and discovering; it is never held while the
	// issuer is contacted, so a slow or hanging issuer holds up no one who
	// gives up waiting.
	mu          sync.Mutex
	provider    *oidc.Provider
	discovering chan struct{} // closed when the discovery under way ends
}

// NewOIDC checks cfg and returns the sign-in; the issuer is contacted on
// the first sign-in, so an unreachable issuer does not stop the service.
func NewOIDC(cfg OIDCConfig) (*OIDC, error) {
	switch {
	case cfg.IssuerURL == "" || cfg.ClientID == "" || cfg.RedirectURL == "":
		return nil, errors.New("OIDC needs the issuer URL, the client id and the redirect URL")
	case cfg.RoleClaim == "" || len(cfg.Roles) == 0:
		return nil, errors.New("OIDC needs the role claim and at least one claim value mapped to a role")
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	return &OIDC{cfg: cfg}, nil
}

func (o *OIDC) context(ctx context.Context) context.Context {
	return oidc.ClientContext(ctx, o.cfg.HTTPClient)
}

// discover returns the issuer's provider, reading its discovery document
// until once it succeeds. One request at a time reads it; the others wait
// for that read, or for their own context to end, without holding the
// lock across the network call.
func (o *OIDC) discover(ctx context.Context) (*oidc.Provider, error) {
	for {
		o.mu.Lock()
		if o.provider != nil {
			p := o.provider
			o.mu.Unlock()
			return p, nil
		}
		wait := o.discovering
		if wait == nil {
			o.discovering = make(chan struct{})
		}
		o.mu.Unlock()
		if wait == nil {
			return o.discoverNow(ctx)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("OIDC discovery at %s: %w", o.cfg.IssuerURL, ctx.Err())
		case <-wait:
		}
	}
}

// discoverNow reads the discovery document, with the lock released, and
// records the provider; it ends the discovery under way either way.
func (o *OIDC) discoverNow(ctx context.Context) (*oidc.Provider, error) {
	p, err := oidc.NewProvider(o.context(ctx), o.cfg.IssuerURL)
	o.mu.Lock()
	if err == nil {
		o.provider = p
	}
	close(o.discovering)
	o.discovering = nil
	o.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("OIDC discovery at %s: %w", o.cfg.IssuerURL, err)
	}
	return p, nil
}

func (o *OIDC) oauth(p *oidc.Provider, r *http.Request) oauth2.Config {
	redirect := o.cfg.RedirectURL
	if strings.HasPrefix(redirect, "/") {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		redirect = scheme + "://" + r.Host + redirect
	}
	return oauth2.Config{
		ClientID: o.cfg.ClientID, ClientSecret: o.cfg.ClientSecret, RedirectURL: redirect,
		Endpoint: p.Endpoint(), Scopes: []string{oidc.ScopeOpenID, "profile", "email"},
	}
}

// signIn maps verified ID token claims to what the ledger signs in
// (access.Service.SignInOIDC): the issuer and subject, the display name
// ("oidc:" and the email, the preferred username or the subject, so it
// does not take the name of a token principal), and every role the role
// map gives the person's claim values.
func (o *OIDC) signIn(tok *oidc.IDToken) (access.OIDCSignIn, error) {
	var claims map[string]any
	if err := tok.Claims(&claims); err != nil {
		return access.OIDCSignIn{}, fmt.Errorf("read ID token claims: %w", err)
	}
	var values []string
	switch v := claims[o.cfg.RoleClaim].(type) {
	case string:
		values = []string{v}
	case []any:
		for _, x := range v {
			if s, ok := x.(string); ok {
				values = append(values, s)
			}
		}
	}
	var roles []ledger.Role
	for _, v := range values {
		if r, ok := o.cfg.Roles[v]; ok && !slices.Contains(roles, r) {
			roles = append(roles, r)
		}
	}
	if len(roles) == 0 {
		return access.OIDCSignIn{}, errNoRole
	}
	name, _ := claims["email"].(string)
	if name == "" {
		name, _ = claims["preferred_username"].(string)
	}
	if name == "" {
		name = tok.Subject
	}
	return access.OIDCSignIn{Issuer: tok.Issuer, Subject: tok.Subject, Name: "oidc:" + shorten(name, 180), Roles: roles}, nil
}

var errNoRole = errors.New("no console role")

const oidcCookieName = "quittance_oidc"

// oidcLogin sends the browser to the issuer with a fresh state, nonce and
// PKCE verifier, kept in a short-lived cookie for the callback. It is a
// GET link, not a form: a form's redirect to another origin would be
// refused by the console's form-action policy.
func (c *Console) oidcLogin(w http.ResponseWriter, r *http.Request) {
	o := c.cfg.OIDC
	if o == nil {
		c.renderError(w, r, nil, http.StatusNotFound, "Not configured", "OpenID Connect sign-in is not configured; sign in with an API token.")
		return
	}
	p, err := o.discover(r.Context())
	if err != nil {
		c.log.ErrorContext(r.Context(), "OIDC discovery failed", slog.Any("error", err))
		c.renderError(w, r, nil, http.StatusBadGateway, "Identity provider unreachable", "The identity provider could not be reached. Try again, or sign in with an API token.")
		return
	}
	state, nonce, verifier := randomValue(), randomValue(), oauth2.GenerateVerifier()
	next := base64.RawURLEncoding.EncodeToString([]byte(localPath(r.URL.Query().Get("next"), Prefix)))
	// The callback is a cross-site navigation from the issuer: this cookie
	// must be Lax to come back with it. It holds no credential.
	http.SetCookie(w, &http.Cookie{
		Name: oidcCookieName, Value: strings.Join([]string{state, nonce, verifier, next}, "."),
		Path: Prefix + "oidc/", MaxAge: 600, HttpOnly: true, Secure: c.secure(r), SameSite: http.SameSiteLaxMode,
	})
	cfg := o.oauth(p, r)
	http.Redirect(w, r, cfg.AuthCodeURL(state, oidc.Nonce(nonce), oauth2.S256ChallengeOption(verifier)), http.StatusFound)
}

// oidcCallback finishes the sign-in: the state must match the cookie, the
// code is exchanged with the PKCE verifier, and the ID token is verified
// (issuer, audience, expiry, signature, nonce) before its claims are read.
func (c *Console) oidcCallback(w http.ResponseWriter, r *http.Request) {
	o := c.cfg.OIDC
	if o == nil {
		c.renderError(w, r, nil, http.StatusNotFound, "Not configured", "OpenID Connect sign-in is not configured.")
		return
	}
	refuse := func(why string, err error) {
		c.log.WarnContext(r.Context(), "OIDC sign-in refused", slog.String("reason", why), slog.Any("error", err))
		c.renderError(w, r, nil, http.StatusForbidden, "Sign-in refused", "The identity provider's answer could not be accepted ("+why+"). Start again from the sign-in page.")
	}
	ck, err := r.Cookie(oidcCookieName)
	if err != nil {
		refuse("the sign-in took too long or began elsewhere", err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: oidcCookieName, Path: Prefix + "oidc/", MaxAge: -1, HttpOnly: true, Secure: c.secure(r), SameSite: http.SameSiteLaxMode})
	parts := strings.Split(ck.Value, ".")
	idTok, why, err := o.verifyCallback(r, parts)
	if why != "" {
		refuse(why, err)
		return
	}
	in, err := o.signIn(idTok)
	if errors.Is(err, errNoRole) {
		c.renderError(w, r, nil, http.StatusForbidden, "No console role",
			"Your identity provider account has no group that maps to a console role (finance or on-call). Ask an administrator.")
		return
	}
	if err != nil {
		refuse("unreadable claims", err)
		return
	}
	next, _ := base64.RawURLEncoding.DecodeString(parts[3])
	c.startOIDCSession(w, r, in, string(next))
}

// verifyCallback checks an OIDC callback against the state, nonce and
// PKCE verifier its cookie kept (parts), exchanges the code and verifies
// the ID token. A refusal is a non-empty why, with the error to log if
// any.
func (o *OIDC) verifyCallback(r *http.Request, parts []string) (tok *oidc.IDToken, why string, err error) {
	q := r.URL.Query()
	if len(parts) != 4 || subtle.ConstantTimeCompare([]byte(parts[0]), []byte(q.Get("state"))) != 1 {
		return nil, "state mismatch", nil
	}
	if e := q.Get("error"); e != "" {
		return nil, "the identity provider said " + shorten(e, 64), nil
	}
	p, err := o.discover(r.Context())
	if err != nil {
		return nil, "identity provider unreachable", err
	}
	cfg := o.oauth(p, r)
	otok, err := cfg.Exchange(o.context(r.Context()), q.Get("code"), oauth2.VerifierOption(parts[2]))
	if err != nil {
		return nil, "the code exchange failed", err
	}
	raw, ok := otok.Extra("id_token").(string)
	if !ok {
		return nil, "no ID token", nil
	}
	tok, err = p.Verifier(&oidc.Config{ClientID: o.cfg.ClientID}).Verify(o.context(r.Context()), raw)
	if err != nil {
		return nil, "the ID token did not verify", err
	}
	if subtle.ConstantTimeCompare([]byte(tok.Nonce), []byte(parts[1])) != 1 {
		return nil, "nonce mismatch", nil
	}
	return tok, "", nil
}

// startOIDCSession signs in as the principal the identity maps to and
// starts its console session, then moves on to next.
func (c *Console) startOIDCSession(w http.ResponseWriter, r *http.Request, in access.OIDCSignIn, next string) {
	principal, err := c.cfg.Access.SignInOIDC(r.Context(), in)
	switch {
	case errors.Is(err, access.ErrPrincipalDisabled):
		c.log.InfoContext(r.Context(), "OIDC sign-in refused: principal disabled", slog.String("issuer", in.Issuer), slog.String("subject", in.Subject))
		c.renderError(w, r, nil, http.StatusForbidden, "Principal disabled",
			"Your Quittance principal is disabled, so you cannot sign in. An on-call person disabled it; ask them.")
		return
	case errors.Is(err, access.ErrRoleNotHeld):
		c.renderError(w, r, nil, http.StatusForbidden, "No console role",
			"Your identity provider account is linked to a Quittance principal whose role your groups at the identity provider do not give you. Ask an administrator.")
		return
	case err != nil:
		c.fail(w, r, nil, err)
		return
	}
	id, sess, err := c.cfg.Sessions.Start(r.Context(), principal, session.SourceOIDC)
	if err != nil {
		c.fail(w, r, nil, err)
		return
	}
	c.setCookie(w, r, sessionCookieName, id, sess.ExpiresAt.Sub(sess.CreatedAt))
	c.log.InfoContext(r.Context(), "console session started", slog.String("principal", principal.Name),
		slog.String("role", string(principal.Role)), slog.String("source", string(session.SourceOIDC)))
	// The browser arrived from the issuer's site: a redirect would carry
	// that cross-site origin on, and the SameSite=Strict session cookie
	// would not be sent. A page of our own moves on instead.
	c.render(w, r, nil, http.StatusOK, "signed-in", view{Title: "Signed in", Data: localPath(next, Prefix)})
}
