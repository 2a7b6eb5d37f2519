package httpapi_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
)

// orgPutBody is the PUT /admin/v1/orgs/{id} body that registers o as it
// is; a test changes one member of it.
func orgPutBody(o httpapi.OrgBody) map[string]any {
	body := map[string]any{
		"name": o.Name, "shared_coordinator": o.SharedCoordinator, "agent_card_url": o.AgentCardURL,
		"allowed_hosts": o.AllowedHosts, "require_signed_receipts": o.RequireSignedReceipts,
	}
	if o.JWKS != nil {
		body["jwks"] = o.JWKS
	}
	return body
}

// trusted is what an org is trusted with, as one comparable string.
func trusted(t *testing.T, o httpapi.OrgBody) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"jwks": o.JWKS, "jwks_url": o.JWKSURL, "shared_coordinator": o.SharedCoordinator, "agent_card_url": o.AgentCardURL,
		"allowed_hosts": o.AllowedHosts, "require_signed_receipts": o.RequireSignedReceipts,
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestOrgTrustChangesWaitForASecondOncall: in production, changing any one
// of shared_coordinator, agent_card_url, allowed_hosts and
// require_signed_receipts on a registered org is a 202 with an org_update
// pending change, and changes nothing — not the registration, not how a
// delegation's cancel is gated — while only its requester has seen it,
// even when the requester tries to approve it; a different on-call
// principal's approval applies it. Each field is changed alone, so the
// rule that makes it a trust change is tested field by field.
func TestOrgTrustChangesWaitForASecondOncall(t *testing.T) {
	t.Parallel()
	e := newProdEnv(t)
	get := func() httpapi.OrgBody {
		t.Helper()
		var o httpapi.OrgBody
		e.Do(t, http.MethodGet, "/admin/v1/orgs/"+orgB, e.alice.Token, nil).Expect(t, http.StatusOK).JSON(t, &o)
		return o
	}
	// change asks, as alice, for the registration with one member changed,
	// checks that it is pending and without effect, and has bob approve it.
	change := func(field string, value any, noEffect func()) {
		t.Helper()
		before := get()
		body := orgPutBody(before)
		body[field] = value
		var answer httpapi.OrgBody
		e.Do(t, http.MethodPut, "/admin/v1/orgs/"+orgB, e.alice.Token, body).Expect(t, http.StatusAccepted).JSON(t, &answer)
		if answer.PendingChange == nil || answer.PendingChange.Kind != "org_update" || answer.PendingChange.Status != "pending" {
			t.Fatalf("%s: want a pending org_update, got %+v", field, answer.PendingChange)
		}
		if trusted(t, answer) != trusted(t, before) {
			t.Errorf("%s: the 202 shows the org changed:\n%s\nwas\n%s", field, trusted(t, answer), trusted(t, before))
		}
		unchanged := func(when string) {
			t.Helper()
			if now := get(); trusted(t, now) != trusted(t, before) || !now.UpdatedAt.Equal(before.UpdatedAt) {
				t.Fatalf("%s %s: the org changed:\n%s\nwas\n%s", field, when, trusted(t, now), trusted(t, before))
			}
			if noEffect != nil {
				noEffect()
			}
		}
		unchanged("before approval")
		e.Do(t, http.MethodPost, "/admin/v1/pending-changes/"+answer.PendingChange.ID+"/approve", e.alice.Token, nil).
			Problem(t, http.StatusForbidden, "self_approval")
		unchanged("after the requester's own approval")
		e.Approve(t, e.bob.Token, answer.PendingChange.ID)
		after := get()
		want := orgPutBody(after)
		if got, _ := json.Marshal(want[field]); string(got) != string(mustJSON(t, value)) {
			t.Fatalf("%s after bob approved: %s, want %s", field, got, mustJSON(t, value))
		}
	}
	canceled := func() string {
		t.Helper()
		e.n++
		d := e.CreateDelegation(t, e.orch, apitest.NewCreateRequest("trust-"+string(rune('a'+e.n)), orgB, "procurement", budgetID, 500, "EUR"))
		return e.ReportStatus(t, e.orch, d.ID, "TASK_STATE_CANCELED", time.Time{}).ObligationState
	}

	// shared_coordinator lifts the compensation gate: until approved, a
	// canceled task still holds its obligation.
	change("shared_coordinator", true, func() {
		if got := canceled(); got != "revocation_pending_compensation" {
			t.Fatalf("a cancel under an unapproved shared_coordinator: %s", got)
		}
	})
	if got := canceled(); got == "revocation_pending_compensation" {
		t.Fatalf("a cancel under the approved shared_coordinator is still gated: %s", got)
	}
	change("shared_coordinator", false, nil)

	// An agent endpoint, then each of its members alone.
	body := orgPutBody(get())
	body["agent_card_url"], body["allowed_hosts"] = "https://agent.b.example/.well-known/agent-card.json", []string{"agent.b.example"}
	var o httpapi.OrgBody
	e.Do(t, http.MethodPut, "/admin/v1/orgs/"+orgB, e.alice.Token, body).Expect(t, http.StatusAccepted).JSON(t, &o)
	e.Approve(t, e.bob.Token, o.PendingChange.ID)
	change("agent_card_url", "https://agent2.b.example/.well-known/agent-card.json", nil)
	change("allowed_hosts", []string{"agent.b.example", "agent2.b.example"}, nil)
	change("require_signed_receipts", true, nil)
	change("require_signed_receipts", false, nil)

	// The same hosts in another order are the same trust: a rename with
	// them applies at once.
	body = orgPutBody(get())
	body["name"], body["allowed_hosts"] = "Org B renamed", []string{"agent2.b.example", "agent.b.example"}
	e.Do(t, http.MethodPut, "/admin/v1/orgs/"+orgB, e.alice.Token, body).Expect(t, http.StatusOK)
	if got := get(); got.Name != "Org B renamed" || !slices.Equal(slices.Sorted(slices.Values(got.AllowedHosts)), []string{"agent.b.example", "agent2.b.example"}) {
		t.Fatalf("after the rename: %+v", got)
	}
}

