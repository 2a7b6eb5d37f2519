package console_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/ledger"
)

// TestPagesRender: every main page renders for on-call, with the security
// headers, and the figures the world holds.
func TestPagesRender(t *testing.T) {
	w := newWorld(t)
	b := w.client(t)
	if p := b.get("/console/"); p.status != http.StatusSeeOther || !strings.HasPrefix(p.location, "/console/sign-in") {
		t.Fatalf("signed out overview: %d %s", p.status, p.location)
	}
	b.signIn(w.OncallToken)
	for _, path := range []string{
		"/console/", "/console/obligations", "/console/obligations?view=all", "/console/delegations/" + w.big.ID,
		"/console/delegations/" + w.acked.ID, "/console/write-offs", "/console/orgs", "/console/orgs/" + orgID,
		"/console/anomalies", "/console/webhooks", "/console/principals",
	} {
		p := b.get(path)
		if p.status != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", path, p.status, p.body)
		}
		csp := p.header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") {
			t.Fatalf("GET %s: CSP %q", path, csp)
		}
		if strings.Contains(p.body, "<script>") || strings.Contains(p.body, w.OncallToken) {
			t.Fatalf("GET %s: inline script or the credential in the page", path)
		}
	}
	b.get("/console/").contains(t, "2,500.00 EUR", "Compensation unconfirmed", "100,000.00 EUR")
	b.get("/console/obligations?state=compensation_unconfirmed").contains(t, w.big.ID, w.small.ID)
	b.get("/console/obligations?state=compensation_unconfirmed").lacks(t, w.pending.ID, w.acked.ID)
	b.get("/console/delegations/"+w.acked.ID).contains(t, "signature verified", "b-key-1", "compensation_acked", "chain verified",
		"spent 0.00 EUR, returned 750.00 EUR")
	b.get("/console/delegations/"+w.big.ID).lacks(t, "Where it went")
}

// TestFiltersSortAndKeyset: filters live in the query string, bad input
// is shown beside its field, pages follow each other without gaps or
// repeats, and the export holds exactly the rows on the page.
func TestFiltersSortAndKeyset(t *testing.T) {
	w := newWorld(t)
	b := w.client(t)
	b.signIn(w.finance)
	bad := b.get("/console/obligations?min=abc&currency=EUR&older=soon")
	if bad.status != http.StatusUnprocessableEntity {
		t.Fatalf("bad filters: %d", bad.status)
	}
	bad.contains(t, "use a plain amount", "use an age such as 72h or 7d")
	// An amount bound without a currency is refused beside its field, and
	// no obligation is listed or exported.
	for _, query := range []string{"min=1000", "max=1000", "view=all&min=10&max=5000"} {
		p := b.get("/console/obligations?" + query)
		if p.status != http.StatusUnprocessableEntity {
			t.Fatalf("%s without a currency: %d", query, p.status)
		}
		p.contains(t, `<span class="field-error" role="alert">choose a currency too: the amount is read in its units</span>`, `aria-invalid="true"`)
		if ids := delegationLinks.FindAllString(p.body, -1); len(ids) != 0 || strings.Contains(p.body, `class="obligations"`) {
			t.Fatalf("%s without a currency listed obligations", query)
		}
		if csv := b.get("/console/obligations.csv?" + query); csv.status != http.StatusUnprocessableEntity || strings.Contains(csv.body, w.big.ID) {
			t.Fatalf("export of %s without a currency: %d", query, csv.status)
		}
	}
	if p := b.get("/console/obligations?min=1000&currency=EUR"); p.status != http.StatusOK || strings.Contains(p.body, "choose a currency") {
		t.Fatalf("min with a currency: %d", p.status)
	}
	big := b.get("/console/obligations?view=all&min=1000&currency=EUR")
	big.contains(t, w.big.ID)
	big.lacks(t, w.small.ID)
	// All seven obligations, two per page, in every order: no gaps, no
	// repeats, and each export holds exactly its page's rows.
	for _, sort := range []string{"amount_desc", "amount_asc", "oldest", "newest", "deadline"} {
		seen := map[string]bool{}
		next := "/console/obligations?view=all&sort=" + sort + "&limit=2"
		var first string
		for pages := 0; next != ""; pages++ {
			if pages > 10 {
				t.Fatalf("%s: the pager does not end", sort)
			}
			p := b.get(next)
			ids := delegationLinks.FindAllStringSubmatch(p.body, -1)
			for _, m := range ids {
				if seen[m[1]] {
					t.Fatalf("%s: %s shown twice", sort, m[1])
				}
				seen[m[1]] = true
			}
			if first == "" && len(ids) > 0 {
				first = ids[0][1]
			}
			export := exportLink.FindStringSubmatch(p.body)
			csv := b.get(strings.ReplaceAll(export[1], "&amp;", "&"))
			if got := strings.Count(csv.body, "\r\n") - 1; got != len(ids) {
				t.Fatalf("export of %s has %d rows, the page %d", next, got, len(ids))
			}
			for _, m := range ids {
				if !strings.Contains(csv.body, m[1]) {
					t.Fatalf("export lacks %s", m[1])
				}
			}
			next = ""
			if m := nextLink.FindStringSubmatch(p.body); m != nil {
				next = strings.ReplaceAll(m[1], "&amp;", "&")
			}
		}
		if len(seen) != 7 {
			t.Fatalf("%s: paged through %d obligations, want 7", sort, len(seen))
		}
		if sort == "amount_desc" && first != w.big.ID {
			t.Fatalf("largest first is %s, want %s", first, w.big.ID)
		}
		if sort == "newest" && first == w.big.ID {
			t.Fatal("newest first starts with the oldest")
		}
	}
}

