package console_test

import (
	"context"
	"crypto"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/pgcluster"
)

var (
	chromiumOnce sync.Once
	chromiumExec string
	chromiumErr  error
)

// chromium finds headless Chromium (Debian's chromium package), installing
// it with apt-get when it is missing and the tests run as root. The
// browser tests fail, never skip, without it.
func chromium(t *testing.T) string {
	t.Helper()
	chromiumOnce.Do(func() {
		find := func() string {
			for _, name := range []string{"chromium", "chromium-browser"} {
				if p, err := exec.LookPath(name); err == nil {
					return p
				}
			}
			return ""
		}
		if chromiumExec = find(); chromiumExec != "" {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		if err := pgcluster.AptInstall(ctx, nil, "chromium"); errors.Is(err, pgcluster.ErrAptUnavailable) {
			chromiumErr = errors.New("the console's browser tests need headless Chromium, which " + err.Error() +
				": install Debian's chromium package (apt-get install chromium)")
			return
		} else if err != nil {
			chromiumErr = fmt.Errorf("install chromium: %w", err)
			return
		}
		if chromiumExec = find(); chromiumExec == "" {
			chromiumErr = errors.New("chromium was installed but is not on PATH")
		}
	})
	if chromiumErr != nil {
		t.Fatal(chromiumErr)
	}
	return chromiumExec
}

// browser starts a fresh headless Chromium for the test, with the flags
// this machine's closed network needs, and returns a tab's context.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1440, 1000),
	)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(cancelAlloc)
	tab, cancelTab := chromedp.NewContext(alloc, chromedp.WithErrorf(t.Logf))
	t.Cleanup(cancelTab)
	return tab
}

// screenshotDir is the git-ignored folder the tests keep page screenshots
// in: screenshots/console at the repository's root.
func screenshotDir(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
	out := filepath.Join(dir, "screenshots", "console")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	return out
}

// tab is a browser tab driven by a test.
type tab struct {
	t    *testing.T
	ctx  context.Context
	base string
	dir  string
}

func (b *tab) do(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, actions...); err != nil {
		loc, _ := chromedp.Run(b.ctx, chromedp.Location())
		b.t.Fatalf("browser at %s: %v", loc, err)
	}
}

// leaveBy runs actions that load a new page (a click on a form's button)
// and waits until that page has replaced the current one and shows ready.
// Waiting for ready alone could match the page being left.
func (b *tab) leaveBy(ready string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	b.eval(`document.documentElement.dataset.leaving = "yes"`)
	b.do(actions...)
	deadline := time.Now().Add(10 * time.Second)
	for {
		// While the new page loads the script may find no document, or
		// its context destroyed: that is not yet the new page either.
		left, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](
			`document.documentElement !== null && document.documentElement.dataset.leaving !== "yes"`))
		if err == nil && left {
			break
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("still at %s 10s later (%v)", b.location(), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.do(chromedp.WaitVisible(chromedp.CSS(ready)))
}

func (b *tab) open(path string, ready string) {
	b.t.Helper()
	b.do(chromedp.Navigate(b.base+path), chromedp.WaitVisible(chromedp.CSS(ready)))
}

func (b *tab) text(css string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(css)))
	if err != nil {
		b.t.Fatalf("text of %s: %v", css, err)
	}
	return s
}