// TestOncallTokenIsNeverAMachine: on-call principals are people, so a
// token asked for as an on-call machine is refused (422 on kind) — for a
// new name and for an existing on-call's, in production and under dev,
// where the bootstrap credential's changes apply at once — and nothing is
// created, pending or not.
func TestOncallTokenIsNeverAMachine(t *testing.T) {
	t.Parallel()
	prod := newProdEnv(t)
	dev := apitest.New(t)
	for _, c := range []struct {
		what  string
		e     *apitest.Env
		token string
		name  string
	}{
		{"a new name, in production", prod.Env, prod.alice.Token, "robot"},
		{"an existing on-call's name, in production", prod.Env, prod.alice.Token, "bob"},
		{"the bootstrap credential, in production", prod.Env, prod.OncallToken, "robot"},
		{"a new name, under dev", dev, dev.OncallToken, "robot"},
	} {
		p := c.e.Do(t, http.MethodPost, "/admin/v1/tokens", c.token, map[string]any{"role": "oncall", "kind": "machine", "name": c.name}).
			Problem(t, http.StatusUnprocessableEntity, "validation_failed")
		if len(p.Errors) != 1 || p.Errors[0].Location != "body.kind" {
			t.Errorf("%s: %+v, want the error on body.kind", c.what, p)
		}
	}
	for _, e := range []*apitest.Env{prod.Env, dev} {
		token := dev.OncallToken
		if e == prod.Env {
			token = prod.alice.Token
		}
		var list struct {
			Principals []httpapi.PrincipalBody `json:"principals"`
		}
		e.Do(t, http.MethodGet, "/admin/v1/principals", token, nil).Expect(t, http.StatusOK).JSON(t, &list)
		for _, p := range list.Principals {
			if p.Kind == "machine" && p.Role == "oncall" || strings.EqualFold(p.Name, "robot") {
				t.Errorf("a refused request created %+v", p)
			}
		}
		var changes struct {
			Changes []httpapi.PendingChangeBody `json:"changes"`
		}
		e.Do(t, http.MethodGet, "/admin/v1/pending-changes?status=all", token, nil).Expect(t, http.StatusOK).JSON(t, &changes)
		for _, c := range changes.Changes {
			if strings.Contains(c.Summary, "robot") {
				t.Errorf("a refused request left a change: %+v", c)
			}
		}
	}
}
