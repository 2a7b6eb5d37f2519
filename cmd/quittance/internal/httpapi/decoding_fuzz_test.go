package httpapi_test

import (
	"mime"
	"net/http"
	"testing"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
)

// FuzzAPIJSONDecoding sends arbitrary bodies to every JSON-writing
// endpoint. Whatever the bytes, the API answers a 2xx or a 4xx
// application/problem+json with a stable code — never a 5xx — and the
// ledger's invariants (conservation, held = active holds, intact chains)
// still hold afterwards.
func FuzzAPIJSONDecoding(f *testing.F) {
	e := apitest.New(f)
	orch := e.NewOrchestrator(f, "acme")
	e.PutBudget(f, "ops", "EUR", 1_000_000)
	e.PutOrg(f, "acme-supplies", false)
	d := e.CreateDelegation(f, orch, apitest.NewCreateRequest("fuzz-base", "acme-supplies", "procurement", "ops", 100, "EUR"))
	endpoints := []struct{ method, path, token string }{
		{http.MethodPost, "/v1/delegations", orch},
		{http.MethodPost, "/v1/delegations/" + d.ID + "/task-status", orch},
		{http.MethodPut, "/admin/v1/budgets/fuzz-budget", e.OncallToken},
		{http.MethodPut, "/admin/v1/orgs/fuzz-org", e.OncallToken},
		{http.MethodPut, "/admin/v1/task-classes/fuzz_class", e.OncallToken},
		{http.MethodPost, "/admin/v1/tokens", e.OncallToken},
		{http.MethodPost, "/admin/v1/delegations/" + d.ID + "/write-offs", e.OncallToken},
	}
	for i, body := range []string{
		`{"business_operation_id":"op-1","org_id":"acme-supplies","task_class":"procurement","budget_id":"ops","hold":{"amount_minor":5,"currency":"EUR"},"remote":{"task_id":"t-1"}}`,
		`{"state":"TASK_STATE_CANCELED","timestamp":"2026-01-01T00:00:00Z"}`,
		`{"currency":"EUR","funded_minor":9223372036854775807}`,
		`{"name":"Org","jwks":{"keys":[{"kty":"OKP","crv":"Ed25519","x":"AAAA","kid":"k","use":"sig"}]}}`,
		`{"effect_capable":true,"gate_on":["canceled"],"compensation_timeout":"-1h"}`,
		`{"role":"orchestrator","tenant":"t","name":"n"}`,
		`{"reason":"\u0000","reference":"` + "\xff" + `"}`,
		`{"hold":{"amount_minor":1e400}}`, `[]`, `null`, `{"a":`, "",
	} {
		f.Add(uint8(i), []byte(body))
	}
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		ep := endpoints[int(which)%len(endpoints)]
		r := e.Do(t, ep.method, ep.path, ep.token, body)
		switch {
		case r.Status >= 500:
			t.Fatalf("%s %s with %q: status %d: %s", ep.method, ep.path, body, r.Status, r.Body)
		case r.Status >= 400:
			mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
			if mt != "application/problem+json" {
				t.Fatalf("%s %s: status %d with Content-Type %q", ep.method, ep.path, r.Status, mt)
			}
			var p struct {
				Code string `json:"code"`
			}
			r.JSON(t, &p)
			if p.Code == "" {
				t.Fatalf("%s %s: status %d problem without a code: %s", ep.method, ep.path, r.Status, r.Body)
			}
		}
		e.CheckInvariants(t)
	})
}
