// Package apitest runs Quittance's HTTP API in tests: an httptest.Server
// wired to the real ledger service on a fresh, migrated PostgreSQL database
// (from sql/pgtest), a settable clock, and helpers to make tokens, budgets,
// orgs and task classes and to do JSON requests through a real HTTP client.
//
// It also checks the ledger's invariants straight from the database
// (CheckInvariants) and takes snapshots of everything written
// (Snapshot), so a test can assert that a refused request wrote nothing.
//
// It is for tests only and must never be imported by non-test code.
package apitest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/pgstore"
	"github.com/quittance/quittance/sql/pgtest"
)

// Epoch is the fake clock's time when an Env starts.
var Epoch = time.Date(2026, time.March, 2, 9, 0, 0, 0, time.UTC)

// Clock is a settable ledger.Clock, safe for concurrent use. It does not
// move unless a test moves it.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock stopped at t.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

// Now implements ledger.Clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set stops the clock at t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// Advance moves the clock forward by d and returns the new time.
func (c *Clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// Env is a running API on its own database.
type Env struct {
	// Server is the API's test server; URL is its base URL.
	Server *httptest.Server
	URL    string
	// Client is a real HTTP client for Server.
	Client *http.Client
	// Pool is the test database; Store and Ledger are the store and
	// service the API runs on.
	Pool   *pgxpool.Pool
	Store  *pgstore.Store
	Ledger *ledger.Service
	// Clock is the service's clock.
	Clock *Clock
	// OncallToken is the bearer token of an on-call (admin) principal.
	OncallToken string
}

// New starts an API on a fresh migrated database. Everything is torn down
// when t ends.
func New(t testing.TB) *Env {
	t.Helper()
	pool := pgtest.Pool(t)
	store := pgstore.New(pool)
	clock := NewClock(Epoch)
	svc := ledger.NewService(ledger.Config{Store: store, Clock: clock})
	api := httpapi.New(httpapi.Config{Ledger: svc, Ready: store.Ping, Version: "test"})
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	e := &Env{
		Server: srv, URL: srv.URL, Client: srv.Client(),
		Pool: pool, Store: store, Ledger: svc, Clock: clock,
		OncallToken: ledger.NewTokenSecret(),
	}
	e.Client.Timeout = 30 * time.Second
	if _, err := svc.EnsureToken(context.Background(), ledger.TokenInput{Role: ledger.RoleOncall, Name: "oncall"}, e.OncallToken); err != nil {
		t.Fatalf("apitest: create on-call token: %v", err)
	}
	return e
}

// Response is an HTTP response with its body read.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
	// Request names the request, for failure messages.
	Request string
}

// Do sends a request with the given bearer token ("" for none) and body,
// and reads the response. body may be nil (no body), a string or []byte
// (sent verbatim), or any value (sent as JSON).
func (e *Env) Do(t testing.TB, method, path, token string, body any) *Response {
	t.Helper()
	var (
		r  io.Reader
		ct string
	)
	switch b := body.(type) {
	case nil:
	case string:
		r, ct = strings.NewReader(b), "application/json"
	case []byte:
		r, ct = bytes.NewReader(b), "application/json"
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatalf("apitest: encode body of %s %s: %v", method, path, err)
		}
		r, ct = bytes.NewReader(raw), "application/json"
	}
	req, err := http.NewRequest(method, e.URL+path, r)
	if err != nil {
		t.Fatalf("apitest: %s %s: %v", method, path, err)
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return e.Send(t, req)
}

// Send sends a prepared request (for unusual headers) and reads the response.
func (e *Env) Send(t testing.TB, req *http.Request) *Response {
	t.Helper()
	resp, err := e.Client.Do(req)
	if err != nil {
		t.Fatalf("apitest: %s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("apitest: read response of %s %s: %v", req.Method, req.URL.Path, err)
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: raw, Request: req.Method + " " + req.URL.RequestURI()}
}

// Expect fails the test unless the response has the given status.
func (r *Response) Expect(t testing.TB, status int) *Response {
	t.Helper()
	if r.Status != status {
		t.Fatalf("%s: status %d, want %d; body: %s", r.Request, r.Status, status, r.Body)
	}
	return r
}

// JSON decodes the body into v.
func (r *Response) JSON(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("%s: decode body %s: %v", r.Request, r.Body, err)
	}
}

