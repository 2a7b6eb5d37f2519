package main

// PostgreSQL faults under load: an immediate (crash) restart of the server,
// pg_terminate_backend of the service's connections, and a commit whose
// acknowledgement is lost on the way back. The service runs in-process
// (runService, as `quittance serve` wires it) and is driven through a real
// HTTP client; every answer is recorded, and afterwards the database must
// hold everything that was answered 2xx, nothing twice, and the invariants
// of ledger/DESIGN.md §2.2.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/access"
	"github.com/quittance/quittance/sql/pgstore"
	"github.com/quittance/quittance/sql/pgtest"
)

// Names every fault and crash test uses for its fixtures.
const (
	faultLedgerID = "ledger-faults"
	faultOrg      = "supplier"
	faultBudget   = "ops"
	faultTenant   = "buyers"
	faultFunded   = int64(1_000_000_000)
	faultAmount   = int64(1_000)
)

// testClient is a real HTTP client of a running service.
type testClient struct {
	base string
	hc   *http.Client
}

func newTestClient(base string) *testClient {
	// No connection reuse: a request never lands on a connection the
	// previous answer (or a crash) left in an unknown state.
	return &testClient{base: base, hc: &http.Client{
		Timeout:   15 * time.Second,
		Transport: &http.Transport{DisableKeepAlives: true},
	}}
}

// apiResult is one answer, or the transport error that replaced it.
type apiResult struct {
	status int
	header http.Header
	body   []byte
	err    error
}

func (r apiResult) ok() bool { return r.err == nil && r.status >= 200 && r.status < 300 }

// retryable: the request may or may not have been applied; the client must
// send it again, unchanged.
func (r apiResult) retryable() bool { return r.err != nil || r.status >= 500 }

// problemCode is the code of a problem+json answer, or "".
func problemCode(r apiResult) string {
	var p struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(r.body, &p)
	return p.Code
}

func (r apiResult) String() string {
	if r.err != nil {
		return "error: " + r.err.Error()
	}
	return fmt.Sprintf("%d %s", r.status, bytes.TrimSpace(r.body))
}

// do sends one request. body is JSON-encoded unless it is a string, which is
// sent verbatim as application/jose (a signed token).
func (c *testClient) do(ctx context.Context, method, path, token string, body any) apiResult {
	var (
		r  io.Reader
		ct string
	)
	switch b := body.(type) {
	case nil:
	case string:
		r, ct = strings.NewReader(b), "application/jose"
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			return apiResult{err: err}
		}
		r, ct = bytes.NewReader(raw), "application/json"
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, r)
	if err != nil {
		return apiResult{err: err}
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return apiResult{err: err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return apiResult{err: err}
	}
	return apiResult{status: resp.StatusCode, header: resp.Header, body: raw}
}

// must sends a request that has to succeed with one of the given statuses.
func (c *testClient) must(t testing.TB, method, path, token string, body any, out any, statuses ...int) {
	t.Helper()
	res := c.do(t.Context(), method, path, token, body)
	for _, s := range statuses {
		if res.err == nil && res.status == s {
			if out != nil {
				if err := json.Unmarshal(res.body, out); err != nil {
					t.Fatalf("%s %s: decode %s: %v", method, path, res.body, err)
				}
			}
			return
		}
	}
	t.Fatalf("%s %s: %v, want status %v", method, path, res, statuses)
}

// delegationView is the part of a delegation the tests look at.
type delegationView struct {
	ID                  string `json:"id"`
	BusinessOperationID string `json:"business_operation_id"`
	HoldState           string `json:"hold_state"`
	TaskStatus          string `json:"task_status"`
	ObligationState     string `json:"obligation_state"`
	Remote              struct {
		TaskID string `json:"task_id"`
	} `json:"remote"`
	Compensation *struct {
		IdempotencyKey string `json:"idempotency_key"`
	} `json:"compensation"`
}

