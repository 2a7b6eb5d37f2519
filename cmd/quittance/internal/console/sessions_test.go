package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/report"
)

// TestSessions: a session is a hashed random id in PostgreSQL, with the
// cookie flags the console promises; it expires, ends with sign-out
// (the row is deleted) and with the revocation of its token; the token
// never reaches the page or the cookie; orchestrators cannot sign in.
func TestSessions(t *testing.T) {
	w := newWorld(t)
	b := w.client(t)
	form := b.get("/console/sign-in")
	res := b.do(http.MethodPost, "/console/sign-in", url.Values{"csrf": {form.csrf(t)}, "token": {w.finance}})
	if res.status != http.StatusSeeOther {
		t.Fatalf("sign in: %d", res.status)
	}
	var cookie string
	for _, c := range res.header.Values("Set-Cookie") {
		if strings.HasPrefix(c, "quittance_session=") {
			cookie = c
		}
	}
	if !strings.Contains(cookie, "HttpOnly") || !strings.Contains(cookie, "SameSite=Strict") || !strings.Contains(cookie, "Path=/console/") ||
		strings.Contains(cookie, w.finance) || strings.Contains(cookie, "Secure") {
		t.Fatalf("session cookie over plain http: %q", cookie)
	}
	count := func() int {
		var n int
		if err := w.Pool.QueryRow(t.Context(), `SELECT count(*) FROM console_sessions`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if count() != 1 {
		t.Fatalf("%d session rows", count())
	}
	var stored int
	if err := w.Pool.QueryRow(t.Context(), `SELECT count(*) FROM console_sessions WHERE position(convert_to($1, 'UTF8') in id_hash) > 0`, w.finance).Scan(&stored); err != nil || stored != 0 {
		t.Fatalf("the token is in the session table (%d, %v)", stored, err)
	}
	if p := b.get("/console/"); p.status != http.StatusOK {
		t.Fatalf("overview: %d", p.status)
	}
	// Sign-out deletes the row; the old cookie opens nothing.
	old := b.client.Jar.Cookies(mustURL(t, w.URL+"/console/"))
	if res := b.post("/console/", "/console/sign-out", nil); res.status != http.StatusSeeOther {
		t.Fatalf("sign out: %d", res.status)
	}
	if count() != 0 {
		t.Fatal("sign-out left the session row")
	}
	b.client.Jar.SetCookies(mustURL(t, w.URL+"/console/"), old)
	if p := b.get("/console/"); p.status != http.StatusSeeOther {
		t.Fatalf("after sign-out, the old cookie got %d", p.status)
	}

	// Expiry: 8 hours by default.
	b.signIn(w.finance)
	w.Clock.Advance(8*time.Hour + time.Second)
	if p := b.get("/console/"); p.status != http.StatusSeeOther {
		t.Fatalf("an expired session got %d", p.status)
	}
	// Revoking the token ends its sessions.
	b.signIn(w.oncall2)
	if _, err := w.Pool.Exec(t.Context(), `UPDATE api_tokens SET revoked_at = now() WHERE name = 'oncall-2'`); err != nil {
		t.Fatal(err)
	}
	if p := b.get("/console/"); p.status != http.StatusSeeOther {
		t.Fatalf("a revoked token's session got %d", p.status)
	}
	// Orchestrators have no console.
	form = b.get("/console/sign-in")
	res = b.do(http.MethodPost, "/console/sign-in", url.Values{"csrf": {form.csrf(t)}, "token": {w.orch}})
	if res.status != http.StatusForbidden {
		t.Fatalf("orchestrator sign-in: %d", res.status)
	}
	res.contains(t, "for on-call and finance")
	res.lacks(t, w.orch)
}

func mustURL(t *testing.T, raw string) *url.URL {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestScorecard: exposure by currency, cancel-to-ack times, the share
// written off and unconfirmed aging, per org over a period.
func TestScorecard(t *testing.T) {
	w := newWorld(t)
	b := w.client(t)
	b.signIn(w.OncallToken)
	// The small unconfirmed obligation is within the threshold: written off at once.
	self := "/console/delegations/" + w.small.ID
	if res := b.post(self, self+"/write-offs", url.Values{"reason": {"small, not worth chasing"}}); res.status != http.StatusSeeOther {
		t.Fatalf("write-off: %d %s", res.status, res.body)
	}
	overview := report.NewOverview(report.OverviewConfig{Store: w.Store.Overview(), Clock: w.Clock})
	cards, _, err := overview.Scorecard(t.Context(), ledger.Principal{Role: ledger.RoleFinance}, report.ScorecardQuery{})
	if err != nil || len(cards) != 1 {
		t.Fatalf("scorecards %+v, %v", cards, err)
	}
	c := cards[0]
	if len(c.Exposure) != 1 || c.Exposure[0].AmountMinor != 340_000 || c.Exposure[0].Count != 5 || c.Exposure[0].Currency != "EUR" {
		t.Fatalf("exposure %+v", c.Exposure)
	}
	if c.Acks != 1 || c.AckMedian != 20*time.Minute || c.AckP90 != 20*time.Minute {
		t.Fatalf("acks %d, median %v, p90 %v", c.Acks, c.AckMedian, c.AckP90)
	}
	if c.Resolved != 2 || c.WrittenOff != 1 || c.WrittenOffShare() != 0.5 {
		t.Fatalf("resolved %d, written off %d", c.Resolved, c.WrittenOff)
	}
	if c.Unconfirmed.Total != 1 || c.Unconfirmed.Under1Day != 1 {
		t.Fatalf("unconfirmed %+v", c.Unconfirmed)
	}
	// A period before anything happened has exposure but no outcomes.
	old, _, err := overview.Scorecard(t.Context(), ledger.Principal{Role: ledger.RoleFinance}, report.ScorecardQuery{
		Since: w.Clock.Now().Add(-400 * 24 * time.Hour), Until: w.Clock.Now().Add(-300 * 24 * time.Hour),
	})
	if err != nil || len(old) != 1 || old[0].Acks != 0 || old[0].Resolved != 0 {
		t.Fatalf("old period %+v, %v", old, err)
	}
	b.get("/console/orgs").contains(t, "20m", "50.0%")
}
