package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
)

type listPage struct {
	Delegations []httpapi.DelegationBody `json:"delegations"`
	NextCursor  string                   `json:"next_cursor"`
}

// listAll follows next_cursor from the first page of query and returns
// every page's ids.
func listAll(t *testing.T, env *apitest.Env, token string, query url.Values) (pages [][]string) {
	t.Helper()
	cursor := ""
	for range 100 {
		q := url.Values{}
		for k, v := range query {
			q[k] = v
		}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var p listPage
		env.Do(t, http.MethodGet, "/v1/delegations?"+q.Encode(), token, nil).Expect(t, http.StatusOK).JSON(t, &p)
		var ids []string
		for _, d := range p.Delegations {
			ids = append(ids, d.ID)
		}
		pages = append(pages, ids)
		if p.NextCursor == "" {
			return pages
		}
		cursor = p.NextCursor
	}
	t.Fatal("pagination does not end")
	return nil
}

func TestListDelegations(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.PutBudget(t, "b", "EUR", 100_000)
	env.PutOrg(t, "org-a", false)
	env.PutOrg(t, "org-b", false)
	acme := env.NewOrchestrator(t, "acme")
	globex := env.NewOrchestrator(t, "globex")

	// 7 delegations for acme (newest last), 2 for globex.
	var created []httpapi.DelegationBody
	for i := range 7 {
		org := "org-a"
		if i%2 == 1 {
			org = "org-b"
		}
		created = append(created, env.CreateDelegation(t, acme, apitest.NewCreateRequest(fmt.Sprintf("op-%d", i), org, "procurement", "b", 10, "EUR")))
	}
	for i := range 2 {
		env.CreateDelegation(t, globex, apitest.NewCreateRequest(fmt.Sprintf("g-op-%d", i), "org-a", "procurement", "b", 10, "EUR"))
	}
	env.ReportStatus(t, acme, created[0].ID, "TASK_STATE_COMPLETED", apitest.Epoch) // settled
	env.ReportStatus(t, acme, created[1].ID, "TASK_STATE_CANCELED", apitest.Epoch)  // revocation_pending_compensation
	env.ReportStatus(t, acme, created[2].ID, "TASK_STATE_REJECTED", apitest.Epoch)  // released
	env.ReportStatus(t, acme, created[3].ID, "TASK_STATE_WORKING", apitest.Epoch)   // held, working
	env.ReportStatus(t, acme, created[4].ID, "input-required", apitest.Epoch)       // held, input_required
	env.ReportStatus(t, acme, created[5].ID, "TASK_STATE_FAILED", apitest.Epoch)    // revocation_pending_compensation

	var newestFirst []string
	for i := len(created) - 1; i >= 0; i-- {
		newestFirst = append(newestFirst, created[i].ID)
	}

	// Pages of 3: 3 + 3 + 1, newest first, nothing repeated or skipped.
	pages := listAll(t, env, acme, url.Values{"limit": {"3"}})
	if len(pages) != 3 || len(pages[0]) != 3 || len(pages[1]) != 3 || len(pages[2]) != 1 {
		t.Fatalf("pages of 3 over 7: %v", pages)
	}
	if all := slices.Concat(pages...); !slices.Equal(all, newestFirst) {
		t.Fatalf("paged listing %v, want %v", all, newestFirst)
	}
	// A page size that divides the total ends with an empty page at most.
	pages = listAll(t, env, acme, url.Values{"limit": {"7"}})
	if all := slices.Concat(pages...); !slices.Equal(all, newestFirst) || len(pages) > 2 {
		t.Fatalf("pages of 7 over 7: %v", pages)
	}
	// Default limit returns everything at once.
	pages = listAll(t, env, acme, nil)
	if len(pages) != 1 || !slices.Equal(pages[0], newestFirst) {
		t.Fatalf("default listing: %v", pages)
	}

	ids := func(idx ...int) []string {
		var out []string
		for i := len(created) - 1; i >= 0; i-- {
			if slices.Contains(idx, i) {
				out = append(out, created[i].ID)
			}
		}
		return out
	}
	for _, tc := range []struct {
		query url.Values
		want  []string
	}{
		{url.Values{"obligation_state": {"held"}}, ids(3, 4, 6)},
		{url.Values{"obligation_state": {"revocation_pending_compensation"}}, ids(1, 5)},
		{url.Values{"obligation_state": {"settled"}}, ids(0)},
		{url.Values{"obligation_state": {"released"}}, ids(2)},
		{url.Values{"obligation_state": {"written_off"}}, nil},
		{url.Values{"task_status": {"working"}}, ids(3)},
		{url.Values{"task_status": {"TASK_STATE_INPUT_REQUIRED"}}, ids(4)},
		{url.Values{"task_status": {"input-required"}}, ids(4)},
		{url.Values{"task_status": {"unknown"}}, ids(6)},
		{url.Values{"org_id": {"org-b"}}, ids(1, 3, 5)},
		{url.Values{"org_id": {"org-a"}, "obligation_state": {"held"}}, ids(4, 6)},
		{url.Values{"org_id": {"nobody"}}, nil},
		{url.Values{"obligation_state": {"revocation_pending_compensation"}, "task_status": {"failed"}}, ids(5)},
		{url.Values{"obligation_state": {"held"}, "limit": {"1"}}, ids(3, 4, 6)},
	} {
		got := slices.Concat(listAll(t, env, acme, tc.query)...)
		if !slices.Equal(got, tc.want) {
			t.Errorf("list %s: %v, want %v", tc.query.Encode(), got, tc.want)
		}
	}
	// The list body has an empty array, not null, when nothing matches.
	r := env.Do(t, http.MethodGet, "/v1/delegations?org_id=nobody", acme, nil).Expect(t, http.StatusOK)
	var raw map[string]json.RawMessage
	r.JSON(t, &raw)
	if string(raw["delegations"]) != "[]" {
		t.Fatalf("empty listing: %s", r.Body)
	}
	// Finance sees both tenants across pages.
	finance := env.NewToken(t, "finance", "", "fin")
	if all := slices.Concat(listAll(t, env, finance, url.Values{"limit": {"4"}})...); len(all) != 9 {
		t.Fatalf("finance lists %d delegations, want 9", len(all))
	}
	// A cursor from another tenant's listing reveals nothing of it.
	if all := slices.Concat(listAll(t, env, globex, url.Values{"limit": {"1"}})...); len(all) != 2 {
		t.Fatalf("globex lists %d delegations, want 2", len(all))
	}
}