// TestFinanceSeesNoControls: finance sees figures and exports but no
// write-off, approval or case control, and its crafted POST is refused.
func TestFinanceSeesNoControls(t *testing.T) {
	w := newWorld(t)
	b := w.client(t)
	b.signIn(w.finance)
	p := b.get("/console/delegations/" + w.big.ID)
	p.contains(t, "2,500.00 EUR")
	p.lacks(t, "Request write-off", "Add note", "/owner\"")
	before := w.totalEvents(t)
	for _, path := range []string{"/write-offs", "/notes", "/owner", "/snooze"} {
		res := b.post("/console/delegations/"+w.big.ID, "/console/delegations/"+w.big.ID+path,
			url.Values{"reason": {"crafted"}, "note": {"crafted"}, "owner": {"me"}, "until": {"2027-01-01"}})
		if res.status != http.StatusForbidden {
			t.Fatalf("finance POST %s: %d", path, res.status)
		}
	}
	if after := w.totalEvents(t); after != before {
		t.Fatalf("refused posts recorded %d events", after-before)
	}
}

// TestCSRF: a form posted without its token, or with another session's,
// is refused with 403 and nothing changes.
func TestCSRF(t *testing.T) {
	w := newWorld(t)
	a, other := w.client(t), w.client(t)
	a.signIn(w.OncallToken)
	other.signIn(w.oncall2)
	before := w.totalEvents(t)
	for _, form := range []url.Values{
		{"note": {"no token"}},
		{"note": {"other session's token"}, "csrf": {other.get("/console/").csrf(t)}},
	} {
		if res := a.do(http.MethodPost, "/console/delegations/"+w.big.ID+"/notes", form); res.status != http.StatusForbidden {
			t.Fatalf("note without a valid CSRF token: %d", res.status)
		}
	}
	// The sign-in form has its own token too.
	fresh := w.client(t)
	if res := fresh.do(http.MethodPost, "/console/sign-in", url.Values{"token": {w.OncallToken}}); res.status != http.StatusForbidden {
		t.Fatalf("sign-in without its token: %d", res.status)
	}
	if after := w.totalEvents(t); after != before {
		t.Fatalf("refused forms recorded %d events", after-before)
	}
}

