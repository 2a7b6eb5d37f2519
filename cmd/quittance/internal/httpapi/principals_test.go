package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/access"
)

type issued struct {
	ID            string                     `json:"id"`
	PrincipalID   string                     `json:"principal_id"`
	Token         string                     `json:"token"`
	TokenPart     string                     `json:"token_part"`
	PendingChange *httpapi.PendingChangeBody `json:"pending_change"`
}

func mint(t *testing.T, e *apitest.Env, token string, body map[string]any, status int) issued {
	t.Helper()
	var out issued
	e.Do(t, http.MethodPost, "/admin/v1/tokens", token, body).Expect(t, status).JSON(t, &out)
	return out
}

// prodEnv is an Env run as production (not dev), with the two on-call
// principals the bootstrap token may create, a budget, an org with a key,
// an approved task class and an orchestrator.
type prodEnv struct {
	*apitest.Env
	alice, bob apitest.Oncall
	orch       string
	key        *compensationtest.Signer
	n          int
}

func newProdEnv(t *testing.T, opts ...apitest.Option) *prodEnv {
	t.Helper()
	e := apitest.New(t, append([]apitest.Option{apitest.WithProduction(), apitest.WithLedgerID(ledgerID), apitest.WithWriteOffThreshold(threshold)}, opts...)...)
	pe := &prodEnv{Env: e, key: compensationtest.NewEd25519Signer(t, "b-1")}
	pe.alice, pe.bob = e.TwoOncall(t, "alice", "bob")
	// The bootstrap token has done what it may: a third on-call, and
	// anything else, are refused.
	mint(t, e, e.OncallToken, map[string]any{"role": "oncall", "name": "carol"}, http.StatusConflict)
	e.Do(t, http.MethodPut, "/admin/v1/budgets/"+budgetID, e.OncallToken, map[string]any{"currency": "EUR", "funded_minor": 1}).
		Problem(t, http.StatusForbidden, "forbidden")

	// An org's key and a task class are privileged: alice asks, bob approves.
	var o httpapi.OrgBody
	e.Do(t, http.MethodPut, "/admin/v1/orgs/"+orgB, pe.alice.Token, map[string]any{"name": "Org B", "jwks": json.RawMessage(pe.key.JWKS())}).
		Expect(t, http.StatusAccepted).JSON(t, &o)
	e.Approve(t, pe.bob.Token, o.PendingChange.ID)
	var c httpapi.TaskClassBody
	e.Do(t, http.MethodPut, "/admin/v1/task-classes/procurement", pe.alice.Token, map[string]any{
		"effect_capable": true, "gate_on": []string{"canceled", "failed"}, "compensation_timeout": "48h",
	}).Expect(t, http.StatusAccepted).JSON(t, &c)
	e.Approve(t, pe.bob.Token, c.PendingChange.ID)
	// The first machine orchestrator of a fresh tenant needs no second
	// approver: it can hold on no budget yet.
	pe.orch = mint(t, e, pe.alice.Token, map[string]any{"role": "orchestrator", "tenant": "acme", "name": "agent"}, http.StatusCreated).Token
	// The budget is funded at once; naming its tenant waits for bob.
	var b httpapi.BudgetView
	e.Do(t, http.MethodPut, "/admin/v1/budgets/"+budgetID, pe.alice.Token, map[string]any{"currency": "EUR", "funded_minor": funded, "tenants": []string{"acme"}}).
		Expect(t, http.StatusAccepted).JSON(t, &b)
	e.Approve(t, pe.bob.Token, b.PendingChange.ID)
	return pe
}

func (e *prodEnv) pending(t *testing.T, amount int64) httpapi.DelegationBody {
	t.Helper()
	return e.pendingIn(t, budgetID, amount, "EUR")
}

// pendingIn is pending on budget, in its currency.
func (e *prodEnv) pendingIn(t *testing.T, budget string, amount int64, currency string) httpapi.DelegationBody {
	t.Helper()
	e.n++
	d := e.CreateDelegation(t, e.orch, apitest.NewCreateRequest("op-"+string(rune('a'+e.n)), orgB, "procurement", budget, amount, currency))
	d = e.ReportStatus(t, e.orch, d.ID, "TASK_STATE_CANCELED", time.Time{})
	if d.ObligationState != "revocation_pending_compensation" {
		t.Fatalf("delegation is %s", d.ObligationState)
	}
	return d
}

// TestMintedIdentityCannotApprove: the attack where one on-call mints a
// second on-call identity ("bob", or "Alice") and approves their own
// write-off fails. A new on-call principal does not exist until a
// different principal approves it, its token does not work before, the
// requester cannot approve it, and a second credential under the
// requester's name in any case is the same principal, refused as
// self-approval.
func TestMintedIdentityCannotApprove(t *testing.T) {
	t.Parallel()
	e := newProdEnv(t)
	alice, bob := e.alice, e.bob

	// alice mints an on-call "mallory": pending, and alice holds only the
	// first part of mallory's credential, which is useless.
	m := mint(t, e.Env, alice.Token, map[string]any{"role": "oncall", "name": "mallory"}, http.StatusAccepted)
	if m.PendingChange == nil || m.PendingChange.Status != "pending" || m.PendingChange.Kind != "principal_create" || m.Token != "" || m.TokenPart == "" {
		t.Fatalf("minting an on-call principal: %+v", m)
	}
	e.Do(t, http.MethodGet, "/admin/v1/principals", m.TokenPart, nil).Problem(t, http.StatusUnauthorized, "unauthenticated")
	e.Do(t, http.MethodPost, "/admin/v1/pending-changes/"+m.PendingChange.ID+"/approve", alice.Token, nil).
		Problem(t, http.StatusForbidden, "self_approval")

	// alice mints "Alice": the same principal, another credential.
	again := mint(t, e.Env, alice.Token, map[string]any{"role": "oncall", "name": "Alice"}, http.StatusCreated)
	if again.PrincipalID != alice.ID {
		t.Fatalf("%q is principal %s, alice is %s", "Alice", again.PrincipalID, alice.ID)
	}
	// Nor may alice mint a credential for bob.
	e.Do(t, http.MethodPost, "/admin/v1/tokens", alice.Token, map[string]any{"role": "oncall", "name": "BOB"}).
		Problem(t, http.StatusConflict, "credential_for_another_person")

	// The write-off above the threshold: alice asks; neither her second
	// credential nor a pending identity can approve; bob can.
	d := e.pending(t, threshold+1)
	var w httpapi.WriteOffBody
	e.Do(t, http.MethodPost, "/admin/v1/delegations/"+d.ID+"/write-offs", alice.Token, map[string]any{"reason": "gone"}).
		Expect(t, http.StatusCreated).JSON(t, &w)
	if w.Status != "pending_approval" {
		t.Fatalf("write-off: %+v", w)
	}
	approve := func(token string) *apitest.Response {
		return e.Do(t, http.MethodPost, "/admin/v1/write-offs/"+w.ID+"/approve", token, nil)
	}
	approve(again.Token).Problem(t, http.StatusForbidden, "self_approval")
	approve(m.TokenPart).Problem(t, http.StatusUnauthorized, "unauthenticated")
	approve(e.OncallToken).Problem(t, http.StatusForbidden, "forbidden")
	if got := e.Delegation(t, e.orch, d.ID); got.ObligationState != "revocation_pending_compensation" {
		t.Fatalf("after refused approvals: %s", got.ObligationState)
	}
	approve(bob.Token).Expect(t, http.StatusOK)
	if got := e.Delegation(t, e.orch, d.ID); got.ObligationState != "written_off" {
		t.Fatalf("after bob approved: %s", got.ObligationState)
	}

	// bob approves mallory: alice's part still does not work, so alice
	// holds no second identity; bob's part is the other half, and only
	// mallory, given both, holds a working credential.
	var approved httpapi.PendingChangeBody
	e.Do(t, http.MethodPost, "/admin/v1/pending-changes/"+m.PendingChange.ID+"/approve", bob.Token, nil).Expect(t, http.StatusOK).JSON(t, &approved)
	e.Do(t, http.MethodGet, "/admin/v1/principals/"+m.PrincipalID, m.TokenPart, nil).Problem(t, http.StatusUnauthorized, "unauthenticated")
	d2 := e.pending(t, threshold+1)
	var w2 httpapi.WriteOffBody
	e.Do(t, http.MethodPost, "/admin/v1/delegations/"+d2.ID+"/write-offs", alice.Token, map[string]any{"reason": "gone"}).
		Expect(t, http.StatusCreated).JSON(t, &w2)
	e.Do(t, http.MethodPost, "/admin/v1/write-offs/"+w2.ID+"/approve", m.TokenPart, nil).Problem(t, http.StatusUnauthorized, "unauthenticated")
	mallory := m.TokenPart + approved.TokenPart
	var p httpapi.PrincipalBody
	e.Do(t, http.MethodGet, "/admin/v1/principals/"+m.PrincipalID, mallory, nil).Expect(t, http.StatusOK).JSON(t, &p)
	if p.Name != "mallory" || p.Role != "oncall" || p.CreatedBy != alice.ID {
		t.Fatalf("mallory: %+v", p)
	}
	e.Do(t, http.MethodPost, "/admin/v1/pending-changes/"+m.PendingChange.ID+"/approve", bob.Token, nil).
		Problem(t, http.StatusConflict, "change_not_pending")
}