func (b *tab) eval(js string) any {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[any](js, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

func (b *tab) present(css string) bool {
	b.t.Helper()
	return b.eval(`document.querySelector(`+jsString(css)+`) !== null`) == true
}

func (b *tab) location() string {
	b.t.Helper()
	loc, err := chromedp.Run(b.ctx, chromedp.Location())
	if err != nil {
		b.t.Fatal(err)
	}
	return loc
}

// shot keeps a PNG of the whole page.
func (b *tab) shot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(b.dir, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// signIn signs in through the form, from wherever the tab is.
func (b *tab) signIn(token, landing string) {
	b.t.Helper()
	b.open("/console/sign-in", "#token")
	b.do(chromedp.SendKeys(chromedp.ID("token"), token), chromedp.Submit(chromedp.ID("token")), chromedp.WaitVisible(chromedp.CSS(landing)))
}

func (b *tab) signOut() {
	b.t.Helper()
	b.do(chromedp.Click(chromedp.CSS(".me button")), chromedp.WaitVisible(chromedp.ID("token")))
}

// postFromPage posts a form from the page's own script, as a crafted
// request would, with the page's CSRF token unless withCSRF is false, and
// returns the status.
func (b *tab) postFromPage(path, body string, withCSRF bool) int {
	b.t.Helper()
	csrf := `''`
	if withCSRF {
		csrf = `'csrf=' + encodeURIComponent(document.querySelector('input[name=csrf]').value) + '&'`
	}
	v := b.eval(`fetch(` + jsString(path) + `, {method: 'POST', headers: {'Content-Type': 'application/x-www-form-urlencoded'}, body: ` + csrf + ` + ` + jsString(body) + `}).then(r => r.status)`)
	f, _ := v.(float64)
	return int(f)
}

func jsString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// TestBrowserWalkthrough drives the console in headless Chromium through
// what on-call and finance do: sign in, find a compensation_unconfirmed
// obligation by filter, read its timeline and a verified piece of
// evidence, request a write-off above the threshold, approve it as a
// second on-call person, see the budget change on the overview; finance
// sees no write-off control and its crafted POST is refused; a form
// posted without its CSRF token is refused. Each main page is kept as a
// screenshot.
func TestBrowserWalkthrough(t *testing.T) {
	w := newWorld(t)
	b := &tab{t: t, ctx: browser(t), base: w.URL, dir: screenshotDir(t)}

	// Signed out, the obligations page leads to the sign-in form and back.
	b.open("/console/obligations", "#token")
	if !strings.Contains(b.location(), "/console/sign-in?next=") {
		t.Fatalf("signed out: at %s", b.location())
	}
	b.shot("sign-in")
	b.do(chromedp.SendKeys(chromedp.ID("token"), w.OncallToken), chromedp.Submit(chromedp.ID("token")),
		chromedp.WaitVisible(chromedp.CSS("table.obligations")))

	// Find the unconfirmed obligations by filter.
	b.do(chromedp.Click(chromedp.CSS(`input[name=state][value=compensation_unconfirmed]`)))
	b.leaveBy(`input[name=state][value=compensation_unconfirmed]:checked`,
		chromedp.Click(chromedp.CSS(`.filters .actions button`)))
	if loc := b.location(); !strings.Contains(loc, "state=compensation_unconfirmed") {
		t.Fatalf("the filter is not in the URL: %s", loc)
	}
	list := b.text("table.obligations tbody")
	if !strings.Contains(list, "2,500.00 EUR") || !strings.Contains(list, "400.00 EUR") || strings.Contains(list, "600.00 EUR") {
		t.Fatalf("filtered list:\n%s", list)
	}
	b.shot("obligations")

	// Open it: both lifecycles, the hold, the timeline.
	b.do(chromedp.Click(chromedp.CSS(`a[href="/console/delegations/`+w.big.ID+`"]`)), chromedp.WaitVisible(chromedp.ID("timeline-h")))
	if s := b.text("#obligation-state"); !strings.Contains(s, "Compensation unconfirmed") {
		t.Fatalf("state: %q", s)
	}
	timeline := b.text("ol.timeline")
	for _, want := range []string{"compensation_deadline_passed", "task_status_changed", "cancel_requested", "delegation_created"} {
		if !strings.Contains(timeline, want) {
			t.Fatalf("timeline lacks %s:\n%s", want, timeline)
		}
	}
	if s := b.text("#chain"); !strings.Contains(s, "chain verified") {
		t.Fatalf("chain: %q", s)
	}
	b.shot("delegation")

	// Verified evidence: the ack of another obligation, with its key id
	// and thumbprint.
	b.open("/console/delegations/"+w.acked.ID, ".evidence .verified")
	jwk := w.signer.PublicJWK()
	tp, err := jwk.Thumbprint(crypto.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	ev := b.text(".evidence .verified")
	if !strings.Contains(ev, "b-key-1") || !strings.Contains(ev, base64.RawURLEncoding.EncodeToString(tp)) || !strings.Contains(ev, string(compensation.KindAck)) {
		t.Fatalf("evidence: %q", ev)
	}
	b.shot("delegation-evidence")

	// Request a write-off above the threshold; its requester cannot approve it.
	b.open("/console/", "#budgets")
	if s := b.text(`tr[data-budget="ops"] .written-off`); s != "0.00 EUR" {
		t.Fatalf("written off before: %q", s)
	}
	b.open("/console/delegations/"+w.big.ID, "#wo-reason")
	b.do(chromedp.SendKeys(chromedp.ID("wo-reason"), "Bolt Supplies has not answered for three days; finance accepts the loss."),
		chromedp.Click(chromedp.ID("request-write-off")), chromedp.WaitVisible(chromedp.CSS("p.pending")))
	if s := b.text("p.notice"); s != "Write-off requested." {
		t.Fatalf("notice: %q", s)
	}
	if b.present("#approve") {
		t.Fatal("the requester is offered to approve their own write-off")
	}

	// A form posted without its CSRF token is refused, and nothing changes.
	notes := w.eventCount(t, w.big.ID, ledger.EventTypeCaseNoteAdded)
	if status := b.postFromPage("/console/delegations/"+w.big.ID+"/notes", "note=forged", false); status != 403 {
		t.Fatalf("note without a CSRF token: %d", status)
	}
	if w.eventCount(t, w.big.ID, ledger.EventTypeCaseNoteAdded) != notes {
		t.Fatal("a note without a CSRF token was recorded")
	}

	// A second on-call person approves it.
	b.signOut()
	b.signIn(w.oncall2, "#budgets")
	b.open("/console/write-offs", "#pending")
	b.shot("write-offs")
	b.do(chromedp.Click(chromedp.CSS(`tr[data-write-off] form[action$="/approve"] button`)), chromedp.WaitVisible(chromedp.CSS("p.notice")))
	if s := b.text("p.notice"); !strings.Contains(s, "approved") {
		t.Fatalf("notice: %q", s)
	}

	// The budget moved: the overview shows the written-off amount.
	b.open("/console/", "#budgets")
	if s := b.text(`tr[data-budget="ops"] .written-off`); s != "2,500.00 EUR" {
		t.Fatalf("written off after approval: %q", s)
	}
	b.shot("overview")
	for _, p := range []struct{ path, ready, name string }{
		{"/console/orgs", "table.scorecard", "orgs"},
		{"/console/orgs/" + orgID, "#keys-h", "org"},
		{"/console/anomalies", "h1", "anomalies"},
		{"/console/webhooks", "h1", "webhooks"},
		{"/console/principals", "#me-h", "principals"},
		{"/console/obligations?view=all", "table.obligations", "obligations-all"},
	} {
		b.open(p.path, p.ready)
		b.shot(p.name)
	}

	// Finance sees the figures and the export, no write-off or case
	// control, and a crafted POST is refused.
	b.signOut()
	b.signIn(w.finance, "#budgets")
	b.open("/console/delegations/"+w.small.ID, "#timeline-h")
	for _, css := range []string{"#request-write-off", "#wo-reason", "form#owner", "form#note", "form#snooze"} {
		if b.present(css) {
			t.Fatalf("finance is shown %s", css)
		}
	}
	before := w.totalEvents(t)
	if status := b.postFromPage("/console/delegations/"+w.small.ID+"/write-offs", "reason=crafted", true); status != 403 {
		t.Fatalf("finance's crafted write-off: %d", status)
	}
	if w.totalEvents(t) != before {
		t.Fatal("finance's crafted write-off recorded something")
	}
	b.open("/console/obligations", "table.obligations")
	if !b.present(`a[download]`) || b.present(`input[name=id]`) {
		t.Fatal("finance's obligations page: export missing or bulk selection shown")
	}
}

// TestBrowserPrincipalsAndRedrive: on-call revokes a credential from the
// principals page (the API refuses it with 401 afterwards), redrives
// compensation from a delegation's page, and redrives a selection of the
// obligations page through its preview; finance sees the principals
// without controls. The principals page and the redrive preview are kept
// as screenshots.
func TestBrowserPrincipalsAndRedrive(t *testing.T) {
	w := newWorld(t)
	b := &tab{t: t, ctx: browser(t), base: w.URL, dir: screenshotDir(t)}
	b.signIn(w.OncallToken, "#budgets")

	cred := tokenID(t, w.Env, w.orch)
	b.open("/console/principals", "#principals")
	if s := b.text(`tr[data-credential="` + cred + `"]`); !strings.Contains(s, "orchestrator-acme") || !strings.Contains(s, "Revoke") {
		t.Fatalf("the orchestrator's credential row: %q", s)
	}
	b.shot("principals")
	b.do(chromedp.SendKeys(chromedp.ID("revoke-reason-"+cred), "leaked in a CI log"))
	b.leaveBy("p.notice", chromedp.Click(chromedp.CSS(`#revoke-`+cred+` button`)))
	if s := b.text("p.notice"); !strings.Contains(s, "Credential revoked") {
		t.Fatalf("notice: %q", s)
	}
	if s := b.text(`tr[data-credential="` + cred + `"]`); !strings.Contains(s, "revoked") || !strings.Contains(s, "leaked in a CI log") {
		t.Fatalf("the revoked credential's row: %q", s)
	}
	w.Do(t, "GET", "/v1/delegations/"+w.big.ID, w.orch, nil).Expect(t, 401)

	// Redrive one obligation from its page.
	b.open("/console/delegations/"+w.big.ID, "#redrive-reason")
	b.do(chromedp.SendKeys(chromedp.ID("redrive-reason"), "Bolt's agent is back after the weekend"))
	b.leaveBy("p.notice", chromedp.Click(chromedp.ID("redrive-compensation")))
	if s := b.text("p.notice"); !strings.Contains(s, "Compensation redriven") {
		t.Fatalf("notice: %q", s)
	}
	if s := b.text("ol.timeline"); !strings.Contains(s, "compensation_redriven") {
		t.Fatalf("timeline after redrive:\n%s", s)
	}

	// Bulk: tick three rows, preview, confirm.
	b.open("/console/obligations", "table.obligations")
	for _, id := range []string{w.big.ID, w.small.ID, w.pending.ID} {
		b.do(chromedp.Click(chromedp.CSS(`input[name=id][value="` + id + `"]`)))
	}
	b.do(chromedp.Click(chromedp.CSS(`input[name=kind][value=redrive]`)), chromedp.SendKeys(chromedp.ID("b-redrive-reason"), "Bolt restored its agent"))
	before := w.totalEvents(t)
	b.leaveBy("#redrive-preview", chromedp.Click(chromedp.CSS(`fieldset.bulk button`)))
	if s := b.text("main"); !strings.Contains(s, "2 will be redriven, 1 cannot, 3 selected") {
		t.Fatalf("preview:\n%s", s)
	}
	if w.totalEvents(t) != before {
		t.Fatal("the preview recorded events")
	}
	b.shot("bulk-redrive")
	b.leaveBy("p.notice", chromedp.Click(chromedp.ID("confirm-redrive")))
	if s := b.text("p.notice"); !strings.Contains(s, "Compensation redriven") {
		t.Fatalf("notice: %q", s)
	}
	if n := w.totalEvents(t) - before; n != 2 {
		t.Fatalf("the bulk redrive recorded %d events, want 2", n)
	}

	// Finance: the principals without a control.
	b.signOut()
	b.signIn(w.finance, "#budgets")
	b.open("/console/principals", "#principals")
	for _, css := range []string{`form[action$="/revoke"]`, `form[action$="/disable"]`} {
		if b.present(css) {
			t.Fatalf("finance is shown %s", css)
		}
	}
}

// TestBrowserOrgKeyChange: one on-call person asks for an org's key
// change; a second one, in the browser, finds it on the org's page with
// the new key's thumbprint and approves it, and the key is registered.
func TestBrowserOrgKeyChange(t *testing.T) {
	e := newProduction(t)
	e.Do(t, "PUT", "/admin/v1/orgs/"+orgID, e.a.Token, map[string]any{"name": "Bolt Supplies"}).Expect(t, 201)
	signer := compensationtest.NewEd25519Signer(t, "b-key-2")
	id := pendingID(t, e.Do(t, "PUT", "/admin/v1/orgs/"+orgID, e.a.Token, map[string]any{
		"name": "Bolt Supplies", "jwks": json.RawMessage(signer.JWKS()),
	}))
	jwk := signer.PublicJWK()
	raw, err := jwk.Thumbprint(crypto.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	thumb := base64.RawURLEncoding.EncodeToString(raw)

	b := &tab{t: t, ctx: browser(t), base: e.URL, dir: screenshotDir(t)}
	b.signIn(e.a.Token, "#budgets-h")
	b.open("/console/orgs/"+orgID, "#org-changes")
	if b.present(`[data-change="` + id + `"] .approve-change`) {
		t.Fatal("the requester is offered to approve its own change")
	}
	b.signOut()
	b.signIn(e.b.Token, "#budgets-h")
	b.open("/console/orgs/"+orgID, "#org-changes")
	if s := b.text(`[data-change="` + id + `"]`); !strings.Contains(s, "b-key-2") || !strings.Contains(s, thumb) || !strings.Contains(s, "new") {
		t.Fatalf("the pending change: %q", s)
	}
	b.shot("org-change")
	b.leaveBy("p.notice", chromedp.Click(chromedp.CSS(`[data-change="`+id+`"] .approve-change`)))
	if s := b.text("p.notice"); !strings.Contains(s, "Change approved") {
		t.Fatalf("notice: %q", s)
	}
	if s := b.text("section[aria-labelledby=keys-h] table"); !strings.Contains(s, "b-key-2") || !strings.Contains(s, thumb) {
		t.Fatalf("registered keys after approval: %q", s)
	}
}
