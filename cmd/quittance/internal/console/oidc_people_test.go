package console_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/compensation/compensationtest"
)

// prodOIDC is a production Env with an identity provider and the two
// on-call token principals the bootstrap credential creates.
func prodOIDC(t *testing.T) (*world, *issuer, apitest.Oncall, apitest.Oncall) {
	t.Helper()
	is := newIssuer(t)
	e := apitest.New(t, apitest.WithLedgerID(ledgerID), apitest.WithProduction(), apitest.WithWriteOffThreshold(threshold), apitest.WithOIDC(newOIDC(t, is)))
	alice, bob := e.TwoOncall(t, "alice", "bob")
	return &world{Env: e}, is, alice, bob
}

// TestUnlinkedIdentityIsNotASecondPerson: outside dev, Alice holds an
// on-call token and signs in to the console through OpenID Connect as an
// identity not linked to her token principal. Her OIDC session cannot be
// the second person of a write-off she asked for with her token, nor of a
// privileged change: 403 identity_not_linked, nothing applied. Bob, a
// token principal, still approves. Once Alice's token principal is marked
// as having no identity-provider account (asked by her, approved by Bob),
// the identity counts as another person.
func TestUnlinkedIdentityIsNotASecondPerson(t *testing.T) {
	w, is, alice, bob := prodOIDC(t)
	e := w.Env
	signer := compensationtest.NewEd25519Signer(t, "b-key-1")
	var o httpapi.OrgBody
	e.Do(t, http.MethodPut, "/admin/v1/orgs/"+orgID, alice.Token, map[string]any{"name": "Bolt Supplies", "jwks": json.RawMessage(signer.JWKS())}).
		Expect(t, http.StatusAccepted).JSON(t, &o)
	e.Approve(t, bob.Token, o.PendingChange.ID)
	var orch struct {
		Token string `json:"token"`
	}
	e.Do(t, http.MethodPost, "/admin/v1/tokens", alice.Token, map[string]any{"role": "orchestrator", "tenant": "acme", "name": "agent"}).
		Expect(t, http.StatusCreated).JSON(t, &orch)
	// The budget names acme, whose orchestrator exists: a change Bob approves.
	var b struct {
		PendingChange struct {
			ID string `json:"id"`
		} `json:"pending_change"`
	}
	e.Do(t, http.MethodPut, "/admin/v1/budgets/"+budgetID, alice.Token, map[string]any{"currency": "EUR", "funded_minor": 10_000_000, "tenants": []string{"acme"}}).
		Expect(t, http.StatusAccepted).JSON(t, &b)
	e.Approve(t, bob.Token, b.PendingChange.ID)
	canceled := func(op string, amount int64) httpapi.DelegationBody {
		d := e.CreateDelegation(t, orch.Token, apitest.NewCreateRequest(op, orgID, "procurement", budgetID, amount, "EUR"))
		return e.ReportStatus(t, orch.Token, d.ID, "TASK_STATE_CANCELED", time.Time{})
	}
	writeOff := func(d httpapi.DelegationBody) string {
		var wo httpapi.WriteOffBody
		e.Do(t, http.MethodPost, "/admin/v1/delegations/"+d.ID+"/write-offs", alice.Token, map[string]any{"reason": "supplier went bust"}).
			Expect(t, http.StatusCreated).JSON(t, &wo)
		if wo.Status != "pending_approval" {
			t.Fatalf("write-off above the threshold: %s", wo.Status)
		}
		return wo.ID
	}

	is.signInAs(map[string]any{"sub": "u-alice", "email": "alice@example.com", "groups": []string{"quittance-oncall"}})
	oidc := w.client(t)
	oidc.signInOIDC()

	d := canceled("po-1", 2*threshold)
	first := writeOff(d)
	from := "/console/delegations/" + d.ID
	res := oidc.post(from, "/console/write-offs/"+first+"/approve", url.Values{"back": {from}})
	if res.status != http.StatusConflict {
		t.Fatalf("approval of Alice's write-off from her unlinked identity: %d\n%s", res.status, res.body)
	}
	res.contains(t, "not linked to its person")
	var wo httpapi.WriteOffBody
	e.Do(t, http.MethodGet, "/admin/v1/write-offs/"+first, bob.Token, nil).Expect(t, http.StatusOK).JSON(t, &wo)
	if wo.Status != "pending_approval" {
		t.Fatalf("write-off after the refused approval: %s", wo.Status)
	}
	e.Do(t, http.MethodPost, "/admin/v1/write-offs/"+first+"/approve", bob.Token, nil).Expect(t, http.StatusOK)

	// A privileged change Alice asked for with her token: refused too.
	change := pendingID(t, e.Do(t, http.MethodPut, "/admin/v1/write-off-threshold", alice.Token, map[string]any{"threshold_minor": 5 * threshold}))
	res = oidc.post("/console/principals", "/console/pending-changes/"+change+"/approve", url.Values{"back": {"/console/principals"}})
	if res.status != http.StatusConflict {
		t.Fatalf("approval of Alice's change from her unlinked identity: %d\n%s", res.status, res.body)
	}
	res.contains(t, "not linked to its person")
	if got := getPending(t, e, bob.Token, change); got.Status != "pending" {
		t.Fatalf("change after the refused approval: %s", got.Status)
	}

	// Alice says her token principal has no identity-provider account and
	// Bob approves: the identity is then another person.
	mark := pendingID(t, e.Do(t, http.MethodPost, "/admin/v1/principals/"+alice.ID+"/no-identity-provider-account", alice.Token, nil))
	e.Do(t, http.MethodPost, "/admin/v1/pending-changes/"+mark+"/approve", alice.Token, nil).Problem(t, http.StatusForbidden, "self_approval")
	e.Approve(t, bob.Token, mark)
	if rec, _ := principalNamed(t, e, bob.Token, "alice"); rec.NoIdentityProviderAccount == nil || rec.NoIdentityProviderBy != bob.ID {
		t.Fatalf("alice after the mark: %+v", rec)
	}
	if res := oidc.post("/console/principals", "/console/pending-changes/"+change+"/approve", url.Values{"back": {"/console/principals"}}); res.status != http.StatusSeeOther {
		t.Fatalf("approval from the identity once Alice's token principal is marked: %d\n%s", res.status, res.body)
	}
	d = canceled("po-2", 10*threshold) // above the threshold approved meanwhile
	second, from := writeOff(d), "/console/delegations/"+d.ID
	if res := oidc.post(from, "/console/write-offs/"+second+"/approve", url.Values{"back": {from}}); res.status != http.StatusSeeOther {
		t.Fatalf("write-off approval from the identity once Alice's token principal is marked: %d\n%s", res.status, res.body)
	}
}