// fixtures creates the two on-call principals with the bootstrap token,
// registers the org (with signer's keys, and optionally more fields; one
// on-call asks, the other approves), creates the orchestrator, funds the
// budget naming its tenant, and returns an orchestrator token and the
// on-call tokens.
func fixtures(t testing.TB, c *testClient, bootstrap string, signer *compensationtest.Signer, org map[string]any) (orch, oncall, oncall2 string) {
	t.Helper()
	oncall, oncall2 = twoOncall(t, c, bootstrap)
	body := map[string]any{"name": "Supplier", "shared_coordinator": false, "jwks": json.RawMessage(signer.JWKS())}
	for k, v := range org {
		body[k] = v
	}
	mustPrivileged(t, c, http.MethodPut, "/admin/v1/orgs/"+faultOrg, oncall, oncall2, body)
	var tok struct {
		Token string `json:"token"`
	}
	c.must(t, http.MethodPost, "/admin/v1/tokens", oncall,
		map[string]any{"role": "orchestrator", "tenant": faultTenant, "name": "orchestrator"}, &tok, http.StatusCreated)
	if tok.Token == "" {
		t.Fatal("token response without a token")
	}
	// The tenant's first orchestrator is made before a budget names the
	// tenant (then it is in use, and its orchestrators need a second
	// approver).
	mustPrivileged(t, c, http.MethodPut, "/admin/v1/budgets/"+faultBudget, oncall, oncall2,
		map[string]any{"currency": "EUR", "funded_minor": faultFunded, "tenants": []string{faultTenant}})
	return tok.Token, oncall, oncall2
}

// createBody is the request of a delegation recorded by the orchestrator
// (the remote task id is derived from the business operation id).
func createBody(op string) map[string]any {
	return map[string]any{
		"business_operation_id": op, "org_id": faultOrg, "task_class": "procurement", "budget_id": faultBudget,
		"hold":   map[string]any{"amount_minor": faultAmount, "currency": "EUR"},
		"remote": map[string]any{"task_id": "task-" + op, "context_id": "ctx-" + op},
	}
}

// signAck signs a compensation ack for d as the org.
func signAck(t testing.TB, signer *compensationtest.Signer, d delegationView) string {
	t.Helper()
	if d.Compensation == nil || d.Compensation.IdempotencyKey == "" {
		t.Fatalf("delegation %s (%s) has no compensation idempotency key", d.ID, d.ObligationState)
	}
	return signer.Sign(t, string(compensation.KindAck),
		compensationtest.AckClaims(faultOrg, faultLedgerID, d.Remote.TaskID, d.Compensation.IdempotencyKey, time.Now()))
}

// checkDatabase asserts ledger/DESIGN.md §2.2's invariants straight from the
// database (pgstore.CheckInvariants: conservation per budget, held = sum of
// active holds, one hold entry per delegation, allowed transition paths,
// every event stream's hash chain through ledger.VerifyChain).
func checkDatabase(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	rep, err := pgstore.CheckInvariants(t.Context(), pool)
	for _, v := range rep.Violations {
		t.Error("invariant violated: " + v)
	}
	if err != nil {
		t.Errorf("check invariants: %v", err)
	}
}

// holdsOf returns how many delegations the tenant has for op and how many
// hold entries the budget journal has for them.
func holdsOf(t testing.TB, pool *pgxpool.Pool, op string) (delegations, holds int) {
	t.Helper()
	err := pool.QueryRow(t.Context(), `
		SELECT (SELECT count(*) FROM delegations WHERE tenant = $1 AND business_operation_id = $2),
		       (SELECT count(*) FROM budget_entries j JOIN delegations d ON d.id = j.delegation_id
		         WHERE d.tenant = $1 AND d.business_operation_id = $2 AND j.kind = 'hold')`,
		faultTenant, op).Scan(&delegations, &holds)
	if err != nil {
		t.Fatalf("count holds of %s: %v", op, err)
	}
	return delegations, holds
}

