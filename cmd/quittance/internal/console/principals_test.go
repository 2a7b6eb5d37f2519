package console_test

import (
	"context"
	"crypto"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/ledger"
)

// tokenID is the credential id of a secret.
func tokenID(t *testing.T, e *apitest.Env, secret string) string {
	t.Helper()
	p, err := e.Access.Authenticate(context.Background(), secret)
	if err != nil {
		t.Fatalf("authenticate: %v", err)
	}
	return p.TokenID.String()
}

// TestPrincipalsListAndRevoke: on-call sees every principal and credential
// (never a secret), revokes a credential with a reason (the API refuses it
// with 401 from then on) and disables a principal; bad input is shown
// beside its field; finance sees the list without controls and its crafted
// POSTs are refused with 403, nothing changed.
func TestPrincipalsListAndRevoke(t *testing.T) {
	w := newWorld(t)
	b := w.client(t)
	b.signIn(w.OncallToken)
	orchCred := tokenID(t, w.Env, w.orch)
	list := b.get("/console/principals")
	list.contains(t, "oncall-2", "finance-1", "orchestrator-acme", "acme", `data-credential="`+orchCred+`"`,
		`action="/console/credentials/`+orchCred+`/revoke"`, "this session")
	for _, secret := range []string{w.orch, w.finance, w.oncall2, w.OncallToken} {
		if strings.Contains(list.body, secret) {
			t.Fatal("a credential's secret is on the page")
		}
	}

	// Revoke the orchestrator's credential: the API refuses it at once.
	w.Do(t, http.MethodGet, "/v1/delegations/"+w.big.ID, w.orch, nil).Expect(t, http.StatusOK)
	res := b.post("/console/principals", "/console/credentials/"+orchCred+"/revoke", url.Values{"reason": {"leaked in a CI log"}})
	if res.status != http.StatusSeeOther {
		t.Fatalf("revoke: %d\n%s", res.status, res.body)
	}
	w.Do(t, http.MethodGet, "/v1/delegations/"+w.big.ID, w.orch, nil).Expect(t, http.StatusUnauthorized)
	b.get("/console/principals").contains(t, "revoked", "leaked in a CI log")
	again := b.post("/console/principals", "/console/credentials/"+orchCred+"/revoke", nil)
	if again.status != http.StatusConflict {
		t.Fatalf("revoke twice: %d", again.status)
	}
	again.contains(t, "already revoked")

	// Disabling needs a reason, shown beside the field.
	financeID := w.PrincipalID(t, w.finance)
	before := w.totalEvents(t)
	bad := b.post("/console/principals", "/console/principals/"+financeID+"/disable", url.Values{"reason": {"  "}})
	if bad.status != http.StatusUnprocessableEntity {
		t.Fatalf("disable without reason: %d", bad.status)
	}
	bad.contains(t, `id="disable-reason-`+financeID+`" name="reason" maxlength="4096" aria-invalid="true"`, "is required")
	if w.totalEvents(t) != before {
		t.Fatal("a refused disable recorded events")
	}

	// Finance sees the principals and only its own credentials, with no
	// control; its crafted POSTs are refused.
	f := w.client(t)
	f.signIn(w.finance)
	fp := f.get("/console/principals")
	fp.contains(t, "oncall-2", "orchestrator-acme", `data-credential="`+tokenID(t, w.Env, w.finance)+`"`)
	fp.lacks(t, `data-credential="`+tokenID(t, w.Env, w.oncall2)+`"`, `/revoke"`, `/disable"`)
	before = w.totalEvents(t)
	oncall2Cred := tokenID(t, w.Env, w.oncall2)
	if res := f.post("/console/principals", "/console/credentials/"+oncall2Cred+"/revoke", url.Values{"reason": {"crafted"}}); res.status != http.StatusForbidden {
		t.Fatalf("finance's crafted revoke: %d", res.status)
	}
	if res := f.post("/console/principals", "/console/principals/"+w.PrincipalID(t, w.oncall2)+"/disable", url.Values{"reason": {"crafted"}}); res.status != http.StatusForbidden {
		t.Fatalf("finance's crafted disable: %d", res.status)
	}
	if w.totalEvents(t) != before {
		t.Fatal("finance's crafted POSTs recorded events")
	}
	w.Do(t, http.MethodGet, "/admin/v1/principals", w.oncall2, nil).Expect(t, http.StatusOK)

	// On-call disables finance: its credential and its console session end.
	if res := b.post("/console/principals", "/console/principals/"+financeID+"/disable", url.Values{"reason": {"left the company"}}); res.status != http.StatusSeeOther {
		t.Fatalf("disable: %d\n%s", res.status, res.body)
	}
	w.Do(t, http.MethodGet, "/v1/obligations/summary", w.finance, nil).Expect(t, http.StatusUnauthorized)
	if p := f.get("/console/principals"); p.status != http.StatusSeeOther || !strings.HasPrefix(p.location, "/console/sign-in") {
		t.Fatalf("finance's session after disabling: %d %s", p.status, p.location)
	}
	b.get("/console/principals").contains(t, "disabled", "left the company")
	// On-call is offered no control to disable itself.
	b.get("/console/principals").lacks(t, `action="/console/principals/`+w.PrincipalID(t, w.OncallToken)+`/disable"`)

	// Revoking the credential a session was started with ends the session.
	o2 := w.client(t)
	o2.signIn(w.oncall2)
	res = o2.post("/console/principals", "/console/credentials/"+oncall2Cred+"/revoke", url.Values{"reason": {"rotating"}})
	if res.status != http.StatusSeeOther || !strings.HasPrefix(res.location, "/console/sign-in") {
		t.Fatalf("revoke own credential: %d %s", res.status, res.location)
	}
	if p := o2.get("/console/principals"); p.status != http.StatusSeeOther || !strings.HasPrefix(p.location, "/console/sign-in") {
		t.Fatalf("session after revoking its credential: %d %s", p.status, p.location)
	}
	w.Do(t, http.MethodGet, "/admin/v1/principals", w.oncall2, nil).Expect(t, http.StatusUnauthorized)
}