func TestOpenAPIAndHealth(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	r := env.Do(t, http.MethodGet, "/openapi.json", "", nil).Expect(t, http.StatusOK)
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
		Comps   struct {
			SecuritySchemes map[string]json.RawMessage `json:"securitySchemes"`
		} `json:"components"`
	}
	if err := json.Unmarshal(r.Body, &doc); err != nil {
		t.Fatalf("/openapi.json is not JSON: %v", err)
	}
	if len(doc.OpenAPI) < 3 || doc.OpenAPI[:3] != "3.1" {
		t.Fatalf("openapi %q, want 3.1", doc.OpenAPI)
	}
	for path, methods := range map[string][]string{
		"/v1/delegations":                  {"get", "post"},
		"/v1/delegations/{id}":             {"get"},
		"/v1/delegations/{id}/task-status": {"post"},
		"/v1/delegations/{id}/cancel":      {"post"},
		"/v1/delegations/{id}/hold":        {"patch"},
		"/v1/delegations/{id}/events":      {"get"},
		"/admin/v1/budgets/{id}":           {"get", "put"},
		"/admin/v1/orgs/{id}":              {"get", "put"},
		"/admin/v1/task-classes/{name}":    {"get", "put"},
		"/admin/v1/task-classes":           {"get"},
		"/admin/v1/tokens":                 {"post"},
		"/healthz":                         {"get"},
		"/readyz":                          {"get"},
	} {
		for _, m := range methods {
			op, ok := doc.Paths[path][m]
			if !ok {
				t.Errorf("openapi lacks %s %s", m, path)
				continue
			}
			// Path parameters are declared (not silently dropped).
			var o struct {
				Parameters []struct{ Name, In string } `json:"parameters"`
			}
			_ = json.Unmarshal(op, &o)
			for _, param := range pathParam.FindAllStringSubmatch(path, -1) {
				found := false
				for _, p := range o.Parameters {
					found = found || (p.Name == param[1] && p.In == "path")
				}
				if !found {
					t.Errorf("%s %s does not declare its path parameter %q", m, path, param[1])
				}
			}
		}
	}
	// The reads that may be served from the standby declare consistency
	// and say so in their description.
	for _, path := range []string{"/v1/obligations", "/v1/obligations/summary", "/v1/obligations/queue", "/v1/anomalies"} {
		var o struct {
			Description string                      `json:"description"`
			Parameters  []struct{ Name, In string } `json:"parameters"`
		}
		_ = json.Unmarshal(doc.Paths[path]["get"], &o)
		if !slices.ContainsFunc(o.Parameters, func(p struct{ Name, In string }) bool { return p.Name == "consistency" && p.In == "query" }) ||
			!strings.Contains(o.Description, "consistency=strong") {
			t.Errorf("GET %s does not declare and describe consistency=strong: %+v", path, o)
		}
	}
	if _, ok := doc.Paths["/admin/v1/delegations/{id}/remote-tasks/{task_id}/redrive"]["post"]; !ok {
		t.Error("openapi lacks the redrive of an extra remote task's compensation")
	}
	if _, ok := doc.Comps.SecuritySchemes["bearer"]; !ok {
		t.Error("openapi declares no bearer security scheme")
	}

	var h struct{ Status string }
	env.Do(t, http.MethodGet, "/healthz", "", nil).Expect(t, http.StatusOK).JSON(t, &h)
	if h.Status != "ok" {
		t.Fatalf("/healthz: %+v", h)
	}
	env.Do(t, http.MethodGet, "/readyz", "", nil).Expect(t, http.StatusOK).JSON(t, &h)
	if h.Status != "ready" {
		t.Fatalf("/readyz: %+v", h)
	}
	// An unknown route is a 404 and a wrong method a 405, not a 500.
	if r := env.Do(t, http.MethodGet, "/v2/nothing", env.OncallToken, nil); r.Status != http.StatusNotFound {
		t.Fatalf("unknown route: %d", r.Status)
	}
	if r := env.Do(t, http.MethodDelete, "/v1/delegations", env.OncallToken, nil); r.Status != http.StatusMethodNotAllowed {
		t.Fatalf("DELETE /v1/delegations: %d", r.Status)
	}
}

var pathParam = regexp.MustCompile(`\{([a-z_]+)\}`)

// TestReadyzFailsWithoutDatabase: readiness reflects the database.
func TestReadyzFailsWithoutDatabase(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Pool.Close()
	env.Do(t, http.MethodGet, "/readyz", "", nil).Problem(t, http.StatusServiceUnavailable, "not_ready")
	env.Do(t, http.MethodGet, "/healthz", "", nil).Expect(t, http.StatusOK)
}