// checkEventsOverAPI re-verifies a delegation's hash chain as a client
// would: from GET /v1/delegations/{id}/events, with ledger.VerifyChain.
func checkEventsOverAPI(t testing.TB, c *testClient, token, id string) []ledger.EventRecord {
	t.Helper()
	var out struct {
		Events []ledger.EventRecord `json:"events"`
	}
	c.must(t, http.MethodGet, "/v1/delegations/"+id+"/events", token, nil, &out, http.StatusOK)
	if err := ledger.VerifyChain(apitest.LedgerEvents(t, out.Events)); err != nil {
		t.Errorf("event chain of %s: %v", id, err)
	}
	return out.Events
}

// testPool opens a pool on dbURL for the test's own checks.
func testPool(t testing.TB, dbURL string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), dbURL)
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// inProcessService runs the service (run serve, as main does) on dbURL,
// with extraEnv's KEY=VALUE settings added, until the test ends, and
// returns its base URL. Its log goes to a file
// whose end is shown if the test fails.
func inProcessService(t *testing.T, dbURL, oncall string, extraEnv ...string) string {
	t.Helper()
	env := map[string]string{
		"DATABASE_URL": dbURL, "QUITTANCE_ADDR": "127.0.0.1:0", "QUITTANCE_BOOTSTRAP_TOKEN": oncall,
		"QUITTANCE_LEDGER_ID": faultLedgerID, "QUITTANCE_LOG_LEVEL": "warn", "QUITTANCE_RATE_LIMIT_RPS": "0",
		"QUITTANCE_SHUTDOWN_TIMEOUT": "10s", "QUITTANCE_SIGNING_KEY_FILE": signingKeyFile(t),
	}
	for _, kv := range extraEnv {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	logPath := filepath.Join(t.TempDir(), "service.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve"}, func(k string) string { return env[k] }, pw, logFile)
		pw.Close()
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		logFile.Close()
		if t.Failed() {
			showLog(t, "in-process service", logPath)
		}
	})
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "Quittance listening on "); ok {
				urls <- strings.Fields(rest)[0]
			}
		}
	}()
	select {
	case u := <-urls:
		return u
	case err := <-done:
		t.Fatalf("serve stopped: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the service did not start")
	}
	return ""
}

// showLog writes the last lines of a log file to the test log.
func showLog(t testing.TB, what, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 60 {
		lines = lines[len(lines)-60:]
	}
	t.Logf("last lines of the %s log:\n%s", what, strings.Join(lines, "\n"))
}

// step is how far a delegation's lifecycle got, as confirmed by a 2xx.
type step int

const (
	stepNone step = iota
	stepCreated
	stepWorking
	stepCanceled
	stepCompleted
	stepAcked
)

// opRecord is what the clients were told about one business operation.
type opRecord struct {
	id        string // from the 2xx creation
	confirmed step   // the furthest step answered 2xx
	retries   int    // requests sent again after an error or a 5xx
	canceled  bool   // the lifecycle cancels (and acks) rather than completes
	// at is when each step was answered 2xx.
	at [stepAcked + 1]time.Time
}

// load drives concurrent lifecycles (create → working → canceled → signed
// ack, or create → working → completed) against a service, retrying every
// request unchanged after a transport error or a 5xx, and records every
// 2xx.
type load struct {
	t      testing.TB // only to sign tokens
	api    *testClient
	orch   string
	signer *compensationtest.Signer
	prefix string

	mu       sync.Mutex
	ops      map[string]*opRecord
	problems []string
	refusals []apiResult  // every transport error and 5xx, in order
	oks      []okAnswer   // when each request answered 2xx was sent and answered
	lastOK   atomic.Int64 // unix nanos of the latest 2xx
	okCount  atomic.Int64
	errCount atomic.Int64
}

func newLoad(t testing.TB, api *testClient, orch string, signer *compensationtest.Signer, prefix string) *load {
	return &load{t: t, api: api, orch: orch, signer: signer, prefix: prefix, ops: map[string]*opRecord{}}
}

func (l *load) problem(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.problems = append(l.problems, fmt.Sprintf(format, args...))
}