// production is a world run as `quittance serve` runs: two on-call people
// (a and b) created by the bootstrap credential, and every privileged
// change waits for the one who did not ask.
type production struct {
	*apitest.Env
	a, b apitest.Oncall
}

// finance creates a finance person, approved by b, and returns its token.
func (e *production) finance(t *testing.T) string {
	t.Helper()
	_, token := e.NewPerson(t, e.a.Token, e.b.Token, ledger.RoleFinance, "finance-1")
	return token
}

func newProduction(t *testing.T) *production {
	t.Helper()
	e := apitest.New(t, apitest.WithLedgerID(ledgerID), apitest.WithProduction())
	a, b := e.TwoOncall(t, "alice", "bob")
	return &production{Env: e, a: a, b: b}
}

// pendingID asks for a privileged change through the API, expecting 202,
// and returns the pending change's id.
func pendingID(t *testing.T, r *apitest.Response) string {
	t.Helper()
	r.Expect(t, http.StatusAccepted)
	var out struct {
		ID            string `json:"id"`
		PendingChange *struct {
			ID string `json:"id"`
		} `json:"pending_change"`
	}
	r.JSON(t, &out)
	if out.PendingChange != nil {
		return out.PendingChange.ID
	}
	return out.ID
}

// TestPendingPrincipalChange: a new finance person waits for a second
// on-call person; the requester sees no approve control and its crafted
// approval is refused beside the change; the other approves from the
// principals page and the credential works.
func TestPendingPrincipalChange(t *testing.T) {
	e := newProduction(t)
	var issued struct {
		TokenPart     string `json:"token_part"`
		PendingChange struct {
			ID string `json:"id"`
		} `json:"pending_change"`
	}
	e.Do(t, http.MethodPost, "/admin/v1/tokens", e.a.Token, map[string]any{"role": "finance", "name": "Fiona"}).
		Expect(t, http.StatusAccepted).JSON(t, &issued)
	id := issued.PendingChange.ID
	e.Do(t, http.MethodGet, "/v1/obligations/summary", issued.TokenPart, nil).Expect(t, http.StatusUnauthorized)

	w := &world{Env: e.Env}
	a, b := w.client(t), w.client(t)
	a.signIn(e.a.Token)
	b.signIn(e.b.Token)
	mine := a.get("/console/principals")
	mine.contains(t, `data-change="`+id+`"`, `create person principal &#34;Fiona&#34; (finance)`, "You asked for this change")
	mine.lacks(t, `action="/console/pending-changes/`+id+`/approve"`)
	self := a.post("/console/principals", "/console/pending-changes/"+id+"/approve", url.Values{"back": {"/console/principals"}})
	if self.status != http.StatusConflict {
		t.Fatalf("self approval: %d", self.status)
	}
	self.contains(t, "a different on-call person must approve this change")
	e.Do(t, http.MethodGet, "/v1/obligations/summary", issued.TokenPart, nil).Expect(t, http.StatusUnauthorized)

	if bad := b.post("/console/principals", "/console/pending-changes/"+id+"/refuse", url.Values{"reason": {""}, "change": {id}}); bad.status != http.StatusUnprocessableEntity {
		t.Fatalf("refuse without reason: %d", bad.status)
	}
	// The approval answers the second part of Fiona's credential, once.
	res := b.post("/console/principals", "/console/pending-changes/"+id+"/approve", url.Values{"back": {"/console/principals"}})
	if res.status != http.StatusOK {
		t.Fatalf("approve: %d\n%s", res.status, res.body)
	}
	part := regexp.MustCompile(`<code id="token-part">([^<]+)</code>`).FindStringSubmatch(res.body)
	if part == nil {
		t.Fatalf("the approval shows no credential part:\n%s", res.body)
	}
	e.Do(t, http.MethodGet, "/v1/obligations/summary", part[1], nil).Expect(t, http.StatusUnauthorized)
	e.Do(t, http.MethodGet, "/v1/obligations/summary", issued.TokenPart, nil).Expect(t, http.StatusUnauthorized)
	e.Do(t, http.MethodGet, "/v1/obligations/summary", issued.TokenPart+part[1], nil).Expect(t, http.StatusOK)
	after := b.get("/console/principals")
	after.contains(t, "Fiona", "applied")
	after.lacks(t, part[1])
}

