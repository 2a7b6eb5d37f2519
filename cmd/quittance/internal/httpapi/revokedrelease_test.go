package httpapi_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/ledger"
)

// TestRevokedIdentityReleasesSurfaced: when an org's identity is revoked,
// every obligation already released on its declarations is listed in
// /v1/anomalies, counted (count and amount) in the summary and in the
// reporting view, until finance acknowledges it — which is an event, is
// finance's alone, and happens once. Releases of other orgs, or not on a
// declaration, are not surfaced.
func TestRevokedIdentityReleasesSurfaced(t *testing.T) {
	t.Parallel()
	e := newCompEnv(t)
	finance := e.NewToken(t, ledger.RoleFinance, "", "fin")
	declaredA := e.pending(t, orgB, 3_000)
	e.accept(t, declsPath, e.declaration(t, declaredA), "applied")
	declaredB := e.pending(t, orgB, 4_000)
	e.accept(t, declsPath, e.declaration(t, declaredB), "applied")
	acked := e.pending(t, orgB, 5_000)
	e.accept(t, acksPath, e.ack(t, acked), "applied")
	otherOrg := e.pending(t, orgC, 6_000)
	e.accept(t, declsPath, e.declaration(t, otherOrg), "applied")

	type anomalies struct {
		Anomalies []httpapi.AnomalyBody `json:"anomalies"`
	}
	surfaced := func() map[string]bool {
		var a anomalies
		e.Do(t, http.MethodGet, "/v1/anomalies?kind=released_on_revoked_identity", finance, nil).Expect(t, http.StatusOK).JSON(t, &a)
		out := map[string]bool{}
		for _, x := range a.Anomalies {
			if x.Kind != "released_on_revoked_identity" || x.OrgID != orgB {
				t.Errorf("anomaly %+v", x)
			}
			out[x.DelegationID] = true
		}
		return out
	}
	type summary struct {
		Rows                    []httpapi.SummaryRowBody          `json:"rows"`
		RevokedIdentityReleases []httpapi.RevokedReleaseTotalBody `json:"revoked_identity_releases"`
	}
	totals := func(query string) []httpapi.RevokedReleaseTotalBody {
		var s summary
		e.Do(t, http.MethodGet, "/v1/obligations/summary"+query, finance, nil).Expect(t, http.StatusOK).JSON(t, &s)
		return s.RevokedIdentityReleases
	}
	view := func() (n, amount int64) {
		err := e.Pool.QueryRow(context.Background(),
			"SELECT count(*), coalesce(sum(amount_minor), 0)::bigint FROM reporting.revoked_identity_releases_v1").Scan(&n, &amount)
		if err != nil {
			t.Fatal(err)
		}
		return n, amount
	}
	if len(surfaced()) != 0 || len(totals("")) != 0 {
		t.Fatal("releases surfaced before any revocation")
	}

	e.Do(t, http.MethodPost, "/admin/v1/orgs/"+orgB+"/revoke-identity", e.OncallToken, map[string]any{"reason": "signing key leaked"}).Expect(t, http.StatusOK)

	if got := surfaced(); len(got) != 2 || !got[declaredA.ID] || !got[declaredB.ID] {
		t.Fatalf("anomalies after revocation: %v", got)
	}
	if got := totals(""); len(got) != 1 || got[0] != (httpapi.RevokedReleaseTotalBody{OrgID: orgB, Currency: "EUR", Count: 2, AmountMinor: 7_000}) {
		t.Fatalf("summary after revocation: %+v", got)
	}
	if got := totals("?org_id=" + orgC); len(got) != 0 {
		t.Errorf("summary filtered to another org: %+v", got)
	}
	if n, amount := view(); n != 2 || amount != 7_000 {
		t.Fatalf("reporting view: %d, %d", n, amount)
	}
	for _, id := range []string{declaredA.ID, declaredB.ID} {
		if ev := e.lastEvent(t, id); ev.Type != ledger.EventTypeReleasedOnRevokedIdentity {
			t.Errorf("%s: last event %s", id, ev.Type)
		}
		if d := e.Delegation(t, e.OncallToken, id); d.ObligationState != "released" {
			t.Errorf("%s: %s, the release stands", id, d.ObligationState)
		}
	}

	path := "/v1/delegations/" + declaredA.ID + "/revoked-release/acknowledge"
	e.Do(t, http.MethodPost, path, e.OncallToken, map[string]any{"note": "mine"}).Problem(t, http.StatusForbidden, "forbidden")
	e.Do(t, http.MethodPost, path, e.orch, map[string]any{"note": "mine"}).Problem(t, http.StatusForbidden, "")
	e.Do(t, http.MethodPost, path, finance, map[string]any{"note": ""}).Problem(t, http.StatusUnprocessableEntity, "")
	e.Do(t, http.MethodPost, path, finance, map[string]any{"note": "   "}).Problem(t, http.StatusUnprocessableEntity, "validation_failed")
	e.Do(t, http.MethodPost, "/v1/delegations/"+acked.ID+"/revoked-release/acknowledge", finance, map[string]any{"note": "x"}).Problem(t, http.StatusNotFound, "not_found")
	e.Do(t, http.MethodPost, "/v1/delegations/not-a-uuid/revoked-release/acknowledge", finance, map[string]any{"note": "x"}).Problem(t, http.StatusNotFound, "not_found")
	if len(surfaced()) != 2 {
		t.Fatal("a refused acknowledgement changed what is surfaced")
	}

	var ack httpapi.RevokedReleaseBody
	e.Do(t, http.MethodPost, path, finance, map[string]any{"note": "claimed back from the supplier"}).Expect(t, http.StatusOK).JSON(t, &ack)
	if ack.DelegationID != declaredA.ID || ack.Amount.AmountMinor != 3_000 || ack.AcknowledgedBy != e.PrincipalID(t, finance) || ack.Note != "claimed back from the supplier" {
		t.Fatalf("acknowledgement: %+v", ack)
	}
	ev := e.lastEvent(t, declaredA.ID)
	if ev.Type != ledger.EventTypeRevokedReleaseAcknowledged || ev.Actor != e.Actor(t, finance) || eventData(t, ev)["note"] != "claimed back from the supplier" {
		t.Fatalf("acknowledgement event: %+v", ev)
	}
	e.Do(t, http.MethodPost, path, finance, map[string]any{"note": "again"}).Problem(t, http.StatusConflict, "release_already_acknowledged")

	if got := surfaced(); len(got) != 1 || !got[declaredB.ID] {
		t.Fatalf("anomalies after acknowledging one: %v", got)
	}
	if got := totals(""); len(got) != 1 || got[0].Count != 1 || got[0].AmountMinor != 4_000 {
		t.Fatalf("summary after acknowledging one: %+v", got)
	}
	if n, amount := view(); n != 1 || amount != 4_000 {
		t.Fatalf("reporting view after acknowledging one: %d, %d", n, amount)
	}
	e.CheckInvariants(t)
}