// getPending reads a pending change through the API.
func getPending(t *testing.T, e *apitest.Env, token, id string) httpapi.PendingChangeBody {
	t.Helper()
	var c httpapi.PendingChangeBody
	e.Do(t, http.MethodGet, "/admin/v1/pending-changes/"+id, token, nil).Expect(t, http.StatusOK).JSON(t, &c)
	return c
}

// TestOIDCLinkConfirmedByIdentity: a link of an identity to a principal is
// never approved, by its target or anyone (409 oidc_link_needs_identity);
// the identity's holder confirms it, signed in as that identity. A link
// Bob asks for Alice's principal cannot be confirmed by an identity that
// may be Bob (neither linked nor marked); Alice's own request, confirmed
// from her identity's session, links it: the session ends, and her next
// sign-in acts as her token principal.
func TestOIDCLinkConfirmedByIdentity(t *testing.T) {
	w, is, alice, bob := prodOIDC(t)
	e := w.Env
	link := func(token string) string {
		return pendingID(t, e.Do(t, http.MethodPost, "/admin/v1/principals/"+alice.ID+"/oidc", token,
			map[string]any{"issuer": is.srv.URL, "subject": "u-alice"}))
	}

	// Bob asks; Alice, the target, may not approve it; nor may Bob.
	byBob := link(bob.Token)
	e.Do(t, http.MethodPost, "/admin/v1/pending-changes/"+byBob+"/approve", alice.Token, nil).Problem(t, http.StatusConflict, "oidc_link_needs_identity")
	e.Do(t, http.MethodPost, "/admin/v1/pending-changes/"+byBob+"/approve", bob.Token, nil).Problem(t, http.StatusConflict, "oidc_link_needs_identity")
	if rec, _ := principalNamed(t, e, bob.Token, "alice"); len(rec.OIDCIdentities) != 0 {
		t.Fatalf("linked by an approval: %+v", rec)
	}
	bobs := w.client(t)
	bobs.signIn(bob.Token)
	list := bobs.get("/console/principals")
	list.contains(t, `data-change="`+byBob+`"`)
	list.lacks(t, `/console/pending-changes/`+byBob+`/approve"`, `/confirm-link"`)
	res := bobs.post("/console/principals", "/console/pending-changes/"+byBob+"/confirm-link", url.Values{"back": {"/console/principals"}})
	if res.status != http.StatusConflict {
		t.Fatalf("confirmation from a token session: %d", res.status)
	}

	is.signInAs(map[string]any{"sub": "u-alice", "email": "alice@example.com", "groups": []string{"quittance-oncall"}})
	own := w.client(t)
	own.signInOIDC()
	own.get("/console/principals").contains(t, `action="/console/pending-changes/`+byBob+`/confirm-link"`)
	res = own.post("/console/principals", "/console/pending-changes/"+byBob+"/confirm-link", url.Values{"back": {"/console/principals"}})
	if res.status != http.StatusConflict {
		t.Fatalf("confirmation of Bob's request by an identity that may be Bob: %d\n%s", res.status, res.body)
	}
	res.contains(t, "not linked to its person")
	e.Do(t, http.MethodPost, "/admin/v1/pending-changes/"+byBob+"/refuse", bob.Token, map[string]any{"reason": "Alice asks herself"}).Expect(t, http.StatusOK)

	// Alice asks for her own link and confirms it as the identity.
	byAlice := link(alice.Token)
	res = own.post("/console/principals", "/console/pending-changes/"+byAlice+"/confirm-link", url.Values{"back": {"/console/principals"}})
	if res.status != http.StatusSeeOther || !strings.Contains(res.location, "link_confirmed") {
		t.Fatalf("confirmation from the identity's session: %d %s\n%s", res.status, res.location, res.body)
	}
	rec, _ := principalNamed(t, e, bob.Token, "alice")
	if len(rec.OIDCIdentities) != 1 || rec.OIDCIdentities[0].Subject != "u-alice" || len(rec.SamePersonAs) != 1 {
		t.Fatalf("alice after the confirmation: %+v", rec)
	}
	ownID := rec.OIDCIdentities[0].RecordedPrincipalID
	if rec.OIDCIdentities[0].LinkedBy != ownID {
		t.Fatalf("linked by %s, want the confirming identity's principal %s", rec.OIDCIdentities[0].LinkedBy, ownID)
	}
	if got := getPending(t, e, bob.Token, byAlice); got.Status != "applied" || got.DecidedBy != ownID {
		t.Fatalf("the link change: %s by %s", got.Status, got.DecidedBy)
	}
	if p := own.get("/console/principals"); p.status != http.StatusSeeOther {
		t.Fatalf("the confirming session after the link: %d", p.status)
	}
	after := w.client(t)
	after.signInOIDC()
	after.get("/console/principals").contains(t, "<dt>Name</dt><dd>alice</dd>", "<dt>Principal id</dt><dd><code>"+alice.ID+"</code>")
}