// send sends one request until it is answered with something other than a
// transport error or a 5xx (each attempt identical: same business
// operation id, same status, the same signed token). It returns the answer,
// or false when it never got one within a minute or got a 4xx.
func (l *load) send(rec *opRecord, what, method, path string, body any) (apiResult, bool) {
	deadline := time.Now().Add(time.Minute)
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		sent := time.Now()
		res := l.api.do(ctx, method, path, l.orch, body)
		cancel()
		if res.ok() {
			l.okCount.Add(1)
			l.lastOK.Store(time.Now().UnixNano())
			l.mu.Lock()
			rec.retries += attempt
			l.oks = append(l.oks, okAnswer{sent: sent, answered: time.Now()})
			l.mu.Unlock()
			return res, true
		}
		if !res.retryable() {
			l.problem("%s: %v (a 4xx after %d retries)", what, res, attempt)
			return res, false
		}
		l.errCount.Add(1)
		l.mu.Lock()
		l.refusals = append(l.refusals, res)
		l.mu.Unlock()
		if time.Now().After(deadline) {
			l.problem("%s: no answer within a minute; last: %v", what, res)
			return res, false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// lifecycle runs one delegation's lifecycle to its end.
func (l *load) lifecycle(op string, cancel bool) {
	rec := &opRecord{canceled: cancel}
	l.mu.Lock()
	l.ops[op] = rec
	l.mu.Unlock()
	confirm := func(s step) {
		l.mu.Lock()
		rec.confirmed = s
		rec.at[s] = time.Now()
		l.mu.Unlock()
	}
	res, ok := l.send(rec, op+" create", http.MethodPost, "/v1/delegations", createBody(op))
	if !ok {
		return
	}
	var d delegationView
	if err := json.Unmarshal(res.body, &d); err != nil || d.ID == "" {
		l.problem("%s create: undecodable answer %s", op, res.body)
		return
	}
	l.mu.Lock()
	rec.id = d.ID
	l.mu.Unlock()
	confirm(stepCreated)
	status := func(state string, s step) bool {
		res, ok := l.send(rec, op+" "+state, http.MethodPost, "/v1/delegations/"+d.ID+"/task-status", map[string]any{"state": state})
		if ok {
			if err := json.Unmarshal(res.body, &d); err != nil {
				l.problem("%s %s: undecodable answer %s", op, state, res.body)
				return false
			}
			confirm(s)
		}
		return ok
	}
	if !status("TASK_STATE_WORKING", stepWorking) {
		return
	}
	if !cancel {
		status("TASK_STATE_COMPLETED", stepCompleted)
		return
	}
	if !status("TASK_STATE_CANCELED", stepCanceled) {
		return
	}
	if d.Compensation == nil {
		l.problem("%s: canceled without a compensation key: %s", op, d.ObligationState)
		return
	}
	token := l.signer.Sign(l.t, string(compensation.KindAck),
		compensationtest.AckClaims(faultOrg, faultLedgerID, d.Remote.TaskID, d.Compensation.IdempotencyKey, time.Now()))
	res, ok = l.send(rec, op+" ack", http.MethodPost, "/v1/compensation/acks", token)
	if !ok {
		return
	}
	if outcome := res.header.Get("Quittance-Evidence-Outcome"); outcome != "applied" && outcome != "duplicate" {
		l.problem("%s ack: outcome %q", op, outcome)
	}
	confirm(stepAcked)
}

// okAnswer is when a request answered 2xx was sent, and when answered.
type okAnswer struct{ sent, answered time.Time }

// run starts workers that run lifecycles until stop is closed; the
// returned function waits for them (each finishes its current lifecycle).
func (l *load) run(workers int, stop <-chan struct{}) (wait func()) {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				l.lifecycle(fmt.Sprintf("%s-w%d-%d", l.prefix, w, i), i%3 != 0)
			}
		})
	}
	return wg.Wait
}