// TestPersonCredentialIsSplit: a person principal one on-call asks for
// gets a credential in two parts, the requester's on the 202 and the
// approver's on the approval. Neither part alone authenticates, before or
// after the approval; joined (part one, then part two) they do, as the
// new person. Nothing the database holds — the pending change, the
// credential, any event — contains either part or the token.
func TestPersonCredentialIsSplit(t *testing.T) {
	t.Parallel()
	e := apitest.New(t, apitest.WithProduction())
	alice, bob := e.TwoOncall(t, "alice", "bob")
	m := mint(t, e, alice.Token, map[string]any{"role": "oncall", "name": "mallory"}, http.StatusAccepted)
	if m.Token != "" || !strings.HasPrefix(m.TokenPart, "qtp1_") || m.PendingChange == nil {
		t.Fatalf("the 202 for a person: %+v", m)
	}
	whoami := func(token string) *apitest.Response {
		return e.Do(t, http.MethodGet, "/admin/v1/principals/"+m.PrincipalID, token, nil)
	}
	whoami(m.TokenPart).Problem(t, http.StatusUnauthorized, "unauthenticated")

	// The change as anyone reads it shows no secret either.
	if c := e.Do(t, http.MethodGet, "/admin/v1/pending-changes/"+m.PendingChange.ID, bob.Token, nil).Expect(t, http.StatusOK); strings.Contains(string(c.Body), m.TokenPart) {
		t.Fatalf("the pending change shows the requester's part: %s", c.Body)
	}
	var approved httpapi.PendingChangeBody
	e.Do(t, http.MethodPost, "/admin/v1/pending-changes/"+m.PendingChange.ID+"/approve", bob.Token, nil).Expect(t, http.StatusOK).JSON(t, &approved)
	if approved.Status != "applied" || !strings.HasPrefix(approved.TokenPart, "qtp2_") {
		t.Fatalf("the approval: %+v", approved)
	}
	whoami(m.TokenPart).Problem(t, http.StatusUnauthorized, "unauthenticated")
	whoami(approved.TokenPart).Problem(t, http.StatusUnauthorized, "unauthenticated")
	whoami(approved.TokenPart+m.TokenPart).Problem(t, http.StatusUnauthorized, "unauthenticated")
	joined := m.TokenPart + approved.TokenPart
	var p httpapi.PrincipalBody
	whoami(joined).Expect(t, http.StatusOK).JSON(t, &p)
	if p.Name != "mallory" || p.Role != "oncall" {
		t.Fatalf("the joined credential is %+v", p)
	}
	// The change's other readers never see the approver's part again.
	if c := e.Do(t, http.MethodGet, "/admin/v1/pending-changes/"+m.PendingChange.ID, alice.Token, nil).Expect(t, http.StatusOK); strings.Contains(string(c.Body), approved.TokenPart) {
		t.Fatalf("the applied change shows the approver's part: %s", c.Body)
	}

	// The database reader: every row of the tables that record principals,
	// credentials, pending changes and events, as text.
	rows, err := e.Pool.Query(t.Context(), `
		SELECT row_to_json(c)::text FROM pending_changes c
		UNION ALL SELECT row_to_json(t)::text FROM api_tokens t
		UNION ALL SELECT row_to_json(p)::text FROM principals p
		UNION ALL SELECT row_to_json(e)::text FROM events e`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var row string
		if err := rows.Scan(&row); err != nil {
			t.Fatal(err)
		}
		n++
		for _, secret := range []string{m.TokenPart, approved.TokenPart, joined} {
			if strings.Contains(row, secret) {
				t.Fatalf("the database holds a secret part: %s", row)
			}
		}
	}
	if err := rows.Err(); err != nil || n == 0 {
		t.Fatalf("read %d rows: %v", n, err)
	}

	// mallory rotates the joined credential at once, alone.
	var cred struct {
		Credentials []httpapi.CredentialBody `json:"credentials"`
	}
	e.Do(t, http.MethodGet, "/admin/v1/credentials?principal_id="+m.PrincipalID, joined, nil).Expect(t, http.StatusOK).JSON(t, &cred)
	var rotated issued
	e.Do(t, http.MethodPost, "/admin/v1/credentials/"+cred.Credentials[0].ID+"/rotate", joined, nil).Expect(t, http.StatusCreated).JSON(t, &rotated)
	whoami(joined).Problem(t, http.StatusUnauthorized, "unauthenticated")
	whoami(rotated.Token).Expect(t, http.StatusOK)

	// A person's change asked for before credentials were split (its
	// payload holds the whole token's hash, no part's) never applies.
	legacy := mint(t, e, alice.Token, map[string]any{"role": "finance", "name": "legacy"}, http.StatusAccepted)
	if _, err := e.Pool.Exec(t.Context(), `UPDATE pending_changes SET payload = payload - 'token_part_hash' WHERE id = $1`, legacy.PendingChange.ID); err != nil {
		t.Fatal(err)
	}
	e.Do(t, http.MethodPost, "/admin/v1/pending-changes/"+legacy.PendingChange.ID+"/approve", bob.Token, nil).
		Problem(t, http.StatusConflict, "credential_not_split")
}

