package httpapi_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/ledger"
)

// TestBadInput sends bad input to every endpoint: each is refused with a
// 4xx problem+json carrying a code, and nothing is written.
func TestBadInput(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.PutBudget(t, "eur", "EUR", 1000)
	env.PutBudget(t, "usd", "USD", 1000)
	env.PutOrg(t, "org", false)
	orch := env.NewOrchestrator(t, "acme")
	d := env.CreateDelegation(t, orch, apitest.NewCreateRequest("op-1", "org", "procurement", "eur", 600, "EUR"))
	oncall := env.OncallToken

	// create builds a delegation body from a valid one, with edits applied.
	create := func(edit func(m map[string]any)) map[string]any {
		m := map[string]any{
			"business_operation_id": "op-new", "org_id": "org", "task_class": "procurement", "budget_id": "eur",
			"hold":   map[string]any{"amount_minor": 10, "currency": "EUR"},
			"remote": map[string]any{"task_id": "task-new", "context_id": "ctx"},
		}
		edit(m)
		return m
	}
	hold := func(m map[string]any) map[string]any { return m["hold"].(map[string]any) }
	remote := func(m map[string]any) map[string]any { return m["remote"].(map[string]any) }

	type badCase struct {
		name         string
		method, path string
		token        string
		body         any
		status       int    // 0: any 4xx
		code         string // "": any code
	}
	cases := []badCase{
		// PUT /admin/v1/budgets/{id}
		{"budget: malformed JSON", "PUT", "/admin/v1/budgets/new", oncall, `{"currency":`, 0, ""},
		{"budget: not an object", "PUT", "/admin/v1/budgets/new", oncall, `[1,2]`, 0, ""},
		{"budget: empty body", "PUT", "/admin/v1/budgets/new", oncall, ``, 0, ""},
		{"budget: unknown field", "PUT", "/admin/v1/budgets/new", oncall, `{"currency":"EUR","funded_minor":5,"overdraft":true}`, 422, ""},
		{"budget: missing currency", "PUT", "/admin/v1/budgets/new", oncall, `{"funded_minor":5}`, 422, ""},
		{"budget: missing funding", "PUT", "/admin/v1/budgets/new", oncall, `{"currency":"EUR"}`, 422, ""},
		{"budget: negative funding", "PUT", "/admin/v1/budgets/new", oncall, `{"currency":"EUR","funded_minor":-1}`, 422, ""},
		{"budget: fractional funding", "PUT", "/admin/v1/budgets/new", oncall, `{"currency":"EUR","funded_minor":1.5}`, 0, ""},
		{"budget: funding as string", "PUT", "/admin/v1/budgets/new", oncall, `{"currency":"EUR","funded_minor":"5"}`, 422, ""},
		{"budget: lower-case currency", "PUT", "/admin/v1/budgets/new", oncall, `{"currency":"eur","funded_minor":5}`, 422, ""},
		{"budget: four-letter currency", "PUT", "/admin/v1/budgets/new", oncall, `{"currency":"EURO","funded_minor":5}`, 422, ""},
		{"budget: bad id", "PUT", "/admin/v1/budgets/-new", oncall, `{"currency":"EUR","funded_minor":5}`, 422, "validation_failed"},
		{"budget: id too long", "PUT", "/admin/v1/budgets/" + strings.Repeat("a", 129), oncall, `{"currency":"EUR","funded_minor":5}`, 422, ""},
		{"budget: currency change", "PUT", "/admin/v1/budgets/eur", oncall, `{"currency":"USD","funded_minor":1000}`, 409, "currency_immutable"},
		{"budget: funding below commitments", "PUT", "/admin/v1/budgets/eur", oncall, `{"currency":"EUR","funded_minor":599}`, 409, "funding_below_commitments"},
		{"budget: funding to zero with a hold", "PUT", "/admin/v1/budgets/eur", oncall, `{"currency":"EUR","funded_minor":0}`, 409, "funding_below_commitments"},
		{"budget: tenants not a list", "PUT", "/admin/v1/budgets/new", oncall, `{"currency":"EUR","funded_minor":5,"tenants":"acme"}`, 422, ""},
		{"budget: bad tenant", "PUT", "/admin/v1/budgets/new", oncall, `{"currency":"EUR","funded_minor":5,"tenants":["no spaces!"]}`, 422, "validation_failed"},
		{"budget: empty tenant", "PUT", "/admin/v1/budgets/new", oncall, `{"currency":"EUR","funded_minor":5,"tenants":[""]}`, 422, "validation_failed"},
		{"budget: too many tenants", "PUT", "/admin/v1/budgets/new", oncall, `{"currency":"EUR","funded_minor":5,"tenants":[` + strings.Repeat(`"t",`, 100) + `"t"]}`, 422, ""},

		// PUT /admin/v1/orgs/{id}
		{"org: malformed JSON", "PUT", "/admin/v1/orgs/new", oncall, `{"name":"x"`, 0, ""},
		{"org: unknown field", "PUT", "/admin/v1/orgs/new", oncall, `{"name":"x","trusted":true}`, 422, ""},
		{"org: missing name", "PUT", "/admin/v1/orgs/new", oncall, `{"shared_coordinator":true}`, 422, ""},
		{"org: empty name", "PUT", "/admin/v1/orgs/new", oncall, `{"name":""}`, 422, ""},
		{"org: blank name", "PUT", "/admin/v1/orgs/new", oncall, `{"name":"   "}`, 422, "validation_failed"},
		{"org: name too long", "PUT", "/admin/v1/orgs/new", oncall, fmt.Sprintf(`{"name":%q}`, strings.Repeat("n", 201)), 422, ""},
		{"org: bad id", "PUT", "/admin/v1/orgs/bad%20id", oncall, `{"name":"x"}`, 422, "validation_failed"},
		{"org: jwks not an object", "PUT", "/admin/v1/orgs/new", oncall, `{"name":"x","jwks":"keys"}`, 422, ""},
		{"org: shared_coordinator not a bool", "PUT", "/admin/v1/orgs/new", oncall, `{"name":"x","shared_coordinator":"yes"}`, 422, ""},
		{"org: jwks_url not a string", "PUT", "/admin/v1/orgs/new", oncall, `{"name":"x","jwks_url":5}`, 422, ""},
		{"org: jwks_url too long", "PUT", "/admin/v1/orgs/new", oncall, fmt.Sprintf(`{"name":"x","jwks_url":"https://k.example/%s"}`, strings.Repeat("a", 2048)), 422, ""},
		{"org: jwks with jwks_url", "PUT", "/admin/v1/orgs/org", oncall, `{"name":"x","jwks_url":"https://keys.example/jwks.json","jwks":{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"k","use":"sig","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}}`, 422, "validation_failed"},

		// POST /admin/v1/orgs/{id}/keys/refresh
		{"org keys refresh: unknown org", "POST", "/admin/v1/orgs/nobody/keys/refresh", oncall, nil, 404, ""},
		{"org keys refresh: inline keys", "POST", "/admin/v1/orgs/org/keys/refresh", oncall, nil, 409, "org_has_no_jwks_url"},

		// PUT /admin/v1/task-classes/{name}
		{"class: malformed JSON", "PUT", "/admin/v1/task-classes/new", oncall, `{`, 0, ""},
		{"class: unknown field", "PUT", "/admin/v1/task-classes/new", oncall, `{"effect_capable":true,"gate_on":[],"compensation_timeout":"1h","x":1}`, 422, ""},
		{"class: missing timeout", "PUT", "/admin/v1/task-classes/new", oncall, `{"effect_capable":true,"gate_on":["canceled"]}`, 422, ""},
		{"class: missing gate_on", "PUT", "/admin/v1/task-classes/new", oncall, `{"effect_capable":true,"compensation_timeout":"1h"}`, 422, ""},
		{"class: gate_on completed", "PUT", "/admin/v1/task-classes/new", oncall, `{"effect_capable":true,"gate_on":["canceled","completed"],"compensation_timeout":"1h"}`, 422, "validation_failed"},
		{"class: gate_on rejected", "PUT", "/admin/v1/task-classes/new", oncall, `{"effect_capable":true,"gate_on":["TASK_STATE_REJECTED"],"compensation_timeout":"1h"}`, 422, "validation_failed"},
		{"class: gate_on working", "PUT", "/admin/v1/task-classes/new", oncall, `{"effect_capable":true,"gate_on":["working"],"compensation_timeout":"1h"}`, 422, "validation_failed"},
		{"class: gate_on garbage", "PUT", "/admin/v1/task-classes/new", oncall, `{"effect_capable":true,"gate_on":["whenever"],"compensation_timeout":"1h"}`, 422, "validation_failed"},
		{"class: timeout not a duration", "PUT", "/admin/v1/task-classes/new", oncall, `{"effect_capable":true,"gate_on":[],"compensation_timeout":"3 days"}`, 422, "validation_failed"},
		{"class: timeout zero", "PUT", "/admin/v1/task-classes/new", oncall, `{"effect_capable":true,"gate_on":[],"compensation_timeout":"0s"}`, 422, "validation_failed"},
		{"class: timeout negative", "PUT", "/admin/v1/task-classes/new", oncall, `{"effect_capable":true,"gate_on":[],"compensation_timeout":"-72h"}`, 422, "validation_failed"},
		{"class: timeout a number", "PUT", "/admin/v1/task-classes/new", oncall, `{"effect_capable":true,"gate_on":[],"compensation_timeout":3600}`, 422, ""},
		{"class: bad name", "PUT", "/admin/v1/task-classes/Bad-Name", oncall, `{"effect_capable":true,"gate_on":[],"compensation_timeout":"1h"}`, 422, "validation_failed"},

		// POST /admin/v1/tokens
		{"token: malformed JSON", "POST", "/admin/v1/tokens", oncall, `{"role":`, 0, ""},
		{"token: unknown field", "POST", "/admin/v1/tokens", oncall, `{"role":"finance","name":"x","admin":true}`, 422, ""},
		{"token: unknown role", "POST", "/admin/v1/tokens", oncall, `{"role":"admin","name":"x"}`, 422, ""},
		{"token: missing role", "POST", "/admin/v1/tokens", oncall, `{"name":"x"}`, 422, ""},
		{"token: missing name", "POST", "/admin/v1/tokens", oncall, `{"role":"finance"}`, 422, ""},
		{"token: blank name", "POST", "/admin/v1/tokens", oncall, `{"role":"finance","name":"  "}`, 422, "validation_failed"},
		{"token: orchestrator without tenant", "POST", "/admin/v1/tokens", oncall, `{"role":"orchestrator","name":"x"}`, 422, "validation_failed"},
		{"token: finance with tenant", "POST", "/admin/v1/tokens", oncall, `{"role":"finance","tenant":"acme","name":"x"}`, 422, "validation_failed"},
		{"token: oncall with tenant", "POST", "/admin/v1/tokens", oncall, `{"role":"oncall","tenant":"acme","name":"x"}`, 422, "validation_failed"},
		{"token: bad tenant", "POST", "/admin/v1/tokens", oncall, `{"role":"orchestrator","tenant":"no spaces!","name":"x"}`, 422, "validation_failed"},

		// POST /v1/delegations
		{"create: malformed JSON", "POST", "/v1/delegations", orch, `{"business_operation_id":"x",`, 0, ""},
		{"create: unknown field", "POST", "/v1/delegations", orch, create(func(m map[string]any) { m["priority"] = "high" }), 422, ""},
		{"create: unknown nested field", "POST", "/v1/delegations", orch, create(func(m map[string]any) { hold(m)["tax"] = 1 }), 422, ""},
		{"create: missing business_operation_id", "POST", "/v1/delegations", orch, create(func(m map[string]any) { delete(m, "business_operation_id") }), 422, ""},
		{"create: empty business_operation_id", "POST", "/v1/delegations", orch, create(func(m map[string]any) { m["business_operation_id"] = "" }), 422, ""},
		{"create: blank business_operation_id", "POST", "/v1/delegations", orch, create(func(m map[string]any) { m["business_operation_id"] = "   " }), 422, "validation_failed"},
		{"create: business_operation_id too long", "POST", "/v1/delegations", orch, create(func(m map[string]any) { m["business_operation_id"] = strings.Repeat("o", 201) }), 422, ""},
		{"create: missing org", "POST", "/v1/delegations", orch, create(func(m map[string]any) { delete(m, "org_id") }), 422, ""},
		{"create: missing budget", "POST", "/v1/delegations", orch, create(func(m map[string]any) { delete(m, "budget_id") }), 422, ""},
		{"create: missing task class", "POST", "/v1/delegations", orch, create(func(m map[string]any) { delete(m, "task_class") }), 422, ""},
		{"create: missing hold", "POST", "/v1/delegations", orch, create(func(m map[string]any) { delete(m, "hold") }), 422, ""},
		{"create: missing amount", "POST", "/v1/delegations", orch, create(func(m map[string]any) { delete(hold(m), "amount_minor") }), 422, ""},
		{"create: missing currency", "POST", "/v1/delegations", orch, create(func(m map[string]any) { delete(hold(m), "currency") }), 422, ""},
		{"create: missing remote", "POST", "/v1/delegations", orch, create(func(m map[string]any) { delete(m, "remote") }), 422, ""},
		{"create: missing remote task", "POST", "/v1/delegations", orch, create(func(m map[string]any) { delete(remote(m), "task_id") }), 422, ""},
		{"create: empty remote task", "POST", "/v1/delegations", orch, create(func(m map[string]any) { remote(m)["task_id"] = "" }), 422, "validation_failed"},
		{"create: zero amount", "POST", "/v1/delegations", orch, create(func(m map[string]any) { hold(m)["amount_minor"] = 0 }), 422, ""},
		{"create: negative amount", "POST", "/v1/delegations", orch, create(func(m map[string]any) { hold(m)["amount_minor"] = -10 }), 422, ""},
		{"create: fractional amount", "POST", "/v1/delegations", orch, create(func(m map[string]any) { hold(m)["amount_minor"] = 10.5 }), 0, ""},
		{"create: amount as string", "POST", "/v1/delegations", orch, create(func(m map[string]any) { hold(m)["amount_minor"] = "10" }), 422, ""},
		{"create: lower-case currency", "POST", "/v1/delegations", orch, create(func(m map[string]any) { hold(m)["currency"] = "eur" }), 422, ""},
		{"create: currency mismatch", "POST", "/v1/delegations", orch, create(func(m map[string]any) { m["budget_id"] = "usd" }), 409, "currency_mismatch"},
		{"create: unknown org", "POST", "/v1/delegations", orch, create(func(m map[string]any) { m["org_id"] = "initech" }), 422, "org_not_found"},
		{"create: unknown budget", "POST", "/v1/delegations", orch, create(func(m map[string]any) { m["budget_id"] = "gbp" }), 422, "budget_not_found"},
		{"create: bad org id", "POST", "/v1/delegations", orch, create(func(m map[string]any) { m["org_id"] = "../etc" }), 422, "validation_failed"},
		{"create: bad task class", "POST", "/v1/delegations", orch, create(func(m map[string]any) { m["task_class"] = "Procurement!" }), 422, "validation_failed"},
		{"create: insufficient funds", "POST", "/v1/delegations", orch, create(func(m map[string]any) { hold(m)["amount_minor"] = 401 }), 422, "insufficient_funds"},
		{"create: huge amount", "POST", "/v1/delegations", orch, create(func(m map[string]any) { hold(m)["amount_minor"] = int64(1) << 62 }), 422, "insufficient_funds"},

		// POST /v1/delegations/{id}/task-status
		{"status: malformed JSON", "POST", "/v1/delegations/" + d.ID + "/task-status", orch, `{"state":`, 0, ""},
		{"status: unknown field", "POST", "/v1/delegations/" + d.ID + "/task-status", orch, `{"state":"working","final":true}`, 422, ""},
		{"status: missing state", "POST", "/v1/delegations/" + d.ID + "/task-status", orch, `{"message":"hi"}`, 422, ""},
		{"status: empty state", "POST", "/v1/delegations/" + d.ID + "/task-status", orch, `{"state":""}`, 422, "unknown_task_status"},
		{"status: unknown state", "POST", "/v1/delegations/" + d.ID + "/task-status", orch, `{"state":"done"}`, 422, "unknown_task_status"},
		{"status: unspecified", "POST", "/v1/delegations/" + d.ID + "/task-status", orch, `{"state":"TASK_STATE_UNSPECIFIED"}`, 422, "unknown_task_status"},
		{"status: state not a string", "POST", "/v1/delegations/" + d.ID + "/task-status", orch, `{"state":3}`, 422, ""},
		{"status: bad timestamp", "POST", "/v1/delegations/" + d.ID + "/task-status", orch, `{"state":"working","timestamp":"yesterday"}`, 422, ""},
		{"status: message too long", "POST", "/v1/delegations/" + d.ID + "/task-status", orch, fmt.Sprintf(`{"state":"working","message":%q}`, strings.Repeat("m", 4097)), 422, ""},
		{"status: no body", "POST", "/v1/delegations/" + d.ID + "/task-status", orch, nil, 0, ""},

		// GET /v1/delegations
		{"list: limit zero", "GET", "/v1/delegations?limit=0", orch, nil, 422, ""},
		{"list: limit negative", "GET", "/v1/delegations?limit=-1", orch, nil, 422, ""},
		{"list: limit too large", "GET", "/v1/delegations?limit=501", orch, nil, 422, ""},
		{"list: limit not a number", "GET", "/v1/delegations?limit=ten", orch, nil, 422, ""},
		{"list: bad cursor", "GET", "/v1/delegations?cursor=page-2", orch, nil, 422, ""},
		{"list: bad obligation state", "GET", "/v1/delegations?obligation_state=open", orch, nil, 422, ""},
		{"list: bad task status", "GET", "/v1/delegations?task_status=done", orch, nil, 422, "unknown_task_status"},
	}
	before := env.Snapshot(t)
	for _, tc := range cases {
		r := env.Do(t, tc.method, tc.path, tc.token, tc.body)
		if tc.status == 0 {
			if r.Status < 400 || r.Status > 499 {
				t.Errorf("%s: status %d, want 4xx; body %s", tc.name, r.Status, r.Body)
				continue
			}
			tc.status = r.Status
		}
		if r.Status != tc.status {
			t.Errorf("%s: status %d, want %d; body %s", tc.name, r.Status, tc.status, r.Body)
			continue
		}
		if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
			t.Errorf("%s: Content-Type %q", tc.name, ct)
			continue
		}
		p := r.Problem(t, tc.status, "")
		if tc.code != "" && p.Code != tc.code {
			t.Errorf("%s: code %q, want %q (%s)", tc.name, p.Code, tc.code, r.Body)
		}
		if strings.Contains(string(r.Body), "SQLSTATE") || strings.Contains(string(r.Body), "pgx") {
			t.Errorf("%s: internal error text leaked: %s", tc.name, r.Body)
		}
		if after := env.Snapshot(t); after != before {
			t.Fatalf("%s wrote to the database:\nbefore: %s\nafter:  %s", tc.name, before, after)
		}
	}
	// The delegation is untouched.
	if got := env.Delegation(t, orch, d.ID); got.TaskStatus != string(ledger.StatusUnknown) || got.Version != d.Version {
		t.Fatalf("delegation changed: %+v", got)
	}
	env.CheckInvariants(t)
}