// TestCaseHandlingAndBulk: owner, note and snooze are events; bad input is
// shown beside the field with nothing recorded; a bulk change previews
// exactly what changes and applies only once confirmed.
func TestCaseHandlingAndBulk(t *testing.T) {
	w := newWorld(t)
	b := w.client(t)
	b.signIn(w.OncallToken)
	self := "/console/delegations/" + w.big.ID
	before := w.totalEvents(t)
	bad := b.post(self, self+"/snooze", url.Values{"until": {"2020-01-01"}})
	if bad.status != http.StatusUnprocessableEntity {
		t.Fatalf("snooze into the past: %d", bad.status)
	}
	bad.contains(t, "must be in the future")
	if empty := b.post(self, self+"/notes", url.Values{"note": {"  "}}); empty.status != http.StatusUnprocessableEntity {
		t.Fatalf("empty note: %d", empty.status)
	}
	if w.totalEvents(t) != before {
		t.Fatal("refused case forms recorded events")
	}
	if res := b.post(self, self+"/notes", url.Values{"note": {"Called Bolt's ops desk; they will check their ERP."}}); res.status != http.StatusSeeOther {
		t.Fatalf("note: %d %s", res.status, res.body)
	}
	if res := b.post(self, self+"/owner", url.Values{"mine": {"1"}}); res.status != http.StatusSeeOther {
		t.Fatalf("owner: %d", res.status)
	}
	if res := b.post(self, self+"/snooze", url.Values{"until": {"2026-03-10"}, "reason": {"waiting for Bolt"}}); res.status != http.StatusSeeOther {
		t.Fatalf("snooze: %d %s", res.status, res.body)
	}
	for _, typ := range []ledger.EventType{ledger.EventTypeCaseNoteAdded, ledger.EventTypeCaseOwnerAssigned, ledger.EventTypeCaseSnoozed} {
		if n := w.eventCount(t, w.big.ID, typ); n != 1 {
			t.Fatalf("%s events: %d", typ, n)
		}
	}
	b.get(self).contains(t, "Called Bolt&#39;s ops desk", "Snoozed until 2026-03-10")
	// Snoozed: out of the queue, in the report, hold unchanged.
	b.get("/console/obligations").lacks(t, w.big.ID)
	b.get("/console/obligations?snoozed=only").contains(t, w.big.ID)
	b.get("/console/obligations?owner=oncall&snoozed=show").contains(t, w.big.ID)
	b.get("/console/").contains(t, "2,500.00 EUR")

	// Bulk assign: preview changes nothing; confirm applies to exactly
	// the previewed rows.
	ids := url.Values{"id": {w.small.ID, w.pending.ID}, "kind": {"assign"}, "owner": {"oncall-2"}, "back": {"/console/obligations"}}
	before = w.totalEvents(t)
	preview := b.post("/console/obligations", "/console/obligations/bulk", ids)
	if preview.status != http.StatusOK {
		t.Fatalf("preview: %d\n%s", preview.status, preview.body)
	}
	preview.contains(t, "2 will change", "Confirm: change 2")
	if w.totalEvents(t) != before {
		t.Fatal("the preview recorded events")
	}
	ids.Set("confirm", "1")
	if res := b.post("/console/obligations", "/console/obligations/bulk", ids); res.status != http.StatusSeeOther {
		t.Fatalf("bulk: %d %s", res.status, res.body)
	}
	if n := w.totalEvents(t) - before; n != 2 {
		t.Fatalf("bulk assign recorded %d events, want 2", n)
	}
	b.get("/console/obligations?owner=oncall-2").contains(t, w.small.ID, w.pending.ID)
}

