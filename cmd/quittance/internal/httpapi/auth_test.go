package httpapi_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/access"
)

// authedRoutes is every authenticated operation, with a body good enough
// to get past decoding.
func authedRoutes(delegationID string) []struct{ method, path, body string } {
	return []struct{ method, path, body string }{
		{http.MethodPost, "/v1/delegations", `{"business_operation_id":"x","org_id":"org","task_class":"procurement","budget_id":"b","hold":{"amount_minor":1,"currency":"EUR"},"remote":{"task_id":"t"}}`},
		{http.MethodGet, "/v1/delegations", ""},
		{http.MethodGet, "/v1/delegations/" + delegationID, ""},
		{http.MethodPost, "/v1/delegations/" + delegationID + "/task-status", `{"state":"completed"}`},
		{http.MethodPost, "/v1/delegations/" + delegationID + "/cancel", ""},
		{http.MethodGet, "/v1/delegations/" + delegationID + "/events", ""},
		{http.MethodPut, "/admin/v1/budgets/b", `{"currency":"EUR","funded_minor":5}`},
		{http.MethodGet, "/admin/v1/budgets/b", ""},
		{http.MethodPut, "/admin/v1/orgs/org", `{"name":"x"}`},
		{http.MethodGet, "/admin/v1/orgs/org", ""},
		{http.MethodPut, "/admin/v1/task-classes/procurement", `{"effect_capable":false,"gate_on":[],"compensation_timeout":"1h"}`},
		{http.MethodGet, "/admin/v1/task-classes/procurement", ""},
		{http.MethodGet, "/admin/v1/task-classes", ""},
		{http.MethodPost, "/admin/v1/tokens", `{"role":"oncall","name":"x"}`},
	}
}