// TestBootstrapReadsNothing: outside dev the bootstrap credential creates
// the first two on-call principals and nothing else: every read path it
// could reach — delegations and their events, evidence and packs,
// obligations, anomalies, the event feed and its stream, orgs, principals,
// credentials, changes, write-offs, checkpoints — answers 403, while the
// same requests with an on-call token work.
func TestBootstrapReadsNothing(t *testing.T) {
	t.Parallel()
	e := newProdEnv(t)
	d := e.pending(t, 500)
	paths := []string{
		"/v1/delegations", "/v1/delegations/" + d.ID, "/v1/delegations/" + d.ID + "/events",
		"/v1/delegations/" + d.ID + "/evidence", "/v1/delegations/" + d.ID + "/evidence-pack",
		"/v1/obligations", "/v1/obligations/summary", "/v1/obligations/queue", "/v1/anomalies", "/v1/events",
		"/admin/v1/orgs/" + orgB, "/admin/v1/orgs/" + orgB + "/keys", "/admin/v1/task-classes", "/admin/v1/budgets/" + budgetID,
		"/admin/v1/principals", "/admin/v1/credentials", "/admin/v1/pending-changes", "/admin/v1/write-offs",
		"/admin/v1/write-off-threshold", "/v1/checkpoints",
	}
	for _, path := range paths {
		e.Do(t, http.MethodGet, path, e.OncallToken, nil).Problem(t, http.StatusForbidden, "forbidden")
		if r := e.Do(t, http.MethodGet, path, e.alice.Token, nil); r.Status != http.StatusOK {
			t.Errorf("GET %s as on-call: %d %s", path, r.Status, r.Body)
		}
	}
	// The event stream refuses it before it opens.
	req, err := http.NewRequest(http.MethodGet, e.URL+"/v1/events?stream=true", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.OncallToken)
	e.Send(t, req).Problem(t, http.StatusForbidden, "forbidden")
}