// TestWriteOffFourEyesAndReject: a write-off above the threshold waits for
// a second on-call person, who may reject it; the requester may not.
func TestWriteOffFourEyesAndReject(t *testing.T) {
	w := newWorld(t)
	a, b := w.client(t), w.client(t)
	a.signIn(w.OncallToken)
	b.signIn(w.oncall2)
	self := "/console/delegations/" + w.big.ID
	if bad := a.post(self, self+"/write-offs", url.Values{"reason": {""}}); bad.status != http.StatusUnprocessableEntity {
		t.Fatalf("write-off without reason: %d", bad.status)
	}
	if res := a.post(self, self+"/write-offs", url.Values{"reason": {"Bolt unreachable for 3 days"}}); res.status != http.StatusSeeOther {
		t.Fatalf("request: %d %s", res.status, res.body)
	}
	a.get("/console/write-offs").contains(t, "You asked for this one")
	list, err := w.Compensation.WriteOffs(t.Context(), ledger.Principal{Role: ledger.RoleFinance}, compensation.WriteOffFilter{})
	if err != nil || len(list) != 1 {
		t.Fatalf("write-offs: %v %v", list, err)
	}
	id := list[0].ID.String()
	if res := a.post("/console/write-offs", "/console/write-offs/"+id+"/approve", nil); res.status != http.StatusConflict {
		t.Fatalf("self approval: %d", res.status)
	}
	if res := b.post("/console/write-offs", "/console/write-offs/"+id+"/reject", url.Values{"reason": {""}}); res.status != http.StatusUnprocessableEntity {
		t.Fatalf("reject without reason: %d", res.status)
	}
	if res := b.post("/console/write-offs", "/console/write-offs/"+id+"/reject", url.Values{"reason": {"Bolt answered: reversal under way"}}); res.status != http.StatusSeeOther {
		t.Fatalf("reject: %d %s", res.status, res.body)
	}
	b.get("/console/write-offs").contains(t, "rejected", "Bolt answered: reversal under way")
	b.get(self).contains(t, "Request write-off", "compensation_unconfirmed")
}

// TestListIDsTellApart: obligations created in the same minute (their
// UUIDv7s share their leading, time-ordered digits) carry different labels
// on the lists, from the ids' random tails, and the obligations table names
// each by its business operation id.
func TestListIDsTellApart(t *testing.T) {
	w := newWorld(t)
	b := w.client(t)
	b.signIn(w.OncallToken)
	if w.big.ID[:8] != w.small.ID[:8] {
		t.Fatalf("the world's obligations were not made in the same minute: %s %s", w.big.ID, w.small.ID)
	}
	label := func(id string) string { return "…" + id[len(id)-8:] }
	if label(w.big.ID) == label(w.small.ID) {
		t.Fatalf("two ids share a label: %s %s", w.big.ID, w.small.ID)
	}
	list := b.get("/console/obligations?state=compensation_unconfirmed")
	list.contains(t,
		`title="`+w.big.ID+`"><code>`+label(w.big.ID)+`</code></a>`, `<td class="op">`+w.big.BusinessOperationID+`</td>`,
		`title="`+w.small.ID+`"><code>`+label(w.small.ID)+`</code></a>`, `<td class="op">`+w.small.BusinessOperationID+`</td>`,
		`<th scope="col">Operation</th>`)
	list.lacks(t, w.big.ID[:8]+"…")
	b.get("/console/").contains(t, label(w.big.ID)+`</a> `+w.big.BusinessOperationID, label(w.small.ID)+`</a> `+w.small.BusinessOperationID)
}