// waitRecovered waits until a request sent after the fault was answered 2xx
// and /readyz answers 200, and fails the test if that takes longer than
// within from the call: callers make it once the database is back, so the
// time PostgreSQL itself needs for crash recovery on a loaded machine does
// not count against the service.
func (l *load) waitRecovered(t *testing.T, fault time.Time, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Unix(0, l.lastOK.Load()).Before(fault.Add(100 * time.Millisecond)) {
		if time.Now().After(deadline) {
			t.Fatalf("no request succeeded within %s of the database coming back", within)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for {
		res := l.api.do(t.Context(), http.MethodGet, "/readyz", "", nil)
		if res.err == nil && res.status == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz did not recover within %s of the database coming back: %v", within, res)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("recovered %s after the fault", time.Since(fault).Round(time.Millisecond))
}

// check asserts that every 2xx the clients saw is in the database, that no
// business operation has more than one delegation or hold, that each
// delegation is at least as far as its last 2xx said (a request that failed
// may still have committed: never less), and the invariants.
func (l *load) check(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.problems {
		t.Error(p)
	}
	type row struct {
		id         string
		task, obl  string
		holds, out int
	}
	rows, err := pool.Query(t.Context(), `
		SELECT d.business_operation_id, d.id::text, d.task_status, d.obligation_state,
		       count(*) FILTER (WHERE j.kind = 'hold'), count(*) FILTER (WHERE j.kind <> 'hold')
		FROM delegations d LEFT JOIN budget_entries j ON j.delegation_id = d.id
		WHERE d.tenant = $1 AND d.business_operation_id LIKE $2
		GROUP BY d.id`, faultTenant, l.prefix+"-%")
	if err != nil {
		t.Fatalf("read delegations: %v", err)
	}
	inDB := map[string]row{}
	for rows.Next() {
		var (
			op string
			r  row
		)
		if err := rows.Scan(&op, &r.id, &r.task, &r.obl, &r.holds, &r.out); err != nil {
			t.Fatal(err)
		}
		if _, dup := inDB[op]; dup {
			t.Errorf("operation %s has two delegations", op)
		}
		inDB[op] = r
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	retried, byStep := 0, map[step]int{}
	for op, rec := range l.ops {
		retried += rec.retries
		byStep[rec.confirmed]++
		if rec.confirmed == stepNone {
			continue // never answered 2xx: it may or may not exist, once
		}
		r, ok := inDB[op]
		switch {
		case !ok:
			t.Errorf("%s was answered 2xx (up to step %d) but is not in the database", op, rec.confirmed)
			continue
		case r.id != rec.id:
			t.Errorf("%s: the database has delegation %s, the client was given %s", op, r.id, rec.id)
		case r.holds != 1:
			t.Errorf("%s: %d hold entries", op, r.holds)
		}
		allowed := map[step][]string{
			stepCreated:   {"held", "settled", "revocation_pending_compensation", "compensated"},
			stepWorking:   {"held", "settled", "revocation_pending_compensation", "compensated"},
			stepCompleted: {"settled"},
			stepCanceled:  {"revocation_pending_compensation", "compensated"},
			stepAcked:     {"compensated"},
		}[rec.confirmed]
		if !containsString(allowed, r.obl) {
			t.Errorf("%s: obligation %s, but the clients were told step %d (want one of %v)", op, r.obl, rec.confirmed, allowed)
		}
	}
	t.Logf("%d operations (%d fully done), %d answers 2xx, %d errors or 5xx retried", len(l.ops),
		byStep[stepAcked]+byStep[stepCompleted], l.okCount.Load(), retried)
	if l.okCount.Load() == 0 {
		t.Error("no request succeeded at all")
	}
	checkDatabase(t, pool)
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// faultSetup runs the service on dbURL (with DATABASE_URL serviceURL, when
// it differs: through a proxy) and registers the fixtures.
type faultSetup struct {
	api    *testClient
	orch   string
	signer *compensationtest.Signer
	pool   *pgxpool.Pool
}

func newFaultSetup(t *testing.T, dbURL, serviceURL string) *faultSetup {
	t.Helper()
	oncall := access.NewTokenSecret()
	api := newTestClient(inProcessService(t, serviceURL, oncall))
	signer := compensationtest.NewEd25519Signer(t, "supplier-key-1")
	orch, _, _ := fixtures(t, api, oncall, signer, nil)
	return &faultSetup{api: api, orch: orch, signer: signer, pool: testPool(t, dbURL)}
}

// TestPostgresImmediateRestartUnderLoad crashes PostgreSQL (pg_ctl restart
// -m immediate: no checkpoint, crash recovery on start) while clients
// create, report and ack delegations. The service recovers on its own, and
// nothing answered 2xx is lost or applied twice.
func TestPostgresImmediateRestartUnderLoad(t *testing.T) {
	t.Parallel()
	cluster, dbURL := pgtest.Cluster(t)
	s := newFaultSetup(t, dbURL, dbURL)
	l := newLoad(t, s.api, s.orch, s.signer, "restart")
	stop := make(chan struct{})
	wait := l.run(6, stop)
	time.Sleep(time.Second)

	fault := time.Now()
	if err := cluster.Restart(t.Context(), "immediate"); err != nil {
		close(stop)
		wait()
		t.Fatalf("restart PostgreSQL: %v", err)
	}
	l.waitRecovered(t, fault, 20*time.Second)
	time.Sleep(time.Second)
	close(stop)
	wait()
	if l.errCount.Load() == 0 {
		t.Error("no request failed: the restart did not hit the load")
	}
	l.check(t, s.pool)
}

// TestPostgresTerminatedBackendsUnderLoad kills every connection the service
// has to its database, three times, while clients work.
func TestPostgresTerminatedBackendsUnderLoad(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t)
	s := newFaultSetup(t, dbURL, dbURL)
	conn, err := pgx.Connect(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	l := newLoad(t, s.api, s.orch, s.signer, "terminate")
	stop := make(chan struct{})
	wait := l.run(6, stop)
	time.Sleep(500 * time.Millisecond)

	var fault time.Time
	killed := 0
	for range 3 {
		fault = time.Now()
		// The test's own check pool is idle and may lose connections too;
		// it reconnects.
		rows, err := conn.Query(t.Context(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()`)
		if err != nil {
			t.Fatalf("terminate backends: %v", err)
		}
		for rows.Next() {
			killed++
		}
		rows.Close()
		time.Sleep(400 * time.Millisecond)
	}
	if killed == 0 {
		t.Fatal("no backend was terminated")
	}
	l.waitRecovered(t, fault, 10*time.Second)
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wait()
	t.Logf("%d backends terminated", killed)
	l.check(t, s.pool)
}

// TestPostgresLostCommitAcknowledgement cuts the connection between the
// service and PostgreSQL right after a COMMIT went through, so the
// transaction commits but the service never hears so and answers an error.
// The client's retry — same business operation id, or the same signed
// token — is reconciled against what was committed: the committed
// delegation (200, one hold), the committed ack (duplicate, one release).
// Other clients keep working through the same proxy meanwhile.
func TestPostgresLostCommitAcknowledgement(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t)
	proxy := startCommitCutter(t, dbURL)
	s := newFaultSetup(t, dbURL, proxy.url)

	l := newLoad(t, s.api, s.orch, s.signer, "background")
	stop := make(chan struct{})
	wait := l.run(3, stop)
	defer func() {
		close(stop)
		wait()
		l.check(t, s.pool)
	}()

	// A creation whose commit is acknowledged to nobody.
	const op = "lost-commit-create"
	proxy.arm([]byte(op))
	res := s.api.do(t.Context(), http.MethodPost, "/v1/delegations", s.orch, createBody(op))
	if res.ok() {
		t.Fatalf("create through the cut connection answered %v", res)
	}
	if res.status != http.StatusInternalServerError || problemCode(res) != "outcome_unknown" {
		// Not 503, which says nothing was applied: the outcome is unknown.
		t.Fatalf("create whose commit acknowledgement was lost answered %v, want 500 outcome_unknown", res)
	}
	if proxy.cuts.Load() != 1 {
		t.Fatalf("the proxy cut %d commits, want 1 (answer: %v)", proxy.cuts.Load(), res)
	}
	if n, holds := holdsOf(t, s.pool, op); n != 1 || holds != 1 {
		t.Fatalf("after the lost acknowledgement: %d delegations, %d holds; want the commit to have happened (1, 1)", n, holds)
	}
	var d delegationView
	s.api.must(t, http.MethodPost, "/v1/delegations", s.orch, createBody(op), &d, http.StatusOK)
	if d.BusinessOperationID != op || d.ObligationState != "held" {
		t.Fatalf("retry answered %+v", d)
	}
	if n, holds := holdsOf(t, s.pool, op); n != 1 || holds != 1 {
		t.Fatalf("after the retry: %d delegations, %d holds; want 1, 1", n, holds)
	}

	// An ack whose commit is acknowledged to nobody.
	s.api.must(t, http.MethodPost, "/v1/delegations/"+d.ID+"/task-status", s.orch, map[string]any{"state": "TASK_STATE_CANCELED"}, &d, http.StatusOK)
	ack := signAck(t, s.signer, d)
	proxy.arm([]byte(ack[len(ack)-40:])) // the token is bound (as the event's evidence) in the ack's transaction
	res = s.api.do(t.Context(), http.MethodPost, "/v1/compensation/acks", "", ack)
	if res.ok() || problemCode(res) != "outcome_unknown" || proxy.cuts.Load() != 2 {
		t.Fatalf("ack through the cut connection answered %v after %d cuts", res, proxy.cuts.Load())
	}
	var state string
	if err := s.pool.QueryRow(t.Context(), `SELECT obligation_state FROM delegations WHERE id = $1`, d.ID).Scan(&state); err != nil || state != "compensated" {
		t.Fatalf("after the lost acknowledgement the obligation is %q (%v); want the commit to have happened", state, err)
	}
	res = s.api.do(t.Context(), http.MethodPost, "/v1/compensation/acks", "", ack)
	if !res.ok() || res.header.Get("Quittance-Evidence-Outcome") != "duplicate" {
		t.Fatalf("ack retry answered %v (outcome %q), want 200 duplicate", res, res.header.Get("Quittance-Evidence-Outcome"))
	}
	var returns int
	if err := s.pool.QueryRow(t.Context(), `SELECT count(*) FROM budget_entries WHERE delegation_id = $1 AND kind = 'return'`, d.ID).Scan(&returns); err != nil || returns != 1 {
		t.Fatalf("%d return entries (%v), want 1", returns, err)
	}
	checkEventsOverAPI(t, s.api, s.orch, d.ID)
	time.Sleep(300 * time.Millisecond) // let the background load run past the cuts
}

// commitCutter is a TCP proxy between the service and PostgreSQL. It
// forwards everything; when armed with a marker, it watches the client's
// messages of each transaction, and once a transaction that carried the
// marker (in a simple query, a Parse or a Bind's parameters) sends COMMIT,
// it forwards the COMMIT, waits for the server's answer — so the
// transaction has committed — drops that answer and closes both sides.
// Each arming cuts one commit.
type commitCutter struct {
	url    string
	target string
	marker atomic.Pointer[[]byte]
	cuts   atomic.Int64
}

func startCommitCutter(t *testing.T, dbURL string) *commitCutter {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("parse %s: %v", dbURL, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &commitCutter{target: u.Host}
	proxied := *u
	proxied.Host = ln.Addr().String()
	q := proxied.Query()
	q.Set("sslmode", "disable") // the proxy reads the protocol in clear
	proxied.RawQuery = q.Encode()
	p.url = proxied.String()
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { p.serve(c) })
		}
	})
	return p
}

// arm makes the proxy cut the next commit of a transaction whose client
// messages contain marker.
func (p *commitCutter) arm(marker []byte) { p.marker.Store(&marker) }

func (p *commitCutter) serve(client net.Conn) {
	defer client.Close()
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer server.Close()
	var cut atomic.Bool
	done := make(chan struct{})
	go func() {
		// Server → client, verbatim until the cut; then the first answer
		// (to the COMMIT) is read and dropped, and both sides are closed.
		defer close(done)
		buf := make([]byte, 32<<10)
		for {
			n, err := server.Read(buf)
			if cut.Load() {
				client.Close()
				server.Close()
				return
			}
			if n > 0 {
				if _, werr := client.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				client.Close()
				return
			}
		}
	}()
	p.clientToServer(client, server, &cut)
	server.(*net.TCPConn).CloseWrite()
	<-done
}

// clientToServer forwards the client's messages one by one, reading the
// protocol's framing: untyped startup packets first (SSLRequest and
// GSSENCRequest are followed by another), then type byte + int32 length.
func (p *commitCutter) clientToServer(client, server net.Conn, cut *atomic.Bool) {
	r := bufio.NewReader(client)
	startup := true
	marked, commitPending := false, false
	commits := map[string]bool{} // prepared statements that are a COMMIT
	for {
		var header []byte
		if startup {
			header = make([]byte, 4)
		} else {
			header = make([]byte, 5)
		}
		if _, err := io.ReadFull(r, header); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint32(header[len(header)-4:])) - 4
		if n < 0 || n > 64<<20 {
			return
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(r, body); err != nil {
			return
		}
		cutNow := false
		marker := p.marker.Load()
		if startup {
			code := uint32(0)
			if len(body) >= 4 {
				code = binary.BigEndian.Uint32(body[:4])
			}
			startup = code == 80877103 || code == 80877104 // SSLRequest, GSSENCRequest: another packet follows
		} else {
			switch header[0] {
			case 'Q': // simple query: pgx sends BEGIN, COMMIT and ROLLBACK this way
				switch sql := normalizeSQL(body); sql {
				case "begin", "rollback":
					marked = false
				case "commit":
					cutNow = marked && marker != nil
					marked = false
				default:
					marked = marked || (marker != nil && bytes.Contains(body, *marker))
				}
			case 'P': // Parse: a COMMIT prepared by the extended protocol
				if marker != nil && bytes.Contains(body, *marker) {
					marked = true
				}
				if name, query, ok := bytes.Cut(body, []byte{0}); ok && normalizeSQL(query) == "commit" {
					if len(name) > 0 {
						// A named statement runs when bound (pgx caches it
						// and binds it again in later batches).
						commits[string(name)] = true
					} else {
						commitPending = true
					}
				}
			case 'B': // Bind: the parameters of a statement
				if marker != nil && bytes.Contains(body, *marker) {
					marked = true
				}
				// portal name, then the statement's name
				if _, rest, ok := bytes.Cut(body, []byte{0}); ok {
					if name, _, ok := bytes.Cut(rest, []byte{0}); ok && commits[string(name)] {
						commitPending = true
					}
				}
			case 'S': // Sync: runs what was parsed, bound and executed
				if commitPending {
					cutNow = marked && marker != nil
					marked, commitPending = false, false
				}
			}
		}
		if cutNow && p.marker.CompareAndSwap(marker, nil) {
			cut.Store(true)
			p.cuts.Add(1)
			// The server answers the COMMIT at once; never wait forever.
			_ = server.SetReadDeadline(time.Now().Add(10 * time.Second))
		} else {
			cutNow = false
		}
		if _, err := server.Write(append(header, body...)); err != nil {
			return
		}
		if cutNow {
			// Drain the client until the server side closes it.
			_, _ = io.Copy(io.Discard, r)
			return
		}
	}
}

// normalizeSQL returns a query's text lower-cased, without surrounding
// space, trailing semicolons or the NUL that ends it on the wire.
func normalizeSQL(b []byte) string {
	s := string(bytes.TrimRight(b, "\x00"))
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	return strings.ToLower(strings.TrimRight(strings.TrimSpace(s), "; \n\t"))
}