// TestBootstrapAllowanceSurvivesDemotion: outside dev the bootstrap
// credential creates on-call principals while fewer than two were ever
// made on-call. With Alice (the bootstrap's) and Carol (on-call by the
// identity provider) it is spent; the identity provider demoting Carol to
// finance does not give it back, so the holder of the bootstrap secret
// cannot mint a second on-call person of their own.
func TestBootstrapAllowanceSurvivesDemotion(t *testing.T) {
	is := newIssuer(t)
	e := apitest.New(t, apitest.WithLedgerID(ledgerID), apitest.WithProduction(), apitest.WithOIDC(newOIDC(t, is)))
	w := &world{Env: e}
	e.Do(t, http.MethodPost, "/admin/v1/tokens", e.OncallToken, map[string]any{"role": "oncall", "name": "alice"}).Expect(t, http.StatusCreated)

	is.signInAs(map[string]any{"sub": "u-carol", "email": "carol@example.com", "groups": []string{"quittance-oncall"}})
	w.client(t).signInOIDC()
	e.Do(t, http.MethodPost, "/admin/v1/tokens", e.OncallToken, map[string]any{"role": "oncall", "name": "mallory"}).
		Problem(t, http.StatusConflict, "bootstrap_exhausted")

	is.signInAs(map[string]any{"sub": "u-carol", "email": "carol@example.com", "groups": []string{"quittance-finance"}})
	w.client(t).signInOIDC()
	var role string
	if err := e.Pool.QueryRow(t.Context(), `SELECT role FROM principals WHERE display_name = 'oidc:carol@example.com'`).Scan(&role); err != nil || role != "finance" {
		t.Fatalf("carol after the identity provider demoted her: %q, %v", role, err)
	}
	before := e.Snapshot(t)
	e.Do(t, http.MethodPost, "/admin/v1/tokens", e.OncallToken, map[string]any{"role": "oncall", "name": "mallory"}).
		Problem(t, http.StatusConflict, "bootstrap_exhausted")
	e.AssertUnchanged(t, before, "a second on-call principal through the bootstrap credential after a demotion")
}