// Problem is an RFC 9457 problem as the API sends it.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Code   string `json:"code"`
	Detail string `json:"detail"`
	Errors []struct {
		Location string `json:"location"`
		Message  string `json:"message"`
	} `json:"errors"`
}

// Problem checks that the response is a problem+json with the given status
// and code (any code when code is ""), and returns it.
func (r *Response) Problem(t testing.TB, status int, code string) Problem {
	t.Helper()
	if r.Status != status {
		t.Fatalf("%s: status %d, want %d; body: %s", r.Request, r.Status, status, r.Body)
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		t.Fatalf("%s: Content-Type %q, want application/problem+json; body: %s", r.Request, ct, r.Body)
	}
	var p Problem
	r.JSON(t, &p)
	if p.Code == "" {
		t.Fatalf("%s: problem has no code: %s", r.Request, r.Body)
	}
	if p.Status != status {
		t.Fatalf("%s: problem status member %d, want %d", r.Request, p.Status, status)
	}
	if code != "" && p.Code != code {
		t.Fatalf("%s: problem code %q, want %q; body: %s", r.Request, p.Code, code, r.Body)
	}
	return p
}

// NewToken issues a token through the admin API and returns its secret.
func (e *Env) NewToken(t testing.TB, role ledger.Role, tenant, name string) string {
	t.Helper()
	var out struct {
		Token string `json:"token"`
	}
	e.Do(t, http.MethodPost, "/admin/v1/tokens", e.OncallToken, map[string]any{
		"role": string(role), "tenant": tenant, "name": name,
	}).Expect(t, http.StatusCreated).JSON(t, &out)
	if out.Token == "" {
		t.Fatal("apitest: token response without a token")
	}
	return out.Token
}

// NewOrchestrator issues an orchestrator token for tenant.
func (e *Env) NewOrchestrator(t testing.TB, tenant string) string {
	t.Helper()
	return e.NewToken(t, ledger.RoleOrchestrator, tenant, "orchestrator-"+tenant)
}

// PutBudget creates a budget or changes its funding through the admin API.
func (e *Env) PutBudget(t testing.TB, id, currency string, funded int64) httpapi.BudgetBody {
	t.Helper()
	r := e.Do(t, http.MethodPut, "/admin/v1/budgets/"+id, e.OncallToken, map[string]any{"currency": currency, "funded_minor": funded})
	if r.Status != http.StatusCreated && r.Status != http.StatusOK {
		t.Fatalf("%s: status %d: %s", r.Request, r.Status, r.Body)
	}
	var b httpapi.BudgetBody
	r.JSON(t, &b)
	return b
}

// Budget reads a budget through the admin API.
func (e *Env) Budget(t testing.TB, id string) httpapi.BudgetBody {
	t.Helper()
	var b httpapi.BudgetBody
	e.Do(t, http.MethodGet, "/admin/v1/budgets/"+id, e.OncallToken, nil).Expect(t, http.StatusOK).JSON(t, &b)
	return b
}

// PutOrg registers a remote org through the admin API.
func (e *Env) PutOrg(t testing.TB, id string, sharedCoordinator bool) httpapi.OrgBody {
	t.Helper()
	r := e.Do(t, http.MethodPut, "/admin/v1/orgs/"+id, e.OncallToken, map[string]any{"name": "Org " + id, "shared_coordinator": sharedCoordinator})
	if r.Status != http.StatusCreated && r.Status != http.StatusOK {
		t.Fatalf("%s: status %d: %s", r.Request, r.Status, r.Body)
	}
	var o httpapi.OrgBody
	r.JSON(t, &o)
	return o
}