// keyHistory returns the key history table of an org page.
func keyHistory(t *testing.T, p page) string {
	t.Helper()
	i := strings.Index(p.body, `class="key-history"`)
	if i < 0 {
		t.Fatalf("no key history table:\n%s", p.body)
	}
	j := strings.Index(p.body[i:], "</table>")
	return p.body[i : i+j]
}

// TestOrgKeyChangeApproval: a change of an org's keys waits on the org's
// page, with the proposed key's RFC 7638 thumbprint marked new; finance
// sees it without controls; a second on-call person approves it there and
// the key is registered.
func TestOrgKeyChangeApproval(t *testing.T) {
	e := newProduction(t)
	e.Do(t, http.MethodPut, "/admin/v1/orgs/"+orgID, e.a.Token, map[string]any{"name": "Bolt Supplies"}).Expect(t, http.StatusCreated)
	signer := compensationtest.NewEd25519Signer(t, "b-key-2")
	id := pendingID(t, e.Do(t, http.MethodPut, "/admin/v1/orgs/"+orgID, e.a.Token, map[string]any{
		"name": "Bolt Supplies", "jwks": json.RawMessage(signer.JWKS()),
	}))
	jwk := signer.PublicJWK()
	raw, err := jwk.Thumbprint(crypto.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	thumb := base64.RawURLEncoding.EncodeToString(raw)

	w := &world{Env: e.Env}
	a, b, f := w.client(t), w.client(t), w.client(t)
	a.signIn(e.a.Token)
	b.signIn(e.b.Token)
	f.signIn(e.finance(t))
	page := "/console/orgs/" + orgID
	seen := f.get(page)
	seen.contains(t, `data-change="`+id+`"`, thumb)
	seen.lacks(t, "/console/pending-changes/")
	if res := f.post(page, "/console/pending-changes/"+id+"/approve", url.Values{"back": {page}}); res.status != http.StatusForbidden {
		t.Fatalf("finance's crafted approval: %d", res.status)
	}
	mine := a.get(page)
	mine.contains(t, `data-change="`+id+`"`, "b-key-2", thumb, "new", "No keys registered", "No key has been registered for this org yet")
	mine.lacks(t, `action="/console/pending-changes/`+id+`/approve"`)
	res := b.post(page, "/console/pending-changes/"+id+"/approve", url.Values{"back": {page}})
	if res.status != http.StatusSeeOther || !strings.HasPrefix(res.location, page) {
		t.Fatalf("approve: %d %s\n%s", res.status, res.location, res.body)
	}
	after := b.get(res.location)
	after.contains(t, "Change approved", "b-key-2", thumb, "No change to this org is waiting")
	o, err := e.Ledger.GetOrg(t.Context(), ledger.Principal{Role: ledger.RoleOncall}, orgID)
	if err != nil || !strings.Contains(string(o.JWKS), "b-key-2") {
		t.Fatalf("org after approval: %s %v", o.JWKS, err)
	}
	if h := keyHistory(t, after); !strings.Contains(h, thumb) || strings.Count(h, "in force</td>") != 1 {
		t.Fatalf("key history after the first key:\n%s", h)
	}

	// The org rotates to a new key (approved the same way): the history
	// keeps the old key with when it stopped, and the new one in force.
	next := compensationtest.NewEd25519Signer(t, "b-key-3")
	rid := pendingID(t, e.Do(t, http.MethodPut, "/admin/v1/orgs/"+orgID, e.a.Token, map[string]any{
		"name": "Bolt Supplies", "jwks": json.RawMessage(next.JWKS()),
	}))
	if res := b.post(page, "/console/pending-changes/"+rid+"/approve", url.Values{"back": {page}}); res.status != http.StatusSeeOther {
		t.Fatalf("approve the rotation: %d\n%s", res.status, res.body)
	}
	h := keyHistory(t, f.get(page))
	if !strings.Contains(h, "b-key-2") || !strings.Contains(h, thumb) || !strings.Contains(h, "b-key-3") || strings.Count(h, "in force</td>") != 1 {
		t.Fatalf("key history after the rotation (finance's view):\n%s", h)
	}
	if i, j := strings.Index(h, "b-key-2"), strings.Index(h, "in force</td>"); i < 0 || j < i || !strings.Contains(h[i:j], "b-key-3") {
		t.Fatalf("the old key is shown in force, not the new one:\n%s", h)
	}

	// A task class change waits on the org's page too, and is refused there
	// with a reason: nothing of it applies.
	r := e.Do(t, http.MethodPut, "/admin/v1/task-classes/procurement", e.a.Token, map[string]any{
		"effect_capable": true, "gate_on": []string{"canceled", "failed"}, "compensation_timeout": "96h",
	})
	r.Expect(t, http.StatusAccepted)
	var class struct {
		PendingChange struct {
			ID string `json:"id"`
		} `json:"pending_change"`
	}
	r.JSON(t, &class)
	cid := class.PendingChange.ID
	if cid == "" {
		t.Fatalf("task class change: no pending change in %s", r.Body)
	}
	b.get(page).contains(t, `id="class-changes"`, `data-change="`+cid+`"`, "procurement", "4d 0h")
	if bad := b.post(page, "/console/pending-changes/"+cid+"/refuse", url.Values{"back": {page}, "change": {cid}, "reason": {""}}); bad.status != http.StatusUnprocessableEntity {
		t.Fatalf("refuse without reason: %d", bad.status)
	} else {
		bad.contains(t, `id="refuse-`+cid+`" name="reason" value="" placeholder="reason for refusing" size="22" maxlength="4096" aria-invalid="true"`)
	}
	res = b.post(page, "/console/pending-changes/"+cid+"/refuse", url.Values{"back": {page}, "change": {cid}, "reason": {"96h is too long for procurement"}})
	if res.status != http.StatusSeeOther {
		t.Fatalf("refuse: %d\n%s", res.status, res.body)
	}
	b.get(res.location).contains(t, "Change refused")
	b.get(page).lacks(t, `id="class-changes"`)
	b.get("/console/principals").contains(t, "96h is too long for procurement", "refused")
}

// thumbprint is the RFC 7638 thumbprint of a test signer's public key.
func thumbprint(t *testing.T, s *compensationtest.Signer) string {
	t.Helper()
	jwk := s.PublicJWK()
	raw, err := jwk.Thumbprint(crypto.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(raw)
}

// TestEvidenceVerifiedAfterKeyRotation: the org rotates its key (asked by
// one on-call person, approved by another on the org's page); the ack it
// signed with the old key is still shown verified, by the old key's kid
// and thumbprint, because the timeline verifies against the keys in force
// when the ledger accepted it (compensation.VerifyStoredTokens, as
// verify-chain does), not against the org's current keys.
func TestEvidenceVerifiedAfterKeyRotation(t *testing.T) {
	w := newWorld(t)
	oldThumb := thumbprint(t, w.signer)
	b := w.client(t)
	b.signIn(w.OncallToken)
	acked := "/console/delegations/" + w.acked.ID
	evidence := func(p page) string {
		t.Helper()
		i := strings.Index(p.body, `data-type="compensation_acked"`)
		if i < 0 {
			t.Fatalf("no compensation_acked event on the timeline:\n%s", p.body)
		}
		j := strings.Index(p.body[i:], "</li>")
		return p.body[i : i+j]
	}
	before := evidence(b.get(acked))
	if !strings.Contains(before, "signature verified") || !strings.Contains(before, "b-key-1") || !strings.Contains(before, oldThumb) {
		t.Fatalf("evidence before the rotation:\n%s", before)
	}

	next := compensationtest.NewEd25519Signer(t, "b-key-2")
	id := pendingID(t, w.Do(t, http.MethodPut, "/admin/v1/orgs/"+orgID, w.oncall2, map[string]any{
		"name": "Bolt Supplies", "jwks": json.RawMessage(next.JWKS()),
	}))
	org := "/console/orgs/" + orgID
	if res := b.post(org, "/console/pending-changes/"+id+"/approve", url.Values{"back": {org}}); res.status != http.StatusSeeOther {
		t.Fatalf("approve the rotation: %d\n%s", res.status, res.body)
	}
	o, err := w.Ledger.GetOrg(t.Context(), ledger.Principal{Role: ledger.RoleOncall}, orgID)
	if err != nil || strings.Contains(string(o.JWKS), "b-key-1") || !strings.Contains(string(o.JWKS), "b-key-2") {
		t.Fatalf("org after the rotation: %s %v", o.JWKS, err)
	}

	for _, viewer := range []string{w.OncallToken, w.finance} {
		v := w.client(t)
		v.signIn(viewer)
		after := evidence(v.get(acked))
		if !strings.Contains(after, "signature verified") || !strings.Contains(after, "<code>b-key-1</code>") ||
			!strings.Contains(after, oldThumb) || strings.Contains(after, "b-key-2") || strings.Contains(after, "not verified") {
			t.Fatalf("evidence after the rotation:\n%s", after)
		}
	}
}

// TestOrgTaskClassPolicyApproval: a task-class policy asked for by one
// on-call person waits on the org's page and is shown nowhere as in force;
// a second on-call person approves it there, and the page lists the
// tenant's classes.
func TestOrgTaskClassPolicyApproval(t *testing.T) {
	e := newProduction(t)
	e.Do(t, http.MethodPut, "/admin/v1/orgs/"+orgID, e.a.Token, map[string]any{"name": "Bolt Supplies"}).Expect(t, http.StatusCreated)
	id := pendingID(t, e.Do(t, http.MethodPut, "/admin/v1/orgs/"+orgID+"/task-class-policies/shop", e.a.Token,
		map[string]any{"classes": []string{"read_only"}}))
	w := &world{Env: e.Env}
	a, b := w.client(t), w.client(t)
	a.signIn(e.a.Token)
	b.signIn(e.b.Token)
	page := "/console/orgs/" + orgID
	a.get(page).contains(t, `id="policy-changes"`, `data-change="`+id+`"`, "let tenant shop use task classes [read_only]", "No tenant has a policy at this org")
	res := b.post(page, "/console/pending-changes/"+id+"/approve", url.Values{"back": {page}})
	if res.status != http.StatusSeeOther {
		t.Fatalf("approve: %d\n%s", res.status, res.body)
	}
	after := b.get(res.location)
	after.contains(t, "<td>shop</td><td><code>read_only</code>")
	after.lacks(t, `id="policy-changes"`)
}