func request(t *testing.T, env *apitest.Env, method, path, body string) *http.Request {
	t.Helper()
	var r *bytes.Reader
	if body != "" {
		r = bytes.NewReader([]byte(body))
	} else {
		r = bytes.NewReader(nil)
	}
	req, err := http.NewRequest(method, env.URL+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	return req
}

func TestUnauthenticated(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.PutBudget(t, "b", "EUR", 100)
	env.PutOrg(t, "org", false)
	orch := env.NewOrchestrator(t, "acme")
	d := env.CreateDelegation(t, orch, apitest.NewCreateRequest("op", "org", "procurement", "b", 10, "EUR"))

	revokedSecret := access.NewTokenSecret()
	headers := map[string]string{
		"missing":              "",
		"empty bearer":         "Bearer ",
		"basic scheme":         "Basic " + orch,
		"no scheme":            orch,
		"token scheme":         "Token " + orch,
		"unknown token":        "Bearer " + revokedSecret,
		"garbage":              "Bearer %%%",
		"bearer twice":         "Bearer Bearer " + orch,
		"token with suffix":    "Bearer " + orch + "x",
		"truncated token":      "Bearer " + orch[:len(orch)-1],
		"hash of a real token": "Bearer " + hex.EncodeToString(access.HashToken(orch)),
	}
	before := env.Snapshot(t)
	for name, h := range headers {
		for _, rt := range authedRoutes(d.ID) {
			req := request(t, env, rt.method, rt.path, rt.body)
			if h != "" {
				req.Header.Set("Authorization", h)
			}
			r := env.Send(t, req)
			r.Problem(t, http.StatusUnauthorized, "unauthenticated")
			if r.Header.Get("WWW-Authenticate") == "" {
				t.Errorf("%s %s with %s: 401 without WWW-Authenticate", rt.method, rt.path, name)
			}
		}
	}
	env.AssertUnchanged(t, before, "unauthenticated requests")
	// The scheme is case-insensitive.
	req := request(t, env, http.MethodGet, "/v1/delegations/"+d.ID, "")
	req.Header.Set("Authorization", "bearer "+orch)
	env.Send(t, req).Expect(t, http.StatusOK)
}

func TestRolesAndTenantScoping(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.PutBudget(t, "b", "EUR", 1000)
	env.PutOrg(t, "org", false)
	acme := env.NewOrchestrator(t, "acme")
	globex := env.NewOrchestrator(t, "globex")
	finance := env.NewToken(t, ledger.RoleFinance, "", "reconciler")
	d := env.CreateDelegation(t, acme, apitest.NewCreateRequest("op", "org", "procurement", "b", 10, "EUR"))
	gd := env.CreateDelegation(t, globex, apitest.NewCreateRequest("op-globex", "org", "procurement", "b", 20, "EUR"))

	before := env.Snapshot(t)
	// Orchestrators may not use the admin API, read or write.
	for _, rt := range authedRoutes(d.ID) {
		if rt.path[:7] != "/admin/" {
			continue
		}
		env.Send(t, withToken(request(t, env, rt.method, rt.path, rt.body), acme)).Problem(t, http.StatusForbidden, "forbidden")
	}
	// Finance reads but does not write.
	for _, rt := range []struct{ method, path, body string }{
		{http.MethodPost, "/v1/delegations", authedRoutes(d.ID)[0].body},
		{http.MethodPost, "/v1/delegations/" + d.ID + "/task-status", `{"state":"completed"}`},
		{http.MethodPost, "/v1/delegations/" + d.ID + "/cancel", ""},
		{http.MethodPut, "/admin/v1/budgets/b", `{"currency":"EUR","funded_minor":5}`},
		{http.MethodPut, "/admin/v1/orgs/org", `{"name":"x"}`},
		{http.MethodPut, "/admin/v1/task-classes/procurement", `{"effect_capable":false,"gate_on":[],"compensation_timeout":"1h"}`},
		{http.MethodPost, "/admin/v1/tokens", `{"role":"oncall","name":"x"}`},
	} {
		env.Send(t, withToken(request(t, env, rt.method, rt.path, rt.body), finance)).Problem(t, http.StatusForbidden, "forbidden")
	}
	// On-call administers but does not act as an orchestrator.
	env.Do(t, http.MethodPost, "/v1/delegations", env.OncallToken, authedRoutes(d.ID)[0].body).Problem(t, http.StatusForbidden, "forbidden")
	env.Do(t, http.MethodPost, "/v1/delegations/"+d.ID+"/task-status", env.OncallToken, `{"state":"completed"}`).Problem(t, http.StatusForbidden, "forbidden")
	env.AssertUnchanged(t, before, "forbidden requests")

	for _, tok := range []string{finance, env.OncallToken} {
		env.Do(t, http.MethodGet, "/v1/delegations/"+d.ID, tok, nil).Expect(t, http.StatusOK)
		env.Do(t, http.MethodGet, "/v1/delegations/"+gd.ID, tok, nil).Expect(t, http.StatusOK)
		env.Do(t, http.MethodGet, "/v1/delegations/"+d.ID+"/events", tok, nil).Expect(t, http.StatusOK)
		env.Do(t, http.MethodGet, "/admin/v1/budgets/b", tok, nil).Expect(t, http.StatusOK)
		env.Do(t, http.MethodGet, "/admin/v1/orgs/org", tok, nil).Expect(t, http.StatusOK)
		env.Do(t, http.MethodGet, "/admin/v1/task-classes/procurement", tok, nil).Expect(t, http.StatusOK)
		env.Do(t, http.MethodGet, "/admin/v1/task-classes", tok, nil).Expect(t, http.StatusOK)
	}
	// Finance lists every tenant's delegations; an orchestrator its own.
	var list struct {
		Delegations []struct{ ID, Tenant string } `json:"delegations"`
	}
	env.Do(t, http.MethodGet, "/v1/delegations", finance, nil).Expect(t, http.StatusOK).JSON(t, &list)
	if len(list.Delegations) != 2 {
		t.Fatalf("finance lists %d delegations, want 2", len(list.Delegations))
	}
	env.Do(t, http.MethodGet, "/v1/delegations", acme, nil).Expect(t, http.StatusOK).JSON(t, &list)
	if len(list.Delegations) != 1 || list.Delegations[0].ID != d.ID {
		t.Fatalf("acme lists %+v", list.Delegations)
	}

	// Another tenant's delegation is indistinguishable from a missing one.
	missing := uuid.Must(uuid.NewV7()).String()
	before = env.Snapshot(t)
	for _, suffix := range []string{"", "/events", "/task-status", "/cancel"} {
		method, body := http.MethodGet, any(nil)
		switch suffix {
		case "/task-status":
			method, body = http.MethodPost, `{"state":"TASK_STATE_COMPLETED"}`
		case "/cancel":
			method = http.MethodPost
		}
		other := env.Do(t, method, "/v1/delegations/"+d.ID+suffix, globex, body)
		absent := env.Do(t, method, "/v1/delegations/"+missing+suffix, globex, body)
		malformed := env.Do(t, method, "/v1/delegations/not-a-uuid"+suffix, globex, body)
		other.Problem(t, http.StatusNotFound, "not_found")
		absent.Problem(t, http.StatusNotFound, "not_found")
		malformed.Problem(t, http.StatusNotFound, "not_found")
		if !bytes.Equal(other.Body, absent.Body) || !bytes.Equal(other.Body, malformed.Body) {
			t.Fatalf("%s %s: bodies differ:\nother tenant: %s\nmissing:      %s\nmalformed:    %s", method, suffix, other.Body, absent.Body, malformed.Body)
		}
		if other.Header.Get("Content-Type") != absent.Header.Get("Content-Type") {
			t.Fatalf("content types differ: %q vs %q", other.Header.Get("Content-Type"), absent.Header.Get("Content-Type"))
		}
	}
	env.AssertUnchanged(t, before, "requests on another tenant's delegation")
	if got := env.Delegation(t, acme, d.ID); got.TaskStatus != "unknown" || got.CancelRequestedAt != nil {
		t.Fatalf("another tenant changed the delegation: %+v", got)
	}
	// Missing admin resources are 404 too.
	env.Do(t, http.MethodGet, "/admin/v1/budgets/nope", env.OncallToken, nil).Problem(t, http.StatusNotFound, "not_found")
	env.Do(t, http.MethodGet, "/admin/v1/orgs/nope", env.OncallToken, nil).Problem(t, http.StatusNotFound, "not_found")
	env.Do(t, http.MethodGet, "/admin/v1/task-classes/nope", env.OncallToken, nil).Problem(t, http.StatusNotFound, "not_found")
}

func withToken(req *http.Request, token string) *http.Request {
	req.Header.Set("Authorization", "Bearer "+token)
	return req
}

// TestTokensStoredAsHashes: the secret never reaches the database.
func TestTokensStoredAsHashes(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	secret := env.NewOrchestrator(t, "acme")
	n := countRows(t, env, `SELECT count(*) FROM api_tokens WHERE token_hash = $1`, access.HashToken(secret))
	if n != 1 {
		t.Fatalf("%d tokens with the secret's hash", n)
	}
	if n := countRows(t, env, `SELECT count(*) FROM api_tokens t WHERE position($1 in t::text) > 0`, secret); n != 0 {
		t.Fatal("the token secret is stored in clear")
	}
	if n := countRows(t, env, `SELECT count(*) FROM events e WHERE position($1 in e::text) > 0`, secret); n != 0 {
		t.Fatal("the token secret is in the audit log")
	}
}

// TestRevokedTokenStopsWithinCacheTTL revokes a token in the database,
// behind the service's back: although the service had it in its
// authentication cache, it is refused within a second, without the clock
// moving (the cache is emptied on every credential change the database
// notifies).
func TestRevokedTokenStopsWithinCacheTTL(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	orch := e.NewOrchestrator(t, "acme")
	e.Do(t, http.MethodGet, "/v1/delegations", orch, nil).Expect(t, http.StatusOK)
	if _, err := e.Pool.Exec(context.Background(),
		`UPDATE api_tokens SET revoked_at = $1 WHERE token_hash = $2`, e.Clock.Now(), access.HashToken(orch)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Second)
	for e.Do(t, http.MethodGet, "/v1/delegations", orch, nil).Status == http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("a revoked token still works a second later")
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.Do(t, http.MethodGet, "/v1/delegations", orch, nil).Problem(t, http.StatusUnauthorized, "unauthenticated")
}
