package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/quittance/quittance/cmd/quittance/internal/console"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/ledger"
)

// newOIDC is the console's OpenID Connect sign-in against is, mapping the
// groups claim's quittance-oncall and quittance-finance.
func newOIDC(t *testing.T, is *issuer) *console.OIDC {
	t.Helper()
	o, err := console.NewOIDC(console.OIDCConfig{
		IssuerURL: is.srv.URL, ClientID: is.clientID, ClientSecret: is.secret, RedirectURL: "/console/oidc/callback",
		RoleClaim: "groups", Roles: map[string]ledger.Role{"quittance-oncall": ledger.RoleOncall, "quittance-finance": ledger.RoleFinance},
	})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// signInOIDC signs b in through the identity provider as its browser
// would: the console's login link, the provider's authorization redirect,
// and the callback. It returns the callback's page.
func (b *browserless) signInOIDC() page {
	b.t.Helper()
	login := b.get("/console/oidc/login?next=/console/principals")
	if login.status != http.StatusFound {
		b.t.Fatalf("OIDC login: %d %s", login.status, login.body)
	}
	resp, err := b.client.Get(login.location)
	if err != nil {
		b.t.Fatal(err)
	}
	resp.Body.Close()
	back, err := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusFound || err != nil {
		b.t.Fatalf("identity provider: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	return b.get(back.RequestURI())
}

// principalNamed finds a principal in the API's list by name.
func principalNamed(t *testing.T, e *apitest.Env, token, name string) (httpapi.PrincipalBody, bool) {
	t.Helper()
	var list struct {
		Principals []httpapi.PrincipalBody `json:"principals"`
	}
	e.Do(t, http.MethodGet, "/admin/v1/principals", token, nil).Expect(t, http.StatusOK).JSON(t, &list)
	for _, p := range list.Principals {
		if p.Name == name {
			return p, true
		}
	}
	return httpapi.PrincipalBody{}, false
}

// TestOIDCSignInIsAPrincipal: a first OpenID Connect sign-in records a
// person principal, listed with its identity and created by the identity
// provider; its session approves a change another principal asked for
// and disables a principal; disabled in turn, its open session ends and
// its next sign-in is refused.
func TestOIDCSignInIsAPrincipal(t *testing.T) {
	is := newIssuer(t)
	e := apitest.New(t, apitest.WithLedgerID(ledgerID), apitest.WithProduction(), apitest.WithOIDC(newOIDC(t, is)))
	alice, bob := e.TwoOncall(t, "alice", "bob")
	w := &world{Env: e}

	is.signInAs(map[string]any{"sub": "u-carol", "email": "carol@example.com", "groups": []string{"quittance-oncall"}})
	carol := w.client(t)
	if p := carol.signInOIDC(); p.status != http.StatusOK {
		t.Fatalf("sign-in: %d\n%s", p.status, p.body)
	}
	rec, ok := principalNamed(t, e, alice.Token, "oidc:carol@example.com")
	if !ok {
		t.Fatal("the OIDC sign-in recorded no principal")
	}
	if rec.Kind != "person" || rec.Role != "oncall" || !rec.CreatedByIdentityProvider || rec.CreatedBy != "" ||
		len(rec.OIDCIdentities) != 1 || rec.OIDCIdentities[0].Issuer != is.srv.URL || rec.OIDCIdentities[0].Subject != "u-carol" {
		t.Fatalf("recorded principal %+v", rec)
	}
	var actor string
	if err := e.Pool.QueryRow(t.Context(), `SELECT actor FROM events WHERE stream = $1 AND type = 'principal_created'`, "principal:"+rec.ID).Scan(&actor); err != nil || actor != "system:oidc" {
		t.Fatalf("principal_created event: actor %q, %v", actor, err)
	}
	carol.get("/console/principals").contains(t, "oidc:carol@example.com", "u-carol", "the identity provider, at a first sign-in")

	// Alice asks for a finance person; Carol's OIDC session approves it,
	// once Alice's token principal is marked as having no account at the
	// identity provider (else Carol's identity may be Alice).
	e.Approve(t, bob.Token, pendingID(t, e.Do(t, http.MethodPost, "/admin/v1/principals/"+alice.ID+"/no-identity-provider-account", alice.Token, nil)))
	change := pendingID(t, e.Do(t, http.MethodPost, "/admin/v1/tokens", alice.Token, map[string]any{"role": "finance", "name": "Fiona"}))
	if res := carol.post("/console/principals", "/console/pending-changes/"+change+"/approve", url.Values{"back": {"/console/principals"}}); res.status != http.StatusOK {
		t.Fatalf("approve from the OIDC session: %d\n%s", res.status, res.body)
	}
	var decided httpapi.PendingChangeBody
	e.Do(t, http.MethodGet, "/admin/v1/pending-changes/"+change, alice.Token, nil).Expect(t, http.StatusOK).JSON(t, &decided)
	if decided.Status != "applied" || decided.DecidedBy != rec.ID {
		t.Fatalf("change after the OIDC approval: %s by %s, want applied by %s", decided.Status, decided.DecidedBy, rec.ID)
	}

	// Carol disables Bob.
	if res := carol.post("/console/principals", "/console/principals/"+bob.ID+"/disable", url.Values{"reason": {"left"}}); res.status != http.StatusSeeOther {
		t.Fatalf("disable from the OIDC session: %d\n%s", res.status, res.body)
	}
	e.Do(t, http.MethodGet, "/admin/v1/principals", bob.Token, nil).Expect(t, http.StatusUnauthorized)

	// Alice disables Carol: her open session ends, her next sign-in is refused.
	e.Do(t, http.MethodPost, "/admin/v1/principals/"+rec.ID+"/disable", alice.Token, map[string]any{"reason": "compromised laptop"}).Expect(t, http.StatusOK)
	if p := carol.get("/console/principals"); p.status != http.StatusSeeOther || !strings.HasPrefix(p.location, "/console/sign-in") {
		t.Fatalf("the disabled principal's open session: %d %s", p.status, p.location)
	}
	again := w.client(t).signInOIDC()
	if again.status != http.StatusForbidden {
		t.Fatalf("sign-in of a disabled principal: %d", again.status)
	}
	again.contains(t, "Principal disabled", "Your Quittance principal is disabled")
}

// TestOIDCConcurrentFirstSignIns: one identity signing in for the first
// time from several browsers at once is recorded as one principal, with
// one principal_created event, and every sign-in succeeds.
func TestOIDCConcurrentFirstSignIns(t *testing.T) {
	is := newIssuer(t)
	e := apitest.New(t, apitest.WithOIDC(newOIDC(t, is)))
	w := &world{Env: e}
	is.signInAs(map[string]any{"sub": "u-dave", "email": "dave@example.com", "groups": []string{"quittance-finance"}})
	const n = 8
	status := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { status[i] = w.client(t).signInOIDC().status })
	}
	wg.Wait()
	for i, st := range status {
		if st != http.StatusOK {
			t.Fatalf("sign-in %d: %d", i, st)
		}
	}
	var list struct {
		Principals []httpapi.PrincipalBody `json:"principals"`
	}
	e.Do(t, http.MethodGet, "/admin/v1/principals", e.OncallToken, nil).Expect(t, http.StatusOK).JSON(t, &list)
	var found []httpapi.PrincipalBody
	for _, p := range list.Principals {
		for _, o := range p.OIDCIdentities {
			if o.Subject == "u-dave" {
				found = append(found, p)
			}
		}
	}
	if len(found) != 1 || found[0].Role != "finance" {
		t.Fatalf("principals of the identity: %+v", found)
	}
	var created int
	if err := e.Pool.QueryRow(t.Context(), `SELECT count(*) FROM events WHERE stream = $1 AND type = 'principal_created'`, "principal:"+found[0].ID).Scan(&created); err != nil || created != 1 {
		t.Fatalf("%d principal_created events, %v", created, err)
	}
}

// TestOIDCLinkedSessionHasNoMoreThanItsPrincipal: Alice links Fiona's
// finance principal to Fiona's identity, which Fiona confirms, signed in
// as it; from then on the identity signs in as Fiona, and never with more
// than she holds: with only the on-call group the sign-in is refused.
func TestOIDCLinkedSessionHasNoMoreThanItsPrincipal(t *testing.T) {
	is := newIssuer(t)
	e := apitest.New(t, apitest.WithLedgerID(ledgerID), apitest.WithProduction(), apitest.WithOIDC(newOIDC(t, is)))
	alice, bob := e.TwoOncall(t, "alice", "bob")
	w := &world{Env: e}
	// Alice has no identity-provider account: her request is no identity's.
	e.Approve(t, bob.Token, pendingID(t, e.Do(t, http.MethodPost, "/admin/v1/principals/"+alice.ID+"/no-identity-provider-account", alice.Token, nil)))
	fin := pendingID(t, e.Do(t, http.MethodPost, "/admin/v1/tokens", alice.Token, map[string]any{"role": "finance", "name": "Fiona"}))
	e.Approve(t, bob.Token, fin)
	fiona, _ := principalNamed(t, e, alice.Token, "Fiona")
	change := pendingID(t, e.Do(t, http.MethodPost, "/admin/v1/principals/"+fiona.ID+"/oidc", alice.Token,
		map[string]any{"issuer": is.srv.URL, "subject": "u-fiona"}))
	is.signInAs(map[string]any{"sub": "u-fiona", "email": "fiona@example.com", "groups": []string{"quittance-finance"}})
	own := w.client(t)
	own.signInOIDC()
	if res := own.post("/console/principals", "/console/pending-changes/"+change+"/confirm-link", url.Values{"back": {"/console/principals"}}); res.status != http.StatusSeeOther {
		t.Fatalf("confirmation from Fiona's identity: %d\n%s", res.status, res.body)
	}
	is.signInAs(map[string]any{"sub": "u-fiona", "email": "fiona@example.com", "groups": []string{"quittance-oncall"}})
	refused := w.client(t).signInOIDC()
	if refused.status != http.StatusForbidden {
		t.Fatalf("sign-in linked to a finance principal with only the on-call group: %d", refused.status)
	}
	refused.contains(t, "No console role")
	is.signInAs(map[string]any{"sub": "u-fiona", "email": "fiona@example.com", "groups": []string{"quittance-oncall", "quittance-finance"}})
	fs := w.client(t)
	fs.signInOIDC()
	fs.get("/console/principals").contains(t, "<dt>Name</dt><dd>Fiona</dd>", "<dt>Role</dt><dd>finance</dd>")
}

// TestOIDCLinkedWriteOffFourEyes: once an identity is linked to Alice's
// token principal, a write-off above the threshold asked for under one of
// her principals is refused when approved under the other, either way;
// another person approves it.
func TestOIDCLinkedWriteOffFourEyes(t *testing.T) {
	is := newIssuer(t)
	w := newWorld(t, apitest.WithOIDC(newOIDC(t, is)))
	alice := w.PrincipalID(t, w.oncall2)
	is.signInAs(map[string]any{"sub": "u-alice", "email": "alice@example.com", "groups": []string{"quittance-oncall"}})

	// Signed in by OIDC before the link, Alice asks for a write-off.
	oidc := w.client(t)
	oidc.signInOIDC()
	from := "/console/delegations/" + w.big.ID
	if res := oidc.post(from, from+"/write-offs", url.Values{"reason": {"supplier went bust"}}); res.status != http.StatusSeeOther {
		t.Fatalf("write-off from the OIDC session: %d\n%s", res.status, res.body)
	}
	pending := func() string {
		t.Helper()
		var list struct {
			WriteOffs []httpapi.WriteOffBody `json:"write_offs"`
		}
		w.Do(t, http.MethodGet, "/admin/v1/write-offs?status=pending_approval", w.OncallToken, nil).Expect(t, http.StatusOK).JSON(t, &list)
		if len(list.WriteOffs) != 1 {
			t.Fatalf("%d pending write-offs, want 1", len(list.WriteOffs))
		}
		return list.WriteOffs[0].ID
	}
	first := pending()

	// The identity is linked to Alice's token principal (under dev the
	// bootstrap credential's link applies at once).
	var linked struct {
		Principal httpapi.PrincipalBody `json:"principal"`
	}
	w.Do(t, http.MethodPost, "/admin/v1/principals/"+alice+"/oidc", w.OncallToken, map[string]any{"issuer": is.srv.URL, "subject": "u-alice"}).
		Expect(t, http.StatusOK).JSON(t, &linked)
	if len(linked.Principal.OIDCIdentities) != 1 || len(linked.Principal.SamePersonAs) != 1 {
		t.Fatalf("linked principal %+v", linked.Principal)
	}

	// Asked for under the OIDC principal, approved with her token: refused.
	w.Do(t, http.MethodPost, "/admin/v1/write-offs/"+first+"/approve", w.oncall2, nil).Problem(t, http.StatusForbidden, "self_approval")
	w.Do(t, http.MethodPost, "/admin/v1/write-offs/"+first+"/reject", w.OncallToken, map[string]any{"reason": "ask again"}).Expect(t, http.StatusOK)

	// Asked for with her token, approved from her OIDC session: refused.
	w.Do(t, http.MethodPost, "/admin/v1/delegations/"+w.big.ID+"/write-offs", w.oncall2, map[string]any{"reason": "supplier went bust"}).
		Expect(t, http.StatusCreated)
	second := pending()
	oidc = w.client(t)
	oidc.signInOIDC()
	oidc.get(from).lacks(t, `action="/console/write-offs/`+second+`/approve"`)
	res := oidc.post(from, "/console/write-offs/"+second+"/approve", url.Values{"back": {from}})
	if res.status != http.StatusConflict {
		t.Fatalf("approval from the linked OIDC session: %d", res.status)
	}
	res.contains(t, "a different on-call person must decide on this write-off")
	if got := pending(); got != second {
		t.Fatalf("pending write-off %s, want %s", got, second)
	}

	// Another person approves it.
	var done httpapi.WriteOffBody
	w.Do(t, http.MethodPost, "/admin/v1/write-offs/"+second+"/approve", w.OncallToken, nil).Expect(t, http.StatusOK).JSON(t, &done)
	if done.Status != "executed" {
		t.Fatalf("write-off approved by another person: %s", done.Status)
	}
}