// TestDisablingWithdrawsChanges: disabling a principal withdraws the
// changes it asked for that are still pending — refused, one
// change_refused event each by the disabler — so approving one later is
// change_not_pending and nothing of it applies. A change a disable left
// open (a replica that did not withdraw it) is refused on approval,
// requester_disabled.
func TestDisablingWithdrawsChanges(t *testing.T) {
	t.Parallel()
	e := newProdEnv(t)
	alice, bob := e.alice, e.bob
	carolID, carol := e.NewPerson(t, alice.Token, bob.Token, ledger.RoleOncall, "carol")
	asked := mint(t, e.Env, carol, map[string]any{"role": "finance", "name": "fin"}, http.StatusAccepted)
	var class httpapi.TaskClassBody
	e.Do(t, http.MethodPut, "/admin/v1/task-classes/quick", carol, map[string]any{
		"effect_capable": false, "gate_on": []string{}, "compensation_timeout": "1h",
	}).Expect(t, http.StatusAccepted).JSON(t, &class)
	// bob's own change stays open.
	var bobs httpapi.TaskClassBody
	e.Do(t, http.MethodPut, "/admin/v1/task-classes/slow", bob.Token, map[string]any{
		"effect_capable": true, "gate_on": []string{"failed"}, "compensation_timeout": "96h",
	}).Expect(t, http.StatusAccepted).JSON(t, &bobs)

	e.Do(t, http.MethodPost, "/admin/v1/principals/"+carolID+"/disable", alice.Token, map[string]any{"reason": "left"}).Expect(t, http.StatusOK)
	// Each credential it ended has its token_revoked event, by alice.
	var creds struct {
		Credentials []httpapi.CredentialBody `json:"credentials"`
	}
	e.Do(t, http.MethodGet, "/admin/v1/credentials?principal_id="+carolID, alice.Token, nil).Expect(t, http.StatusOK).JSON(t, &creds)
	if len(creds.Credentials) != 1 {
		t.Fatalf("carol's credentials: %+v", creds.Credentials)
	}
	tokenEvents, err := e.Store.StreamEvents(t.Context(), "token:"+creds.Credentials[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := eventTypes(tokenEvents); len(got) != 2 || got[1] != ledger.EventTypeTokenRevoked || tokenEvents[1].Actor != "principal:"+alice.ID {
		t.Fatalf("carol's credential's events: %v", got)
	}
	for _, id := range []string{asked.PendingChange.ID, class.PendingChange.ID} {
		c := getChange(t, e.Env, bob.Token, id)
		if c.Status != "refused" || c.DecidedBy != alice.ID || !strings.Contains(c.DecisionReason, "left") {
			t.Fatalf("carol's change after she was disabled: %+v", c)
		}
		events := changeEvents(t, e.Env, id)
		if got := eventTypes(events); len(got) != 2 || got[1] != ledger.EventTypeChangeRefused || events[1].Actor != "principal:"+alice.ID {
			t.Fatalf("carol's change events: %v (last by %s)", got, events[len(events)-1].Actor)
		}
		e.Do(t, http.MethodPost, "/admin/v1/pending-changes/"+id+"/approve", bob.Token, nil).Problem(t, http.StatusConflict, "change_not_pending")
	}
	e.Do(t, http.MethodGet, "/admin/v1/task-classes/quick", bob.Token, nil).Problem(t, http.StatusNotFound, "")
	if c := getChange(t, e.Env, alice.Token, bobs.PendingChange.ID); c.Status != "pending" {
		t.Fatalf("bob's change after carol was disabled: %+v", c)
	}

	// A change left open by a disable that did not withdraw it.
	dave, daveToken := e.NewPerson(t, alice.Token, bob.Token, ledger.RoleOncall, "dave")
	left := mint(t, e.Env, daveToken, map[string]any{"role": "finance", "name": "fin-2"}, http.StatusAccepted)
	if _, err := e.Pool.Exec(t.Context(), `UPDATE principals SET disabled_at = now(), disabled_by = $1, disabled_reason = 'old replica' WHERE id = $2`,
		alice.ID, dave); err != nil {
		t.Fatal(err)
	}
	e.Do(t, http.MethodPost, "/admin/v1/pending-changes/"+left.PendingChange.ID+"/approve", bob.Token, nil).Problem(t, http.StatusConflict, "requester_disabled")
	if c := getChange(t, e.Env, alice.Token, left.PendingChange.ID); c.Status != "refused" {
		t.Fatalf("the left-open change after the approval: %+v", c)
	}
	var list struct {
		Principals []httpapi.PrincipalBody `json:"principals"`
	}
	e.Do(t, http.MethodGet, "/admin/v1/principals", alice.Token, nil).Expect(t, http.StatusOK).JSON(t, &list)
	for _, p := range list.Principals {
		if p.Name == "fin" || p.Name == "fin-2" {
			t.Fatalf("a disabled requester's principal was created: %+v", p)
		}
	}
}

// TestPersonCredentialLifetimeIsCapped: a person's credential is issued
// for at most QUITTANCE_PERSON_CREDENTIAL_MAX_TTL, its own expiry included,
// at issue and at rotation (422); a machine's may last longer.
func TestPersonCredentialLifetimeIsCapped(t *testing.T) {
	t.Parallel()
	e := apitest.New(t, apitest.WithPersonCredentialLifetime(720*time.Hour, 2160*time.Hour))
	day := 24 * time.Hour
	at := func(d time.Duration) string { return e.Clock.Now().Add(d).UTC().Format(time.RFC3339) }
	e.Do(t, http.MethodPost, "/admin/v1/tokens", e.OncallToken, map[string]any{"role": "finance", "name": "fin", "expires_at": at(91 * day)}).
		Problem(t, http.StatusUnprocessableEntity, "")
	fin := mint(t, e, e.OncallToken, map[string]any{"role": "finance", "name": "fin", "expires_at": at(89 * day)}, http.StatusCreated)
	mint(t, e, e.OncallToken, map[string]any{"role": "finance", "name": "job", "kind": "machine", "expires_at": at(365 * day)}, http.StatusCreated)
	e.Do(t, http.MethodPost, "/admin/v1/credentials/"+fin.ID+"/rotate", fin.Token, map[string]any{"expires_at": at(100 * day)}).
		Problem(t, http.StatusUnprocessableEntity, "")
	var rotated issued
	e.Do(t, http.MethodPost, "/admin/v1/credentials/"+fin.ID+"/rotate", fin.Token, nil).Expect(t, http.StatusCreated).JSON(t, &rotated)
	var list struct {
		Credentials []httpapi.CredentialBody `json:"credentials"`
	}
	e.Do(t, http.MethodGet, "/admin/v1/credentials", rotated.Token, nil).Expect(t, http.StatusOK).JSON(t, &list)
	for _, c := range list.Credentials {
		if c.ID == rotated.ID && (c.ExpiresAt == nil || !c.ExpiresAt.Equal(e.Clock.Now().Add(720*time.Hour).Truncate(time.Microsecond))) {
			t.Fatalf("the rotated credential expires at %v, want the default lifetime", c.ExpiresAt)
		}
	}
}

// TestSinglePersonKeyChangeHasNoEffect: one on-call replacing an org's
// keys with one they hold changes nothing until a second principal
// approves: a declaration signed with the new key is refused and the hold
// stays; after bob approves, the same kind of declaration releases.
func TestSinglePersonKeyChangeHasNoEffect(t *testing.T) {
	t.Parallel()
	e := newProdEnv(t)
	d := e.pending(t, 500)
	evil := compensationtest.NewEd25519Signer(t, "evil-1")
	var o httpapi.OrgBody
	e.Do(t, http.MethodPut, "/admin/v1/orgs/"+orgB, e.alice.Token, map[string]any{"name": "Org B", "jwks": json.RawMessage(evil.JWKS())}).
		Expect(t, http.StatusAccepted).JSON(t, &o)
	if o.PendingChange == nil || o.PendingChange.Kind != "org_update" {
		t.Fatalf("key change: %+v", o)
	}
	decl := func() *apitest.Response {
		req, _ := http.NewRequest(http.MethodPost, e.URL+declsPath,
			strings.NewReader(evil.Sign(t, declTyp, compensationtest.DeclarationClaims(orgB, ledgerID, d.Remote.TaskID, e.Clock.Now()))))
		req.Header.Set("Content-Type", "application/jose")
		return e.Send(t, req)
	}
	if r := decl(); r.Status == http.StatusOK {
		t.Fatalf("a declaration signed with an unapproved key was accepted: %s", r.Body)
	}
	if got := e.Delegation(t, e.orch, d.ID); got.ObligationState != "revocation_pending_compensation" || got.HoldState != "active" {
		t.Fatalf("after the unapproved key: %s / %s", got.ObligationState, got.HoldState)
	}
	// The name alone is not privileged; it changes the org, so the change
	// asked for before it is refused on approval (it would put the old name
	// back) and is asked for again.
	e.Do(t, http.MethodPut, "/admin/v1/orgs/"+orgB, e.alice.Token, map[string]any{"name": "Org B renamed", "jwks": json.RawMessage(e.key.JWKS())}).
		Expect(t, http.StatusOK)
	e.Do(t, http.MethodPost, "/admin/v1/pending-changes/"+o.PendingChange.ID+"/approve", e.bob.Token, nil).Problem(t, http.StatusConflict, "org_changed")
	e.Do(t, http.MethodPut, "/admin/v1/orgs/"+orgB, e.alice.Token, map[string]any{"name": "Org B renamed", "jwks": json.RawMessage(evil.JWKS())}).
		Expect(t, http.StatusAccepted).JSON(t, &o)
	e.Approve(t, e.bob.Token, o.PendingChange.ID)
	decl().Expect(t, http.StatusOK)
	if got := e.Delegation(t, e.orch, d.ID); got.ObligationState != "released" {
		t.Fatalf("after the approved key: %s", got.ObligationState)
	}
}

// TestStaleOrgChangeIsRefused: an org_update change replaces the org's
// whole registration, so one approved after the org changed would undo
// what changed since. It is refused (org_changed), for good, with a
// change_refused event, and the org keeps its current registration. The
// summary names the fields a change sets.
func TestStaleOrgChangeIsRefused(t *testing.T) {
	t.Parallel()
	e := newProdEnv(t)
	other := compensationtest.NewEd25519Signer(t, "b-2")
	var older, newer httpapi.OrgBody
	e.Do(t, http.MethodPut, "/admin/v1/orgs/"+orgB, e.alice.Token, map[string]any{"name": "Org B", "jwks": json.RawMessage(other.JWKS())}).
		Expect(t, http.StatusAccepted).JSON(t, &older)
	e.Do(t, http.MethodPut, "/admin/v1/orgs/"+orgB, e.alice.Token, map[string]any{
		"name": "Org B", "jwks": json.RawMessage(e.key.JWKS()), "require_signed_receipts": true,
	}).Expect(t, http.StatusAccepted).JSON(t, &newer)
	if got := newer.PendingChange.Summary; got != "change org "+orgB+": require_signed_receipts" {
		t.Fatalf("summary %q", got)
	}
	if got := older.PendingChange.Summary; got != "change org "+orgB+": jwks" {
		t.Fatalf("summary %q", got)
	}
	e.Approve(t, e.bob.Token, newer.PendingChange.ID)
	e.Do(t, http.MethodPost, "/admin/v1/pending-changes/"+older.PendingChange.ID+"/approve", e.bob.Token, nil).Problem(t, http.StatusConflict, "org_changed")
	if c := getChange(t, e.Env, e.alice.Token, older.PendingChange.ID); c.Status != "refused" || !strings.Contains(c.DecisionReason, "changed since") {
		t.Fatalf("the stale change: %+v", c)
	}
	if got := eventTypes(changeEvents(t, e.Env, older.PendingChange.ID)); len(got) != 2 || got[1] != ledger.EventTypeChangeRefused {
		t.Fatalf("the stale change's events: %v", got)
	}
	var o httpapi.OrgBody
	e.Do(t, http.MethodGet, "/admin/v1/orgs/"+orgB, e.alice.Token, nil).Expect(t, http.StatusOK).JSON(t, &o)
	if jwks, _ := json.Marshal(o.JWKS); !o.RequireSignedReceipts || strings.Contains(string(jwks), "b-2") {
		t.Fatalf("the org after the stale change: %+v", o)
	}
}

// TestRevokedCredentialOnSecondReplica: a credential revoked through one
// replica gets 401 on another within a second, although the other had it
// in its authentication cache, and the other's open event stream of that
// credential ends.
func TestRevokedCredentialOnSecondReplica(t *testing.T) {
	t.Parallel()
	e1 := apitest.New(t)
	e2 := apitest.Start(t, e1.Pool, apitest.WithOncallToken(e1.OncallToken))
	orch := mint(t, e1, e1.OncallToken, map[string]any{"role": "orchestrator", "tenant": "acme", "name": "agent"}, http.StatusCreated)
	// Fill e2's cache.
	waitFor(t, 5*time.Second, func() bool {
		e2.Do(t, http.MethodGet, "/v1/delegations", orch.Token, nil).Expect(t, http.StatusOK)
		_, cached := e2.Access.CachedPrincipal(orch.Token)
		return cached
	})

	req, err := http.NewRequest(http.MethodGet, e2.URL+"/v1/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+orch.Token)
	req.Header.Set("Accept", "text/event-stream")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := e2.Client.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	ended := make(chan time.Time, 1)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
		}
		ended <- time.Now()
	}()

	var list struct {
		Credentials []httpapi.CredentialBody `json:"credentials"`
	}
	e1.Do(t, http.MethodGet, "/admin/v1/credentials?principal_id="+orch.PrincipalID, e1.OncallToken, nil).Expect(t, http.StatusOK).JSON(t, &list)
	if len(list.Credentials) != 1 || list.Credentials[0].ID != orch.ID || strings.Contains(string(mustJSON(t, list)), orch.Token) {
		t.Fatalf("credentials: %+v", list)
	}
	revoked := time.Now()
	e1.Do(t, http.MethodPost, "/admin/v1/credentials/"+orch.ID+"/revoke", e1.OncallToken, map[string]any{"reason": "leaked"}).Expect(t, http.StatusOK)
	waitFor(t, time.Second, func() bool {
		return e2.Do(t, http.MethodGet, "/v1/delegations", orch.Token, nil).Status == http.StatusUnauthorized
	})
	select {
	case at := <-ended:
		if at.Sub(revoked) > 3*time.Second {
			t.Fatalf("the stream ended %s after the revocation", at.Sub(revoked))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the revoked credential's stream is still open")
	}
	e1.Do(t, http.MethodPost, "/admin/v1/credentials/"+orch.ID+"/revoke", e1.OncallToken, nil).Problem(t, http.StatusConflict, "token_already_revoked")
}

// TestCredentialExpiryRotationDisable: an expired credential is refused;
// rotation returns a working credential and revokes the old one;
// disabling a principal ends every credential it has.
func TestCredentialExpiryRotationDisable(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	exp := e.Clock.Now().Add(time.Hour)
	a := mint(t, e, e.OncallToken, map[string]any{"role": "finance", "name": "fin", "kind": "machine", "expires_at": exp}, http.StatusCreated)
	e.Do(t, http.MethodGet, "/v1/obligations", a.Token, nil).Expect(t, http.StatusOK)
	e.Clock.Advance(2 * time.Hour)
	e.Do(t, http.MethodGet, "/v1/obligations", a.Token, nil).Problem(t, http.StatusUnauthorized, "unauthenticated")

	b := mint(t, e, e.OncallToken, map[string]any{"role": "finance", "name": "fin"}, http.StatusCreated)
	if b.PrincipalID != a.PrincipalID {
		t.Fatalf("a second credential of fin is principal %s, not %s", b.PrincipalID, a.PrincipalID)
	}
	var r issued
	e.Do(t, http.MethodPost, "/admin/v1/credentials/"+b.ID+"/rotate", b.Token, nil).Expect(t, http.StatusCreated).JSON(t, &r)
	e.Do(t, http.MethodGet, "/v1/obligations", b.Token, nil).Problem(t, http.StatusUnauthorized, "unauthenticated")
	e.Do(t, http.MethodGet, "/v1/obligations", r.Token, nil).Expect(t, http.StatusOK)

	e.Do(t, http.MethodPost, "/admin/v1/principals/"+a.PrincipalID+"/disable", e.OncallToken, map[string]any{"reason": "job retired"}).Expect(t, http.StatusOK)
	e.Do(t, http.MethodGet, "/v1/obligations", r.Token, nil).Problem(t, http.StatusUnauthorized, "unauthenticated")
	e.Do(t, http.MethodPost, "/admin/v1/tokens", e.OncallToken, map[string]any{"role": "finance", "name": "FIN"}).
		Problem(t, http.StatusConflict, "principal_disabled")
}

// TestRandomBearerFlood: sending a new random bearer token on every request
// does not get a fresh bucket each time: unknown tokens share their client
// address's bucket, and get 429 once it is empty, on authenticated and on
// public endpoints alike, while a known principal keeps its own bucket.
func TestRandomBearerFlood(t *testing.T) {
	t.Parallel()
	e := apitest.New(t, apitest.WithRateLimit(httpapi.RateLimit{RPS: 0.001, Burst: 10}))
	orch := e.NewOrchestrator(t, "acme")
	// Authenticated once (not through the API, so the address bucket is
	// untouched) while the cache is on: the API knows orch for free.
	waitFor(t, 5*time.Second, func() bool {
		if _, err := e.Access.Authenticate(context.Background(), orch); err != nil {
			t.Fatal(err)
		}
		_, ok := e.Access.CachedPrincipal(orch)
		return ok
	})
	limited := 0
	for range 30 {
		r := e.Do(t, http.MethodGet, "/v1/delegations", access.NewTokenSecret(), nil)
		if r.Status == http.StatusTooManyRequests {
			limited++
			continue
		}
		r.Problem(t, http.StatusUnauthorized, "unauthenticated")
	}
	if limited < 20 {
		t.Fatalf("%d of 30 random-bearer requests were limited", limited)
	}
	// The public evidence endpoint: garbage tokens are limited too.
	req, _ := http.NewRequest(http.MethodPost, e.URL+declsPath, strings.NewReader("garbage.token.here"))
	req.Header.Set("Content-Type", "application/jose")
	req.Header.Set("Authorization", "Bearer "+access.NewTokenSecret())
	e.Send(t, req).Problem(t, http.StatusTooManyRequests, "rate_limited")
	// The known principal is not starved by the flood.
	e.Do(t, http.MethodGet, "/v1/delegations", orch, nil).Expect(t, http.StatusOK)
}

func waitFor(t *testing.T, limit time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s", limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBootstrapDoesNotReArm: the bootstrap credential's two on-call
// principals are spent for good. alice, who holds the bootstrap secret,
// disables bob and asks the bootstrap credential for a third on-call
// ("mallory", to approve her own write-off): still 409
// bootstrap_exhausted, and nothing is created. A bootstrap credential
// revoked on purpose stays revoked: the start-up ensure reports it as
// retired instead of failing or bringing it back.
func TestBootstrapDoesNotReArm(t *testing.T) {
	t.Parallel()
	e := apitest.New(t, apitest.WithProduction())
	alice, bob := e.TwoOncall(t, "alice", "bob")
	e.Do(t, http.MethodPost, "/admin/v1/principals/"+bob.ID+"/disable", alice.Token, map[string]any{"reason": "left"}).Expect(t, http.StatusOK)
	before := e.Snapshot(t)
	e.Do(t, http.MethodPost, "/admin/v1/tokens", e.OncallToken, map[string]any{"role": "oncall", "name": "mallory"}).
		Problem(t, http.StatusConflict, "bootstrap_exhausted")
	e.AssertUnchanged(t, before, "a third on-call principal through the bootstrap credential after a disable")

	// alice retires the bootstrap credential.
	var list struct {
		Credentials []httpapi.CredentialBody `json:"credentials"`
	}
	e.Do(t, http.MethodGet, "/admin/v1/credentials", alice.Token, nil).Expect(t, http.StatusOK).JSON(t, &list)
	boot := e.PrincipalID(t, e.OncallToken)
	var bootCred string
	for _, c := range list.Credentials {
		if c.PrincipalID == boot {
			bootCred = c.ID
		}
	}
	if bootCred == "" {
		t.Fatalf("no credential of the bootstrap principal %s in %+v", boot, list.Credentials)
	}
	e.Do(t, http.MethodPost, "/admin/v1/credentials/"+bootCred+"/revoke", alice.Token, map[string]any{"reason": "retired"}).Expect(t, http.StatusOK)
	_, err := e.Access.EnsureToken(context.Background(), access.TokenInput{Role: ledger.RoleOncall, Name: "bootstrap"}, e.OncallToken)
	if !errors.Is(err, access.ErrCredentialRetired) {
		t.Fatalf("ensuring a revoked bootstrap credential: %v, want ErrCredentialRetired", err)
	}
	e.Do(t, http.MethodPost, "/admin/v1/tokens", e.OncallToken, map[string]any{"role": "oncall", "name": "mallory"}).
		Problem(t, http.StatusUnauthorized, "unauthenticated")
}

// changeEvents returns the events of a pending change's stream.
func changeEvents(t *testing.T, e *apitest.Env, id string) []ledger.Event {
	t.Helper()
	events, err := e.Store.StreamEvents(t.Context(), "pending_change:"+id)
	if err != nil {
		t.Fatal(err)
	}
	return events
}

// eventTypes lists the types of events, in order.
func eventTypes(events []ledger.Event) []ledger.EventType {
	types := make([]ledger.EventType, len(events))
	for i, ev := range events {
		types[i] = ev.Type
	}
	return types
}

func getChange(t *testing.T, e *apitest.Env, token, id string) httpapi.PendingChangeBody {
	t.Helper()
	var c httpapi.PendingChangeBody
	e.Do(t, http.MethodGet, "/admin/v1/pending-changes/"+id, token, nil).Expect(t, http.StatusOK).JSON(t, &c)
	return c
}

// TestRequesterWithdrawsOwnChange: the principal who asked for a change
// may withdraw it (refuse it themselves), though never approve it; the
// change is then refused for good, with a change_refused event naming the
// requester, and what it asked for never takes effect.
func TestRequesterWithdrawsOwnChange(t *testing.T) {
	t.Parallel()
	e := apitest.New(t, apitest.WithProduction())
	alice, bob := e.TwoOncall(t, "alice", "bob")
	fin := mint(t, e, alice.Token, map[string]any{"role": "finance", "name": "fin"}, http.StatusAccepted)
	path := "/admin/v1/pending-changes/" + fin.PendingChange.ID
	e.Do(t, http.MethodPost, path+"/refuse", alice.Token, map[string]any{}).Expect(t, http.StatusUnprocessableEntity)

	var c httpapi.PendingChangeBody
	e.Do(t, http.MethodPost, path+"/refuse", alice.Token, map[string]any{"reason": "asked by mistake"}).Expect(t, http.StatusOK).JSON(t, &c)
	if c.Status != "refused" || c.DecidedBy != alice.ID || c.RequestedBy != alice.ID || c.DecisionReason != "asked by mistake" {
		t.Fatalf("withdrawn change: %+v", c)
	}
	events := changeEvents(t, e, fin.PendingChange.ID)
	if got := eventTypes(events); len(got) != 2 || got[0] != ledger.EventTypeChangeRequested || got[1] != ledger.EventTypeChangeRefused {
		t.Fatalf("change events: %v", got)
	}
	if events[1].Actor != "principal:"+alice.ID || !strings.Contains(string(events[1].Data), "asked by mistake") {
		t.Fatalf("change_refused: actor %s, data %s", events[1].Actor, events[1].Data)
	}
	e.Do(t, http.MethodPost, path+"/approve", bob.Token, nil).Problem(t, http.StatusConflict, "change_not_pending")
	e.Do(t, http.MethodGet, "/v1/obligations", fin.Token, nil).Problem(t, http.StatusUnauthorized, "unauthenticated")
	// Withdrawing is not approving: the database still refuses a change
	// applied by its requester, whatever the service does.
	if _, err := e.Pool.Exec(t.Context(), `UPDATE pending_changes SET status = 'applied' WHERE id = $1`, fin.PendingChange.ID); err == nil {
		t.Fatal("the database accepted a change applied by its requester")
	}
}

// TestPendingChangeExpiry: a change nobody decides in time expires. Approval
// after its expiry is 409 change_expired and expires it (nothing applies);
// the background sweep (ExpirePendingChanges, on every replica) expires the
// others. Each expiry is a change_expired event by system:pending_changes.
func TestPendingChangeExpiry(t *testing.T) {
	t.Parallel()
	e := apitest.New(t, apitest.WithProduction(), apitest.WithPendingChangeSweep(time.Hour))
	alice, bob := e.TwoOncall(t, "alice", "bob")
	fin := mint(t, e, alice.Token, map[string]any{"role": "finance", "name": "fin"}, http.StatusAccepted)
	late := mint(t, e, alice.Token, map[string]any{"role": "finance", "name": "late"}, http.StatusAccepted)
	if exp := fin.PendingChange.ExpiresAt.Sub(e.Clock.Now()); exp != ledger.DefaultPendingChangeTTL {
		t.Fatalf("a change expires after %s, want %s", exp, ledger.DefaultPendingChangeTTL)
	}
	e.Clock.Advance(ledger.DefaultPendingChangeTTL)

	e.Do(t, http.MethodPost, "/admin/v1/pending-changes/"+fin.PendingChange.ID+"/approve", bob.Token, nil).
		Problem(t, http.StatusConflict, "change_expired")
	if c := getChange(t, e, bob.Token, fin.PendingChange.ID); c.Status != "expired" || c.DecidedBy != "" {
		t.Fatalf("after approving too late: %+v", c)
	}
	e.Do(t, http.MethodGet, "/v1/obligations", fin.Token, nil).Problem(t, http.StatusUnauthorized, "unauthenticated")

	n, err := e.Access.ExpirePendingChanges(t.Context())
	if err != nil || n != 1 {
		t.Fatalf("the sweep expired %d (%v), want 1: %q", n, err, late.PendingChange.ID)
	}
	if c := getChange(t, e, bob.Token, late.PendingChange.ID); c.Status != "expired" {
		t.Fatalf("after the sweep: %+v", c)
	}
	for _, id := range []string{fin.PendingChange.ID, late.PendingChange.ID} {
		events := changeEvents(t, e, id)
		if got := eventTypes(events); len(got) != 2 || got[1] != ledger.EventTypeChangeExpired || events[1].Actor != "system:pending_changes" {
			t.Fatalf("events of change %s: %v, last by %s", id, got, events[len(events)-1].Actor)
		}
	}
	if n, err := e.Access.ExpirePendingChanges(t.Context()); err != nil || n != 0 {
		t.Fatalf("a second sweep expired %d (%v)", n, err)
	}
	e.Do(t, http.MethodPost, "/admin/v1/pending-changes/"+late.PendingChange.ID+"/approve", bob.Token, nil).
		Problem(t, http.StatusConflict, "change_not_pending")

	// The service's own background work sweeps without being asked.
	swept := apitest.New(t, apitest.WithProduction())
	a, _ := swept.TwoOncall(t, "alice", "bob")
	c := mint(t, swept, a.Token, map[string]any{"role": "finance", "name": "fin"}, http.StatusAccepted)
	swept.Clock.Advance(ledger.DefaultPendingChangeTTL + time.Minute)
	waitFor(t, 5*time.Second, func() bool { return getChange(t, swept, a.Token, c.PendingChange.ID).Status == "expired" })
}

// TestRoleGrantIsAPendingChange: giving a principal another role waits for
// a different on-call principal; until then the principal keeps its role,
// and its requester cannot approve it. Once approved, the role applies and
// a principal_role_granted event names the approver.
func TestRoleGrantIsAPendingChange(t *testing.T) {
	t.Parallel()
	e := newProdEnv(t)
	alice, bob := e.alice, e.bob
	fin := issued{}
	fin.PrincipalID, fin.Token = e.NewPerson(t, alice.Token, bob.Token, ledger.RoleFinance, "fin")
	role := "/admin/v1/principals/" + fin.PrincipalID + "/role"
	e.Do(t, http.MethodPost, role, fin.Token, map[string]any{"role": "oncall"}).Problem(t, http.StatusForbidden, "forbidden")
	e.Do(t, http.MethodPost, role, alice.Token, map[string]any{"role": "oncall", "tenant": "acme"}).Expect(t, http.StatusUnprocessableEntity)
	e.Do(t, http.MethodPost, "/admin/v1/principals/"+e.PrincipalID(t, e.orch)+"/role", alice.Token, map[string]any{"role": "oncall"}).
		Expect(t, http.StatusUnprocessableEntity) // a machine is never on-call

	var g struct {
		Principal     httpapi.PrincipalBody      `json:"principal"`
		PendingChange *httpapi.PendingChangeBody `json:"pending_change"`
	}
	e.Do(t, http.MethodPost, role, alice.Token, map[string]any{"role": "oncall"}).Expect(t, http.StatusAccepted).JSON(t, &g)
	if g.PendingChange == nil || g.PendingChange.Kind != "role_grant" || g.Principal.Role != "finance" {
		t.Fatalf("role grant request: %+v", g)
	}
	principalRole := func() string {
		var p httpapi.PrincipalBody
		e.Do(t, http.MethodGet, "/admin/v1/principals/"+fin.PrincipalID, alice.Token, nil).Expect(t, http.StatusOK).JSON(t, &p)
		return p.Role
	}
	e.Do(t, http.MethodGet, "/admin/v1/pending-changes", fin.Token, nil).Expect(t, http.StatusOK) // finance reads changes
	e.Do(t, http.MethodPost, "/admin/v1/pending-changes/"+g.PendingChange.ID+"/approve", fin.Token, nil).Problem(t, http.StatusForbidden, "forbidden")
	e.Do(t, http.MethodPost, "/admin/v1/pending-changes/"+g.PendingChange.ID+"/approve", alice.Token, nil).Problem(t, http.StatusForbidden, "self_approval")
	if r := principalRole(); r != "finance" {
		t.Fatalf("role before approval: %s", r)
	}

	e.Approve(t, bob.Token, g.PendingChange.ID)
	if r := principalRole(); r != "oncall" {
		t.Fatalf("role after approval: %s", r)
	}
	// The same credential now acts as on-call (the cache was emptied).
	waitFor(t, 2*time.Second, func() bool {
		return e.Do(t, http.MethodGet, "/admin/v1/credentials", fin.Token, nil).Status == http.StatusOK &&
			e.Do(t, http.MethodGet, "/admin/v1/principals/"+alice.ID, fin.Token, nil).Status == http.StatusOK &&
			e.Do(t, http.MethodPost, "/admin/v1/principals/"+bob.ID+"/role", fin.Token, map[string]any{"role": "finance"}).Status == http.StatusAccepted
	})
	events, err := e.Store.StreamEvents(t.Context(), "principal:"+fin.PrincipalID)
	if err != nil {
		t.Fatal(err)
	}
	last := events[len(events)-1]
	var data struct {
		RoleGranted     string `json:"role_granted"`
		PreviousRole    string `json:"previous_role"`
		PendingChangeID string `json:"pending_change_id"`
	}
	if err := json.Unmarshal(last.Data, &data); err != nil {
		t.Fatal(err)
	}
	if last.Type != ledger.EventTypePrincipalRoleGranted || last.Actor != "principal:"+bob.ID ||
		data.RoleGranted != "oncall" || data.PreviousRole != "finance" || data.PendingChangeID != g.PendingChange.ID {
		t.Fatalf("last principal event: %s by %s, %s", last.Type, last.Actor, last.Data)
	}
}

// TestOncallAloneCannotMintAnExistingTenantsOrchestrator: an orchestrator's
// credential releases its tenant's held obligations (a task reported
// rejected), so one on-call principal cannot mint one for a tenant that
// exists: another credential of an existing machine principal, a new
// orchestrator for a tenant in use, and the rotation of a machine's
// credential each wait for a second on-call principal, and the credential
// works only from the approval on. The first orchestrator of an unused
// tenant is created at once; under dev the bootstrap credential does all of
// it at once.
func TestOncallAloneCannotMintAnExistingTenantsOrchestrator(t *testing.T) {
	t.Parallel()
	e := newProdEnv(t)
	alice, bob := e.alice, e.bob
	d := e.CreateDelegation(t, e.orch, apitest.NewCreateRequest("op-held", orgB, "procurement", budgetID, 500, "EUR"))
	reject := func(token string) *apitest.Response {
		return e.Do(t, http.MethodPost, "/v1/delegations/"+d.ID+"/task-status", token, map[string]any{"state": "TASK_STATE_REJECTED"})
	}

	// Another credential of the existing orchestrator "agent".
	again := mint(t, e.Env, alice.Token, map[string]any{"role": "orchestrator", "tenant": "acme", "name": "Agent"}, http.StatusAccepted)
	if again.PendingChange == nil || again.PendingChange.Kind != "credential_create" || again.PrincipalID != e.PrincipalID(t, e.orch) {
		t.Fatalf("a credential for the existing orchestrator: %+v", again)
	}
	reject(again.Token).Problem(t, http.StatusUnauthorized, "unauthenticated")
	if got := e.Delegation(t, e.orch, d.ID); got.HoldState != "active" {
		t.Fatalf("after the unapproved credential: hold %s", got.HoldState)
	}
	e.Do(t, http.MethodPost, "/admin/v1/pending-changes/"+again.PendingChange.ID+"/approve", alice.Token, nil).
		Problem(t, http.StatusForbidden, "self_approval")
	e.Approve(t, bob.Token, again.PendingChange.ID)
	e.Do(t, http.MethodGet, "/v1/delegations/"+d.ID, again.Token, nil).Expect(t, http.StatusOK)
	created, err := e.Store.StreamEvents(t.Context(), "token:"+again.ID)
	if err != nil || len(created) != 1 || created[0].Actor != "principal:"+bob.ID ||
		!strings.Contains(string(created[0].Data), again.PendingChange.ID) {
		t.Fatalf("token_created of the approved credential: %+v, %v", created, err)
	}

	// A new orchestrator for acme, which has one: a principal_create change.
	second := mint(t, e.Env, alice.Token, map[string]any{"role": "orchestrator", "tenant": "acme", "name": "agent-2"}, http.StatusAccepted)
	if second.PendingChange == nil || second.PendingChange.Kind != "principal_create" {
		t.Fatalf("a second orchestrator for acme: %+v", second)
	}
	reject(second.Token).Problem(t, http.StatusUnauthorized, "unauthenticated")
	// A tenant nobody has used: at once; its second orchestrator waits.
	mint(t, e.Env, alice.Token, map[string]any{"role": "orchestrator", "tenant": "globex", "name": "globex-agent"}, http.StatusCreated)
	mint(t, e.Env, alice.Token, map[string]any{"role": "orchestrator", "tenant": "globex", "name": "globex-agent-2"}, http.StatusAccepted)

	// Rotating the machine's credential: the old one works until bob
	// approves, then the new one does and the old one is revoked.
	var list struct {
		Credentials []httpapi.CredentialBody `json:"credentials"`
	}
	e.Do(t, http.MethodGet, "/admin/v1/credentials?principal_id="+again.PrincipalID, alice.Token, nil).Expect(t, http.StatusOK).JSON(t, &list)
	var orchCred string
	for _, c := range list.Credentials {
		if c.ID != again.ID {
			orchCred = c.ID
		}
	}
	var rotated issued
	e.Do(t, http.MethodPost, "/admin/v1/credentials/"+orchCred+"/rotate", alice.Token, nil).Expect(t, http.StatusAccepted).JSON(t, &rotated)
	if rotated.PendingChange == nil || rotated.PendingChange.Kind != "credential_create" {
		t.Fatalf("rotating the orchestrator's credential: %+v", rotated)
	}
	reject(rotated.Token).Problem(t, http.StatusUnauthorized, "unauthenticated")
	e.Do(t, http.MethodGet, "/v1/delegations/"+d.ID, e.orch, nil).Expect(t, http.StatusOK)
	e.Approve(t, bob.Token, rotated.PendingChange.ID)
	e.Do(t, http.MethodGet, "/v1/delegations/"+d.ID, rotated.Token, nil).Expect(t, http.StatusOK)
	e.Do(t, http.MethodGet, "/v1/delegations/"+d.ID, e.orch, nil).Problem(t, http.StatusUnauthorized, "unauthenticated")
	if got := e.Delegation(t, rotated.Token, d.ID); got.HoldState != "active" {
		t.Fatalf("hold %s", got.HoldState)
	}
	// A machine rotates its own credential at once.
	var own issued
	e.Do(t, http.MethodPost, "/admin/v1/credentials/"+again.ID+"/rotate", again.Token, nil).Expect(t, http.StatusCreated).JSON(t, &own)
	e.Do(t, http.MethodGet, "/v1/delegations/"+d.ID, own.Token, nil).Expect(t, http.StatusOK)

	// Under dev the bootstrap credential does all of it at once.
	dev := apitest.New(t)
	mint(t, dev, dev.OncallToken, map[string]any{"role": "orchestrator", "tenant": "acme", "name": "agent"}, http.StatusCreated)
	mint(t, dev, dev.OncallToken, map[string]any{"role": "orchestrator", "tenant": "acme", "name": "agent"}, http.StatusCreated)
	mint(t, dev, dev.OncallToken, map[string]any{"role": "orchestrator", "tenant": "acme", "name": "agent-2"}, http.StatusCreated)
}

// TestLinkOIDCIdentity: linking an OpenID Connect identity to a principal
// is an oidc_link pending change that no approval applies, the target's
// own included (409 oidc_link_needs_identity): the identity's holder
// confirms it in the console (console tests). Bad input is problem+json:
// an unknown principal, a machine, an empty or malformed issuer or
// subject, finance asking, an identity already linked, a disabled
// principal. Under dev the bootstrap credential's link applies at once.
func TestLinkOIDCIdentity(t *testing.T) {
	t.Parallel()
	e := newProdEnv(t)
	alice, bob := e.alice, e.bob
	const issuer = "https://idp.example.com/realms/staff"
	link := func(principal, token string, body map[string]any) *apitest.Response {
		return e.Do(t, http.MethodPost, "/admin/v1/principals/"+principal+"/oidc", token, body)
	}
	ok := map[string]any{"issuer": issuer, "subject": "248289761001"}

	var g struct {
		Principal     httpapi.PrincipalBody      `json:"principal"`
		PendingChange *httpapi.PendingChangeBody `json:"pending_change"`
	}
	link(alice.ID, bob.Token, ok).Expect(t, http.StatusAccepted).JSON(t, &g)
	if g.PendingChange == nil || g.PendingChange.Kind != "oidc_link" || len(g.Principal.OIDCIdentities) != 0 {
		t.Fatalf("link request: %+v", g)
	}
	// Alice, the link's target, may not approve it; nor may anyone.
	e.Do(t, http.MethodPost, "/admin/v1/pending-changes/"+g.PendingChange.ID+"/approve", alice.Token, nil).Problem(t, http.StatusConflict, "oidc_link_needs_identity")
	e.Do(t, http.MethodPost, "/admin/v1/pending-changes/"+g.PendingChange.ID+"/approve", bob.Token, nil).Problem(t, http.StatusConflict, "oidc_link_needs_identity")
	var p httpapi.PrincipalBody
	e.Do(t, http.MethodGet, "/admin/v1/principals/"+alice.ID, bob.Token, nil).Expect(t, http.StatusOK).JSON(t, &p)
	if len(p.OIDCIdentities) != 0 {
		t.Fatalf("alice after approvals of her link: %+v", p)
	}
	if c := getChange(t, e.Env, bob.Token, g.PendingChange.ID); c.Status != "pending" {
		t.Fatalf("the link after approvals: %s", c.Status)
	}

	fin := issued{}
	fin.PrincipalID, fin.Token = e.NewPerson(t, alice.Token, bob.Token, ledger.RoleFinance, "fin")
	link("01966b2e-0000-7000-8000-000000000000", alice.Token, map[string]any{"issuer": issuer, "subject": "x"}).Problem(t, http.StatusNotFound, "")
	link(e.PrincipalID(t, e.orch), alice.Token, map[string]any{"issuer": issuer, "subject": "x"}).Problem(t, http.StatusConflict, "principal_not_person")
	link(bob.ID, fin.Token, map[string]any{"issuer": issuer, "subject": "x"}).Problem(t, http.StatusForbidden, "forbidden")
	for _, bad := range []map[string]any{
		{"issuer": "", "subject": "x"}, {"issuer": issuer, "subject": ""}, {"issuer": issuer, "subject": "   "},
		{"issuer": "not a url", "subject": "x"}, {"subject": "x"},
	} {
		link(bob.ID, alice.Token, bad).Problem(t, http.StatusUnprocessableEntity, "")
	}
	e.Do(t, http.MethodPost, "/admin/v1/principals/"+fin.PrincipalID+"/disable", alice.Token, map[string]any{"reason": "left"}).Expect(t, http.StatusOK)
	link(fin.PrincipalID, alice.Token, map[string]any{"issuer": issuer, "subject": "y"}).Problem(t, http.StatusConflict, "principal_disabled")

	// Under dev the bootstrap credential links at once.
	dev := apitest.New(t)
	id := dev.PrincipalID(t, dev.NewToken(t, ledger.RoleOncall, "", "oncall-2"))
	var now struct {
		Principal     httpapi.PrincipalBody      `json:"principal"`
		PendingChange *httpapi.PendingChangeBody `json:"pending_change"`
	}
	dev.Do(t, http.MethodPost, "/admin/v1/principals/"+id+"/oidc", dev.OncallToken, ok).Expect(t, http.StatusOK).JSON(t, &now)
	if now.PendingChange != nil || len(now.Principal.OIDCIdentities) != 1 {
		t.Fatalf("dev link: %+v", now)
	}
	dev.Do(t, http.MethodPost, "/admin/v1/principals/"+id+"/oidc", dev.OncallToken, ok).Problem(t, http.StatusConflict, "oidc_identity_linked")
}