// PutTaskClass registers a task class through the admin API.
func (e *Env) PutTaskClass(t testing.TB, name string, effectCapable bool, gateOn []string, timeout time.Duration) httpapi.TaskClassBody {
	t.Helper()
	if gateOn == nil {
		gateOn = []string{}
	}
	var c httpapi.TaskClassBody
	e.Do(t, http.MethodPut, "/admin/v1/task-classes/"+name, e.OncallToken, map[string]any{
		"effect_capable": effectCapable, "gate_on": gateOn, "compensation_timeout": timeout.String(),
	}).Expect(t, http.StatusOK).JSON(t, &c)
	return c
}

// CreateRequest is the body of POST /v1/delegations.
type CreateRequest struct {
	BusinessOperationID string `json:"business_operation_id"`
	OrgID               string `json:"org_id"`
	TaskClass           string `json:"task_class"`
	BudgetID            string `json:"budget_id"`
	Hold                struct {
		AmountMinor int64  `json:"amount_minor"`
		Currency    string `json:"currency"`
	} `json:"hold"`
	Remote struct {
		TaskID    string `json:"task_id"`
		ContextID string `json:"context_id,omitempty"`
	} `json:"remote"`
}

// NewCreateRequest builds a delegation request; the remote task id is
// derived from the operation id.
func NewCreateRequest(op, org, class, budget string, amount int64, currency string) CreateRequest {
	var c CreateRequest
	c.BusinessOperationID, c.OrgID, c.TaskClass, c.BudgetID = op, org, class, budget
	c.Hold.AmountMinor, c.Hold.Currency = amount, currency
	c.Remote.TaskID, c.Remote.ContextID = "task-"+op, "ctx-"+op
	return c
}

// CreateDelegation posts req with token, expects 201, and returns the delegation.
func (e *Env) CreateDelegation(t testing.TB, token string, req CreateRequest) httpapi.DelegationBody {
	t.Helper()
	var d httpapi.DelegationBody
	e.Do(t, http.MethodPost, "/v1/delegations", token, req).Expect(t, http.StatusCreated).JSON(t, &d)
	return d
}

// ReportStatus posts a task status (with a timestamp unless at is zero),
// expects 200, and returns the delegation.
func (e *Env) ReportStatus(t testing.TB, token, id, state string, at time.Time) httpapi.DelegationBody {
	t.Helper()
	body := map[string]any{"state": state}
	if !at.IsZero() {
		body["timestamp"] = at.Format(time.RFC3339Nano)
	}
	var d httpapi.DelegationBody
	e.Do(t, http.MethodPost, "/v1/delegations/"+id+"/task-status", token, body).Expect(t, http.StatusOK).JSON(t, &d)
	return d
}

// Delegation reads a delegation with token, expecting 200.
func (e *Env) Delegation(t testing.TB, token, id string) httpapi.DelegationBody {
	t.Helper()
	var d httpapi.DelegationBody
	e.Do(t, http.MethodGet, "/v1/delegations/"+id, token, nil).Expect(t, http.StatusOK).JSON(t, &d)
	return d
}

// Event is an audit event as the API shows it, with its data kept raw.
type Event struct {
	Seq            int64           `json:"seq"`
	StreamSeq      int32           `json:"stream_seq"`
	Type           string          `json:"type"`
	At             time.Time       `json:"at"`
	Actor          string          `json:"actor"`
	ObligationFrom string          `json:"obligation_from"`
	ObligationTo   string          `json:"obligation_to"`
	Data           json.RawMessage `json:"data"`
	Evidence       string          `json:"evidence"`
	Hash           string          `json:"hash"`
	PrevHash       string          `json:"prev_hash"`
}

// Events lists a delegation's events through the API, expecting 200.
func (e *Env) Events(t testing.TB, token, id string) []Event {
	t.Helper()
	var out struct {
		Events []Event `json:"events"`
	}
	e.Do(t, http.MethodGet, "/v1/delegations/"+id+"/events", token, nil).Expect(t, http.StatusOK).JSON(t, &out)
	return out.Events
}
