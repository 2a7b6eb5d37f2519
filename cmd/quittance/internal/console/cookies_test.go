package console_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/ledger"
)

// TestSecureCookies: with secure cookies configured (the service behind a
// TLS-terminating proxy), the sign-in and session cookies are Secure, as
// well as HttpOnly and SameSite=Strict, and the session works.
func TestSecureCookies(t *testing.T) {
	w := newWorld(t, apitest.WithSecureCookies())
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	send := func(method, path, cookie string, form url.Values) (*http.Response, string) {
		t.Helper()
		var body io.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		}
		req, err := http.NewRequest(method, w.URL+path, body)
		if err != nil {
			t.Fatal(err)
		}
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		if cookie != "" {
			req.Header.Set("Cookie", cookie)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp, string(raw)
	}
	// cookie returns the named cookie of a response, checking its flags.
	cookie := func(resp *http.Response, name string) *http.Cookie {
		t.Helper()
		for _, c := range resp.Cookies() {
			if c.Name != name {
				continue
			}
			if !c.Secure || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/console/" {
				t.Fatalf("cookie %s: %q, want Secure, HttpOnly, SameSite=Strict, Path=/console/", name, resp.Header.Values("Set-Cookie"))
			}
			return c
		}
		t.Fatalf("no %s cookie in %q", name, resp.Header.Values("Set-Cookie"))
		return nil
	}
	resp, body := send(http.MethodGet, "/console/sign-in", "", nil)
	signInCookie := cookie(resp, "quittance_sign_in")
	token := page{body: body}.csrf(t)
	resp, _ = send(http.MethodPost, "/console/sign-in", signInCookie.Name+"="+signInCookie.Value,
		url.Values{"csrf": {token}, "token": {w.finance}, "next": {"/console/"}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign in: %d", resp.StatusCode)
	}
	sess := cookie(resp, "quittance_session")
	if strings.Contains(sess.Value, w.finance) {
		t.Fatal("the session cookie holds the token")
	}
	if resp, _ := send(http.MethodGet, "/console/", sess.Name+"="+sess.Value, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("overview with the Secure session cookie: %d", resp.StatusCode)
	}
}

// logBuffer is an io.Writer safe for the service's concurrent logging.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestLogHoldsNoSecrets: after sign-ins (one refused), console actions,
// refused forms, API calls with bearer tokens and sign-out, the service's
// whole log, at debug level, holds no bearer token, no session id and no
// CSRF token, while it does record the sign-ins and actions.
func TestLogHoldsNoSecrets(t *testing.T) {
	var buf logBuffer
	w := newWorld(t, apitest.WithLog(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	a, b := w.client(t), w.client(t)
	a.signIn(w.OncallToken)
	b.signIn(w.oncall2)
	self := "/console/delegations/" + w.big.ID
	if res := a.post(self, self+"/notes", url.Values{"note": {"Called Bolt"}}); res.status != http.StatusSeeOther {
		t.Fatalf("note: %d", res.status)
	}
	if res := a.post(self, self+"/write-offs", url.Values{"reason": {"Bolt unreachable"}}); res.status != http.StatusSeeOther {
		t.Fatalf("write-off: %d", res.status)
	}
	list, err := w.Compensation.WriteOffs(t.Context(), ledger.Principal{Role: ledger.RoleFinance}, compensation.WriteOffFilter{})
	if err != nil || len(list) != 1 {
		t.Fatalf("write-offs: %v %v", list, err)
	}
	if res := b.post("/console/write-offs", "/console/write-offs/"+list[0].ID.String()+"/approve", nil); res.status != http.StatusSeeOther {
		t.Fatalf("approve: %d", res.status)
	}
	// A form without its token, and a sign-in with a wrong token.
	if res := a.do(http.MethodPost, self+"/notes", url.Values{"note": {"no token"}}); res.status != http.StatusForbidden {
		t.Fatalf("note without CSRF token: %d", res.status)
	}
	wrong := w.finance[:len(w.finance)-4] + "AAAA"
	f := w.client(t)
	form := f.get("/console/sign-in")
	if res := f.do(http.MethodPost, "/console/sign-in", url.Values{"csrf": {form.csrf(t)}, "token": {wrong}}); res.status != http.StatusUnprocessableEntity {
		t.Fatalf("sign-in with a wrong token: %d", res.status)
	}
	f.signIn(w.finance)
	w.Do(t, http.MethodGet, "/v1/delegations/"+w.big.ID, w.orch, nil).Expect(t, http.StatusOK)
	w.Do(t, http.MethodGet, "/admin/v1/budgets/"+budgetID, "qt_not_a_real_token", nil).Expect(t, http.StatusUnauthorized)

	var secrets []string
	for _, c := range []*browserless{a, b, f} {
		for _, ck := range c.client.Jar.Cookies(mustURL(t, w.URL+"/console/")) {
			secrets = append(secrets, ck.Value)
		}
		secrets = append(secrets, c.get("/console/").csrf(t))
	}
	if res := a.post("/console/", "/console/sign-out", nil); res.status != http.StatusSeeOther {
		t.Fatalf("sign out: %d", res.status)
	}
	secrets = append(secrets, w.OncallToken, w.oncall2, w.finance, w.orch, wrong, "qt_not_a_real_token")
	log := buf.String()
	for _, want := range []string{"console session started", "console session ended", "console form refused"} {
		if !strings.Contains(log, want) {
			t.Fatalf("the log lacks %q; is it wired?\n%s", want, log)
		}
	}
	for _, s := range secrets {
		if len(s) < 16 {
			t.Fatalf("secret %q is too short to look for", s)
		}
		if strings.Contains(log, s) {
			t.Fatalf("the service log holds a secret (%s…):\n%s", s[:6], log)
		}
	}
}