// TestOverviewPendingChangesAndAsOf: the overview says as of when its
// figures are, and lists the privileged changes waiting for a second
// person beside the write-offs, each linking to the page where it is
// approved; once approved it is gone.
func TestOverviewPendingChangesAndAsOf(t *testing.T) {
	w := newWorld(t)
	b := w.client(t)
	b.signIn(w.OncallToken)
	empty := b.get("/console/")
	empty.contains(t, `id="as-of">Figures as of <time datetime="`+w.Clock.Now().UTC().Format(time.RFC3339)+`">`,
		"No privileged change (an org's keys, a task class, a principal or a role) waits for a second person.")

	next := compensationtest.NewEd25519Signer(t, "b-key-2")
	keys := pendingID(t, w.Do(t, http.MethodPut, "/admin/v1/orgs/"+orgID, w.oncall2, map[string]any{
		"name": "Bolt Supplies", "jwks": json.RawMessage(next.JWKS()),
	}))
	person := pendingID(t, w.Do(t, http.MethodPost, "/admin/v1/tokens", w.oncall2, map[string]any{"role": "finance", "name": "Fiona"}))
	for _, viewer := range []string{w.OncallToken, w.finance} {
		v := w.client(t)
		v.signIn(viewer)
		p := v.get("/console/")
		p.contains(t, `id="pending-changes"`,
			`<li data-change="`+keys+`"><a href="/console/orgs/`+orgID+`#change-`+keys+`">`,
			`<li data-change="`+person+`"><a href="/console/principals#change-`+person+`">`, "Fiona", "asked by oncall-2")
		if strings.Index(p.body, keys) > strings.Index(p.body, person) {
			t.Fatal("the overview does not list the oldest change first")
		}
	}
	// The links lead to the change, with its approve control for on-call.
	b.get("/console/orgs/"+orgID).contains(t, `id="change-`+keys+`"`, `action="/console/pending-changes/`+keys+`/approve"`)
	b.get("/console/principals").contains(t, `id="change-`+person+`"`, `action="/console/pending-changes/`+person+`/approve"`)

	if res := b.post("/console/", "/console/pending-changes/"+keys+"/approve", url.Values{"back": {"/console/"}}); res.status != http.StatusSeeOther {
		t.Fatalf("approve: %d\n%s", res.status, res.body)
	}
	after := b.get("/console/")
	after.lacks(t, `data-change="`+keys+`"`)
	after.contains(t, `data-change="`+person+`"`)
}

// TestAnomaliesSharedRemoteTasks: a remote task id recorded by two
// tenants is listed on the anomalies page's first page, for all kinds and
// for kind shared_remote_task, linking to both delegations, as the API's
// first page carries it; later pages and other kinds do not repeat it.
func TestAnomaliesSharedRemoteTasks(t *testing.T) {
	w := newWorld(t)
	b := w.client(t)
	b.signIn(w.finance)
	b.get("/console/anomalies").contains(t, `id="shared-remote-tasks"`, "No remote task id is recorded by more than one tenant.")

	globex := w.NewOrchestrator(t, "globex")
	twin := w.CreateDelegation(t, globex, apitest.NewCreateRequest(w.big.BusinessOperationID, orgID, "procurement", budgetID, 1_000, "EUR"))
	if twin.Remote.TaskID != w.big.Remote.TaskID {
		t.Fatalf("the twin's remote task %q, want %q", twin.Remote.TaskID, w.big.Remote.TaskID)
	}
	var api struct {
		SharedRemoteTasks []struct {
			RemoteTaskID  string   `json:"remote_task_id"`
			DelegationIDs []string `json:"delegation_ids"`
		} `json:"shared_remote_tasks"`
	}
	w.Do(t, http.MethodGet, "/v1/anomalies", w.finance, nil).Expect(t, http.StatusOK).JSON(t, &api)
	if len(api.SharedRemoteTasks) != 1 {
		t.Fatalf("the API lists %+v", api.SharedRemoteTasks)
	}
	for _, path := range []string{"/console/anomalies", "/console/anomalies?kind=shared_remote_task"} {
		p := b.get(path)
		if p.status != http.StatusOK {
			t.Fatalf("GET %s: %d", path, p.status)
		}
		p.contains(t, `<tr data-remote-task="`+w.big.Remote.TaskID+`"><td><a href="/console/orgs/`+orgID+`">`, "acme, globex",
			`href="/console/delegations/`+w.big.ID+`"`, `href="/console/delegations/`+twin.ID+`"`)
		if strings.Count(p.body, "<tr data-remote-task=") != len(api.SharedRemoteTasks) {
			t.Fatalf("GET %s: not the API's %d rows", path, len(api.SharedRemoteTasks))
		}
	}
	b.get("/console/anomalies?kind=shared_remote_task").lacks(t, "No anomaly events of this kind")
	b.get("/console/anomalies?kind=status_conflict").lacks(t, `id="shared-remote-tasks"`)
	b.get("/console/anomalies?after=1").lacks(t, `id="shared-remote-tasks"`)
}