// TestAdminUpdates covers the accepted side of the admin endpoints the bad
// input test refuses: re-funding, org replacement, task class round trip.
func TestAdminUpdates(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	b := env.PutBudget(t, "b", "EUR", 1000)
	if b.FundedMinor != 1000 || b.AvailableMinor != 1000 || b.Currency != "EUR" {
		t.Fatalf("new budget %+v", b)
	}
	env.PutOrg(t, "org", false)
	orch := env.NewOrchestrator(t, "acme")
	env.CreateDelegation(t, orch, apitest.NewCreateRequest("op", "org", "procurement", "b", 600, "EUR"))
	// Funding may drop to exactly what is committed, and rise again.
	r := env.Do(t, http.MethodPut, "/admin/v1/budgets/b", env.OncallToken, `{"currency":"EUR","funded_minor":600}`).Expect(t, http.StatusOK)
	r.JSON(t, &b)
	if b.FundedMinor != 600 || b.AvailableMinor != 0 || b.HeldMinor != 600 {
		t.Fatalf("after funding down to the hold: %+v", b)
	}
	b = env.PutBudget(t, "b", "EUR", 5000)
	if b.FundedMinor != 5000 || b.AvailableMinor != 4400 || b.HeldMinor != 600 {
		t.Fatalf("after re-funding: %+v", b)
	}
	// Org replacement keeps it; GET shows what was put.
	env.Do(t, http.MethodPut, "/admin/v1/orgs/org", env.OncallToken, `{"name":"Renamed","shared_coordinator":true}`).Expect(t, http.StatusOK)
	var o struct {
		Name              string `json:"name"`
		SharedCoordinator bool   `json:"shared_coordinator"`
	}
	env.Do(t, http.MethodGet, "/admin/v1/orgs/org", env.OncallToken, nil).Expect(t, http.StatusOK).JSON(t, &o)
	if o.Name != "Renamed" || !o.SharedCoordinator {
		t.Fatalf("org after replacement: %+v", o)
	}
	// Task class: names normalized, duplicates removed, timeout shown as a duration.
	c := env.PutTaskClass(t, "survey", false, []string{"TASK_STATE_FAILED", "canceled", "failed"}, 90*time.Minute)
	if strings.Join(c.GateOn, ",") != "canceled,failed" || c.CompensationTimeout != "1h30m0s" || c.EffectCapable {
		t.Fatalf("task class %+v", c)
	}
	var defaults struct {
		EffectCapable       bool     `json:"effect_capable"`
		GateOn              []string `json:"gate_on"`
		CompensationTimeout string   `json:"compensation_timeout"`
	}
	for name, effect := range map[string]bool{"procurement": true, "payment": true, "provisioning": true, "shipment": true, "read_only": false} {
		env.Do(t, http.MethodGet, "/admin/v1/task-classes/"+name, env.OncallToken, nil).Expect(t, http.StatusOK).JSON(t, &defaults)
		if defaults.EffectCapable != effect || strings.Join(defaults.GateOn, ",") != "canceled,failed" || defaults.CompensationTimeout != "72h0m0s" {
			t.Errorf("default class %s: %+v", name, defaults)
		}
	}
	env.CheckInvariants(t)
}
