package console

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/session"
)

// Cookie names. The session cookie holds the random session id; the
// sign-in cookie holds the anti-forgery value of the sign-in form, before
// there is a session.
const (
	sessionCookieName = "quittance_session"
	signInCookieName  = "quittance_sign_in"
)

func sessionCookie(r *http.Request) string {
	ck, err := r.Cookie(sessionCookieName)
	if err != nil {
		return ""
	}
	return ck.Value
}

// secure reports whether cookies set in answer to r are marked Secure.
func (c *Console) secure(r *http.Request) bool { return r.TLS != nil || c.cfg.SecureCookies }

// setCookie sets an HttpOnly, SameSite=Strict cookie scoped to the console.
func (c *Console) setCookie(w http.ResponseWriter, r *http.Request, name, value string, maxAge time.Duration) {
	http.SetCookie(w, &http.Cookie{
		Name: name, Value: value, Path: Prefix, MaxAge: int(maxAge / time.Second),
		HttpOnly: true, Secure: c.secure(r), SameSite: http.SameSiteStrictMode,
	})
}

func (c *Console) clearCookie(w http.ResponseWriter, r *http.Request, name string) {
	http.SetCookie(w, &http.Cookie{
		Name: name, Value: "", Path: Prefix, MaxAge: -1,
		HttpOnly: true, Secure: c.secure(r), SameSite: http.SameSiteStrictMode,
	})
}

func randomValue() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms.
	return base64.RawURLEncoding.EncodeToString(b)
}

// signInPage is the data of the sign-in form.
type signInPage struct {
	Next string
}

// signInForm shows the sign-in form. The form's anti-forgery value is a
// random value also set as a cookie: a page of another site can submit
// neither.
func (c *Console) signInForm(w http.ResponseWriter, r *http.Request) {
	if sess, err := c.cfg.Sessions.Resolve(r.Context(), sessionCookie(r)); err == nil {
		if c.charge(w, r, sess.Principal) {
			redirect(w, r, localPath(r.URL.Query().Get("next"), Prefix))
		}
		return
	}
	c.renderSignIn(w, r, http.StatusOK, nil)
}

func (c *Console) renderSignIn(w http.ResponseWriter, r *http.Request, status int, errs map[string]string) {
	token := randomValue()
	c.setCookie(w, r, signInCookieName, token, 30*time.Minute)
	next := r.URL.Query().Get("next")
	if r.Method == http.MethodPost {
		next = r.PostFormValue("next")
	}
	c.render(w, r, nil, status, "sign-in", view{
		Title: "Sign in", CSRF: token, Errors: errs,
		Data: signInPage{Next: localPath(next, Prefix)},
	})
}

// signIn starts a session with an existing API token. The token is read
// from the form body only, checked with the API's own authentication, and
// never stored, shown or logged: the session keeps the token's id.
func (c *Console) signIn(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	ck, err := r.Cookie(signInCookieName)
	form := r.PostFormValue("csrf")
	if err != nil || ck.Value == "" || subtle.ConstantTimeCompare([]byte(ck.Value), []byte(form)) != 1 || !sameOrigin(r) {
		c.renderError(w, r, nil, http.StatusForbidden, "Form refused",
			"This sign-in form did not come from this console (its anti-forgery token is missing or wrong). Reload the sign-in page and try again.")
		return
	}
	secret := strings.TrimSpace(r.PostFormValue("token"))
	if secret == "" {
		c.renderSignIn(w, r, http.StatusUnprocessableEntity, map[string]string{"token": "Paste your API token."})
		return
	}
	p, err := c.cfg.Access.Authenticate(r.Context(), secret)
	switch {
	case errors.Is(err, ledger.ErrUnauthenticated):
		c.log.InfoContext(r.Context(), "console sign-in refused: unknown or revoked token")
		c.renderSignIn(w, r, http.StatusUnprocessableEntity, map[string]string{"token": "This token is not valid (unknown or revoked)."})
		return
	case err != nil:
		c.fail(w, r, nil, err)
		return
	}
	if !c.charge(w, r, p) {
		return
	}
	c.startSession(w, r, p, session.SourceToken, r.PostFormValue("next"))
}

// startSession begins a session for p and sends the browser on. Only the
// roles that may use the console (ledger.ActionUseConsole) may sign in.
func (c *Console) startSession(w http.ResponseWriter, r *http.Request, p ledger.Principal, src session.Source, next string) {
	if !p.Permits(ledger.ActionUseConsole) {
		c.renderSignIn(w, r, http.StatusForbidden, map[string]string{
			"token": "The console is for on-call and finance; a " + string(p.Role) + " credential cannot sign in.",
		})
		return
	}
	id, sess, err := c.cfg.Sessions.Start(r.Context(), p, src)
	if err != nil {
		c.fail(w, r, nil, err)
		return
	}
	// Expired sessions are refused anyway; each sign-in also clears them
	// away, so the table holds about one row per live session.
	if _, err := c.cfg.Sessions.Sweep(r.Context()); err != nil {
		c.log.WarnContext(r.Context(), "sweep expired console sessions", slog.Any("error", err))
	}
	c.clearCookie(w, r, signInCookieName)
	c.setCookie(w, r, sessionCookieName, id, sess.ExpiresAt.Sub(sess.CreatedAt))
	c.log.InfoContext(r.Context(), "console session started", slog.String("principal", p.Name),
		slog.String("role", string(p.Role)), slog.String("source", string(src)))
	redirect(w, r, localPath(next, Prefix))
}

// signOut ends the session: its row is deleted, so no replica accepts it.
func (c *Console) signOut(w http.ResponseWriter, r *http.Request, q *request) {
	if err := c.cfg.Sessions.End(r.Context(), q.sessionID); err != nil {
		c.fail(w, r, q, err)
		return
	}
	c.clearCookie(w, r, sessionCookieName)
	c.log.InfoContext(r.Context(), "console session ended", slog.String("principal", q.p.Name))
	redirect(w, r, Prefix+"sign-in?"+url.Values{"done": {"signed_out"}}.Encode())
}