// TestAnomaliesRefusedTokens: the refused-token totals per (org, reason)
// are the rows of the anomalies page's first page, for all kinds and for
// kind refused_token, exactly as the first page of GET /v1/anomalies
// carries them, with the latest samples by sha256; later pages and other
// kinds do not repeat them.
func TestAnomaliesRefusedTokens(t *testing.T) {
	w := newWorld(t)
	b := w.client(t)
	b.signIn(w.finance)
	b.get("/console/anomalies").contains(t, `id="refused-tokens"`, "No signed token has been refused.")

	refuse := func(token string) {
		req, _ := http.NewRequest(http.MethodPost, w.URL+"/v1/compensation/acks", strings.NewReader(token))
		req.Header.Set("Content-Type", "application/jose")
		w.Send(t, req).Expect(t, http.StatusUnauthorized)
	}
	refuse("garbage." + strings.Repeat("A", 40) + ".x")
	forger := compensationtest.NewEd25519Signer(t, w.signer.KeyID())
	var forged string
	for i := range 3 {
		claims := compensationtest.AckClaims(orgID, ledgerID, w.pending.Remote.TaskID, w.pending.Compensation.IdempotencyKey, w.Clock.Now())
		claims["receipt_id"] = fmt.Sprintf("rcpt-forged-%d", i)
		forged = forger.Sign(t, string(compensation.KindAck), claims)
		refuse(forged)
	}

	var api struct {
		RefusedTokens []httpapi.RefusedTokensBody `json:"refused_tokens"`
	}
	w.Do(t, http.MethodGet, "/v1/anomalies", w.finance, nil).Expect(t, http.StatusOK).JSON(t, &api)
	want := map[[2]string]int64{}
	for _, r := range api.RefusedTokens {
		want[[2]string{r.OrgID, r.Reason}] = r.Refused
	}
	if len(want) != 2 || want[[2]string{"", compensation.CodeTokenMalformed}] != 1 || want[[2]string{orgID, compensation.CodeTokenSignatureInvalid}] != 3 {
		t.Fatalf("the API lists %+v", api.RefusedTokens)
	}
	sum := sha256.Sum256([]byte(forged))
	for _, path := range []string{"/console/anomalies", "/console/anomalies?kind=refused_token"} {
		p := b.get(path)
		if p.status != http.StatusOK {
			t.Fatalf("GET %s: %d", path, p.status)
		}
		got := map[[2]string]int64{}
		for _, m := range refusedRow.FindAllStringSubmatch(p.body, -1) {
			n, _ := strconv.ParseInt(m[3], 10, 64)
			got[[2]string{m[1], m[2]}] = n
		}
		if !maps.Equal(got, want) {
			t.Fatalf("GET %s lists %v, the API %v", path, got, want)
		}
		p.contains(t, `<a href="/console/orgs/`+orgID+`">`, hex.EncodeToString(sum[:]), "3 kept")
		p.lacks(t, "No signed token has been refused.")
	}
	b.get("/console/anomalies?kind=refused_token").contains(t, "Refused tokens are counted above")
	b.get("/console/anomalies?kind=status_conflict").lacks(t, `id="refused-tokens"`)
	b.get("/console/anomalies?kind=shared_remote_task").lacks(t, `id="refused-tokens"`)
	b.get("/console/anomalies?after=1").lacks(t, `id="refused-tokens"`)
}

// refusedRow is one row of the anomalies page's refused-token totals.
var refusedRow = regexp.MustCompile(`<tr data-org="([^"]*)" data-reason="([^"]*)" data-refused="([0-9]+)">`)
