package console_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/ledger"
)

const (
	ledgerID  = "ledger-test"
	orgID     = "org-b"
	budgetID  = "ops"
	threshold = 100_000
)

// world is a running API and console with a realistic set of
// obligations: two compensation_unconfirmed (one above the write-off
// threshold), one compensated by a signed ack, one awaiting
// compensation, and a few held.
type world struct {
	*apitest.Env
	orch    string
	oncall2 string
	finance string
	signer  *compensationtest.Signer
	// big and small are compensation_unconfirmed, big above the threshold;
	// acked was compensated by a verified ack; pending awaits compensation.
	big, small, acked, pending httpapi.DelegationBody
}

func newWorld(t *testing.T, opts ...apitest.Option) *world {
	t.Helper()
	opts = append([]apitest.Option{apitest.WithLedgerID(ledgerID), apitest.WithWriteOffThreshold(threshold)}, opts...)
	e := apitest.New(t, opts...)
	w := &world{Env: e, signer: compensationtest.NewEd25519Signer(t, "b-key-1")}
	w.orch = e.NewOrchestrator(t, "acme")
	w.oncall2 = e.NewToken(t, ledger.RoleOncall, "", "oncall-2")
	w.finance = e.NewToken(t, ledger.RoleFinance, "", "finance-1")
	e.PutBudget(t, budgetID, "EUR", 10_000_000)
	r := e.Do(t, http.MethodPut, "/admin/v1/orgs/"+orgID, e.OncallToken, map[string]any{"name": "Bolt Supplies", "jwks": json.RawMessage(w.signer.JWKS())})
	if r.Status != http.StatusCreated {
		t.Fatalf("register org: %d %s", r.Status, r.Body)
	}
	n := 0
	create := func(amount int64) httpapi.DelegationBody {
		n++
		return e.CreateDelegation(t, w.orch, apitest.NewCreateRequest(fmt.Sprintf("po-%d", n), orgID, "procurement", budgetID, amount, "EUR"))
	}
	cancel := func(d httpapi.DelegationBody) httpapi.DelegationBody {
		e.Do(t, http.MethodPost, "/v1/delegations/"+d.ID+"/cancel", w.orch, nil).Expect(t, http.StatusOK)
		return e.ReportStatus(t, w.orch, d.ID, "TASK_STATE_CANCELED", time.Time{})
	}
	w.big = cancel(create(250_000))
	w.small = cancel(create(40_000))
	e.Clock.Advance(90 * time.Minute)
	w.acked = cancel(create(75_000))
	e.Clock.Advance(20 * time.Minute)
	ack := w.signer.Sign(t, string(compensation.KindAck),
		compensationtest.AckClaims(orgID, ledgerID, w.acked.Remote.TaskID, w.acked.Compensation.IdempotencyKey, e.Clock.Now()))
	req, _ := http.NewRequest(http.MethodPost, e.URL+"/v1/compensation/acks", strings.NewReader(ack))
	req.Header.Set("Content-Type", "application/jose")
	e.Send(t, req).Expect(t, http.StatusOK)
	for range 3 {
		create(10_000)
	}
	// 73 hours later the first two are past their compensation deadline.
	e.Clock.Advance(71 * time.Hour)
	w.pending = cancel(create(60_000))
	e.Clock.Advance(2 * time.Hour)
	e.Do(t, http.MethodPost, "/admin/v1/compensation/sweep", e.OncallToken, nil).Expect(t, http.StatusOK)
	for _, d := range []*httpapi.DelegationBody{&w.big, &w.small, &w.acked, &w.pending} {
		*d = e.Delegation(t, w.orch, d.ID)
	}
	if w.big.ObligationState != string(ledger.ObligationCompensationUnconfirmed) || w.acked.ObligationState != string(ledger.ObligationCompensated) ||
		w.pending.ObligationState != string(ledger.ObligationRevocationPendingCompensation) {
		t.Fatalf("world: big %s, acked %s, pending %s", w.big.ObligationState, w.acked.ObligationState, w.pending.ObligationState)
	}
	return w
}

// browserless is a console client without a browser: a cookie jar and
// the console's forms, posted as a browser would post them.
type browserless struct {
	t      testing.TB
	w      *world
	client *http.Client
}

func (w *world) client(t testing.TB) *browserless {
	jar, _ := cookiejar.New(nil)
	return &browserless{t: t, w: w, client: &http.Client{
		Jar: jar, Timeout: 20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

type page struct {
	status   int
	body     string
	location string
	header   http.Header
}

func (b *browserless) do(method, path string, form url.Values) page {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.w.URL+path, body)
	if err != nil {
		b.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := b.client.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return page{status: resp.StatusCode, body: string(raw), location: resp.Header.Get("Location"), header: resp.Header}
}

func (b *browserless) get(path string) page { return b.do(http.MethodGet, path, nil) }

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf is the anti-forgery token of a page's forms.
func (p page) csrf(t testing.TB) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(p.body)
	if m == nil {
		t.Fatalf("no CSRF token on the page:\n%s", p.body)
	}
	return m[1]
}

// signIn signs in with an API token through the sign-in form.
func (b *browserless) signIn(token string) {
	b.t.Helper()
	form := b.get("/console/sign-in")
	res := b.do(http.MethodPost, "/console/sign-in", url.Values{"csrf": {form.csrf(b.t)}, "token": {token}, "next": {"/console/"}})
	if res.status != http.StatusSeeOther || res.location != "/console/" {
		b.t.Fatalf("sign in: %d %s\n%s", res.status, res.location, res.body)
	}
}

// post posts a form with the session's CSRF token, read from path.
func (b *browserless) post(from, path string, form url.Values) page {
	b.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	form.Set("csrf", b.get(from).csrf(b.t))
	return b.do(http.MethodPost, path, form)
}

// contains fails unless every string is in the page.
func (p page) contains(t *testing.T, what ...string) {
	t.Helper()
	for _, s := range what {
		if !strings.Contains(p.body, s) {
			t.Fatalf("page (status %d) lacks %q:\n%s", p.status, s, p.body)
		}
	}
}

func (p page) lacks(t *testing.T, what ...string) {
	t.Helper()
	for _, s := range what {
		if strings.Contains(p.body, s) {
			t.Fatalf("page (status %d) has %q:\n%s", p.status, s, p.body)
		}
	}
}

// eventCount counts a delegation's events of a type, straight from the database.
func (w *world) eventCount(t *testing.T, id string, typ ledger.EventType) int {
	t.Helper()
	var n int
	if err := w.Pool.QueryRow(t.Context(), `SELECT count(*) FROM events WHERE delegation_id = $1 AND type = $2`, id, string(typ)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (w *world) totalEvents(t *testing.T) int {
	t.Helper()
	var n int
	if err := w.Pool.QueryRow(t.Context(), `SELECT count(*) FROM events`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

var (
	delegationLinks = regexp.MustCompile(`<td><a href="/console/delegations/([0-9a-f-]{36})"[ >]`)
	exportLink      = regexp.MustCompile(`<a href="([^"]+)" download>`)
	nextLink        = regexp.MustCompile(`<a href="([^"]+)" rel="next">`)
	hiddenIDs       = regexp.MustCompile(`<input type="hidden" name="id" value="([0-9a-f-]{36})">`)
)
