//go:build linux

package main

// Crash tests: the real binary, built with the failpoints tag, runs as
// `quittance serve` in a subprocess and SIGKILLs itself at a named point
// (ledger/failpoint). The test sees it die and the client's request fail,
// starts the binary again without the failpoint on the same database,
// retries the request unchanged (same business operation id, same signed
// token, same sweep), and checks that exactly one hold exists, the final
// state is right, every event chain verifies and budgets are conserved.

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quittance/quittance/cmd/quittance/internal/demoagent"
	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/ledger/access"
	"github.com/quittance/quittance/ledger/failpoint"
	"github.com/quittance/quittance/sql/pgtest"
)

var (
	failpointBuild    sync.Once
	failpointBin      string
	failpointBuildErr error
)

// failpointBinary builds this command with the failpoints tag, once per test
// binary, into the user's cache directory (keyed by the source directory,
// replaced atomically), and returns its path.
func failpointBinary(t *testing.T) string {
	t.Helper()
	failpointBuild.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			failpointBuildErr = fmt.Errorf("the go command is needed to build the binary: %w", err)
			return
		}
		wd, err := os.Getwd()
		if err != nil {
			failpointBuildErr = err
			return
		}
		cache, err := os.UserCacheDir()
		if err != nil {
			cache = os.TempDir()
		}
		sum := sha256.Sum256([]byte(wd))
		dir := filepath.Join(cache, "quittance", "failpoints-"+hex.EncodeToString(sum[:8]))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			failpointBuildErr = err
			return
		}
		tmp, err := os.CreateTemp(dir, "quittance-*.tmp")
		if err != nil {
			failpointBuildErr = err
			return
		}
		tmp.Close()
		defer os.Remove(tmp.Name())
		cmd := exec.Command(goBin, "build", "-tags", "failpoints", "-o", tmp.Name(), ".")
		if out, err := cmd.CombinedOutput(); err != nil {
			failpointBuildErr = fmt.Errorf("go build -tags failpoints: %w\n%s", err, out)
			return
		}
		failpointBin = filepath.Join(dir, "quittance")
		failpointBuildErr = os.Rename(tmp.Name(), failpointBin)
	})
	if failpointBuildErr != nil {
		t.Fatalf("build the failpoint binary: %v", failpointBuildErr)
	}
	return failpointBin
}

// serviceProcess is `quittance serve` running as a subprocess.
type serviceProcess struct {
	cmd     *exec.Cmd
	url     string
	exited  chan struct{}
	waitErr error
}

// crashEnv is one crash test: a database, the binary's environment, and the
// process currently serving.
type crashEnv struct {
	t    *testing.T
	bin  string
	env  map[string]string
	proc *serviceProcess
	api  *testClient
	orch string
	// bootstrap is QUITTANCE_BOOTSTRAP_TOKEN; oncall and oncall2 are the
	// two on-call principals it created.
	bootstrap string
	oncall    string
	oncall2   string
	signer    *compensationtest.Signer
	logDir    string
	runs      int
}

// newCrashEnv starts the failpoint binary on a fresh database with the
// failpoint armed, and registers the fixtures through it (org is merged
// into the org's registration).
func newCrashEnv(t *testing.T, point string, org map[string]any, env map[string]string) *crashEnv {
	t.Helper()
	e := &crashEnv{t: t, bin: failpointBinary(t), bootstrap: access.NewTokenSecret(), logDir: t.TempDir(),
		signer: compensationtest.NewEd25519Signer(t, "supplier-key-1")}
	e.env = map[string]string{
		"DATABASE_URL": pgtest.URL(t), "QUITTANCE_ADDR": "127.0.0.1:0", "QUITTANCE_BOOTSTRAP_TOKEN": e.bootstrap,
		"QUITTANCE_LEDGER_ID": faultLedgerID, "QUITTANCE_LOG_LEVEL": "info", "QUITTANCE_RATE_LIMIT_RPS": "0",
		"QUITTANCE_SWEEP_INTERVAL": "1h", "QUITTANCE_SHUTDOWN_TIMEOUT": "5s",
		"QUITTANCE_SIGNING_KEY_FILE": signingKeyFile(t),
	}
	for k, v := range env {
		e.env[k] = v
	}
	e.start(point)
	e.orch, e.oncall, e.oncall2 = fixtures(t, e.api, e.bootstrap, e.signer, org)
	return e
}

// start runs the binary, with the failpoint armed when point is not empty,
// and waits until it listens.
func (e *crashEnv) start(point string) {
	t := e.t
	t.Helper()
	e.runs++
	cmd := exec.Command(e.bin, "serve")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for k, v := range e.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if point != "" {
		cmd.Env = append(cmd.Env, failpoint.EnvVar+"="+point)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlives the test
	logPath := filepath.Join(e.logDir, fmt.Sprintf("run-%d.log", e.runs))
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = logFile
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", e.bin, err)
	}
	p := &serviceProcess{cmd: cmd, exited: make(chan struct{})}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "Quittance listening on "); ok {
				urls <- strings.Fields(rest)[0]
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	run := e.runs
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			showLog(t, fmt.Sprintf("service (run %d, failpoint %q)", run, point), logPath)
		}
	})
	select {
	case p.url = <-urls:
	case <-p.exited:
		t.Fatalf("the service exited before listening: %v", p.waitErr)
	case <-time.After(30 * time.Second):
		t.Fatal("the service did not start within 30s")
	}
	e.proc = p
	e.api = newTestClient(p.url)
}

// stop ends the process: SIGTERM, then SIGKILL if it does not drain in time.
func (p *serviceProcess) stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// expectKilled waits for the process to die by SIGKILL, as the armed
// failpoint does.
func (e *crashEnv) expectKilled() {
	t := e.t
	t.Helper()
	select {
	case <-e.proc.exited:
	case <-time.After(15 * time.Second):
		t.Fatal("the failpoint did not fire within 15s")
	}
	var exitErr *exec.ExitError
	if !errors.As(e.proc.waitErr, &exitErr) {
		t.Fatalf("the service exited with %v, want death by SIGKILL", e.proc.waitErr)
	}
	ws, ok := exitErr.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the service exited with %v, want death by SIGKILL", e.proc.waitErr)
	}
}

// expectConnectionError checks that a request sent to the process that
// killed itself failed at the transport: the client got no answer.
func expectConnectionError(t *testing.T, res apiResult, what string) {
	t.Helper()
	if res.err == nil {
		t.Fatalf("%s answered %v; want a connection error from the killed process", what, res)
	}
	t.Logf("%s: %v (as expected)", what, res.err)
}

// check asserts one delegation for op with exactly one hold entry, the
// delegation's event chain as a client reads it, and the invariants over
// the whole database.
func (e *crashEnv) check(op string) {
	t := e.t
	t.Helper()
	pool := testPool(t, e.env["DATABASE_URL"])
	if n, holds := holdsOf(t, pool, op); n != 1 || holds != 1 {
		t.Errorf("operation %s: %d delegations and %d hold entries, want exactly 1 and 1", op, n, holds)
	}
	var id string
	if err := pool.QueryRow(t.Context(), `SELECT id::text FROM delegations WHERE tenant = $1 AND business_operation_id = $2`,
		faultTenant, op).Scan(&id); err == nil {
		checkEventsOverAPI(t, e.api, e.orch, id)
	}
	checkDatabase(t, pool)
}

// TestCrashAfterHoldCommit kills the service after the creation's
// transaction committed and before it answered. The retry with the same
// business operation id returns the committed delegation (200), with one
// hold.
func TestCrashAfterHoldCommit(t *testing.T) {
	t.Parallel()
	e := newCrashEnv(t, "after-hold-commit", nil, nil)
	const op = "crash-after-hold-commit"
	res := e.api.do(t.Context(), http.MethodPost, "/v1/delegations", e.orch, createBody(op))
	expectConnectionError(t, res, "create")
	e.expectKilled()

	pool := testPool(t, e.env["DATABASE_URL"])
	if n, holds := holdsOf(t, pool, op); n != 1 || holds != 1 {
		t.Fatalf("before the retry: %d delegations, %d holds; the hold's transaction must have committed", n, holds)
	}
	e.start("")
	var d delegationView
	e.api.must(t, http.MethodPost, "/v1/delegations", e.orch, createBody(op), &d, http.StatusOK)
	if d.BusinessOperationID != op || d.ObligationState != "held" || d.HoldState != "active" {
		t.Fatalf("retry answered %+v, want the held delegation", d)
	}
	var budget struct {
		Held int64 `json:"held_minor"`
	}
	e.api.must(t, http.MethodGet, "/admin/v1/budgets/"+faultBudget, e.oncall, nil, &budget, http.StatusOK)
	if budget.Held != faultAmount {
		t.Errorf("budget holds %d, want %d", budget.Held, faultAmount)
	}
	e.check(op)
}

// TestCrashAfterEvidenceVerified kills the service after a signed ack
// verified and before the release transaction ran. Nothing was released;
// the same token sent again is applied once (compensated, one return), and
// once more is a duplicate.
func TestCrashAfterEvidenceVerified(t *testing.T) {
	t.Parallel()
	e := newCrashEnv(t, "after-evidence-verified", nil, nil)
	const op = "crash-after-evidence-verified"
	var d delegationView
	e.api.must(t, http.MethodPost, "/v1/delegations", e.orch, createBody(op), &d, http.StatusCreated)
	e.api.must(t, http.MethodPost, "/v1/delegations/"+d.ID+"/task-status", e.orch,
		map[string]any{"state": "TASK_STATE_CANCELED"}, &d, http.StatusOK)
	if d.ObligationState != "revocation_pending_compensation" {
		t.Fatalf("canceled delegation is %s", d.ObligationState)
	}
	ack := signAck(t, e.signer, d)
	expectConnectionError(t, e.api.do(t.Context(), http.MethodPost, "/v1/compensation/acks", "", ack), "ack")
	e.expectKilled()

	pool := testPool(t, e.env["DATABASE_URL"])
	var state string
	var used int
	if err := pool.QueryRow(t.Context(), `SELECT obligation_state, (SELECT count(*) FROM used_token_ids WHERE delegation_id = d.id)
		FROM delegations d WHERE id = $1`, d.ID).Scan(&state, &used); err != nil {
		t.Fatal(err)
	}
	if state != "revocation_pending_compensation" || used != 0 {
		t.Fatalf("before the retry: obligation %s with %d used tokens; the kill came before the release transaction", state, used)
	}

	e.start("")
	res := e.api.do(t.Context(), http.MethodPost, "/v1/compensation/acks", "", ack)
	if !res.ok() || res.header.Get("Quittance-Evidence-Outcome") != "applied" {
		t.Fatalf("ack retry answered %v, want 200 applied", res)
	}
	res = e.api.do(t.Context(), http.MethodPost, "/v1/compensation/acks", "", ack)
	if !res.ok() || res.header.Get("Quittance-Evidence-Outcome") != "duplicate" {
		t.Fatalf("second ack retry answered %v, want 200 duplicate", res)
	}
	e.api.must(t, http.MethodGet, "/v1/delegations/"+d.ID, e.orch, nil, &d, http.StatusOK)
	if d.ObligationState != "compensated" || d.HoldState != "returned" {
		t.Fatalf("after the ack: %s, hold %s; want compensated, returned", d.ObligationState, d.HoldState)
	}
	var returns, acked int
	if err := pool.QueryRow(t.Context(), `SELECT
		(SELECT count(*) FROM budget_entries WHERE delegation_id = $1 AND kind = 'return'),
		(SELECT count(*) FROM events WHERE delegation_id = $1 AND type = 'compensation_acked')`, d.ID).Scan(&returns, &acked); err != nil {
		t.Fatal(err)
	}
	if returns != 1 || acked != 1 {
		t.Errorf("%d return entries and %d compensation_acked events, want 1 and 1", returns, acked)
	}
	e.check(op)
}

// TestCrashMidSweep kills the service between two batches of the deadline
// sweep. The first batch stays committed; the sweep run again (on-call's
// POST, and the sweep every replica runs at start) moves the rest, each
// obligation exactly once, and no hold moves.
func TestCrashMidSweep(t *testing.T) {
	t.Parallel()
	e := newCrashEnv(t, "mid-sweep", nil, nil)
	// Deadlines that pass at once: 1ms after the cancel.
	mustPrivileged(t, e.api, http.MethodPut, "/admin/v1/task-classes/quick_procurement", e.oncall, e.oncall2, map[string]any{
		"effect_capable": true, "gate_on": []string{"canceled"}, "compensation_timeout": "1ms",
	})
	total := compensationDefaultBatch + compensationDefaultBatch/2
	ops := make(chan string, total)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < total; i += 8 {
				op := fmt.Sprintf("sweep-%03d", i)
				body := createBody(op)
				body["task_class"] = "quick_procurement"
				var d delegationView
				e.api.must(t, http.MethodPost, "/v1/delegations", e.orch, body, &d, http.StatusCreated)
				e.api.must(t, http.MethodPost, "/v1/delegations/"+d.ID+"/task-status", e.orch,
					map[string]any{"state": "canceled"}, &d, http.StatusOK)
				if d.ObligationState != "revocation_pending_compensation" {
					t.Errorf("%s is %s", op, d.ObligationState)
				}
				ops <- op
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	time.Sleep(10 * time.Millisecond) // past every deadline
	expectConnectionError(t, e.api.do(t.Context(), http.MethodPost, "/admin/v1/compensation/sweep", e.oncall, nil), "sweep")
	e.expectKilled()

	pool := testPool(t, e.env["DATABASE_URL"])
	count := func(state string) int {
		var n int
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM delegations WHERE obligation_state = $1`, state).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if got := count("compensation_unconfirmed"); got != compensationDefaultBatch {
		t.Fatalf("after the crash %d obligations are unconfirmed, want the first batch of %d committed", got, compensationDefaultBatch)
	}

	e.start("")
	// The sweep every replica runs at start races the retried one: rows
	// one holds, the other skips (FOR UPDATE SKIP LOCKED), so the retry is
	// repeated until nothing is left to move.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var swept struct {
			Moved int `json:"moved"`
		}
		e.api.must(t, http.MethodPost, "/admin/v1/compensation/sweep", e.oncall, nil, &swept, http.StatusOK)
		if count("revocation_pending_compensation") == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10s after the restart, %d obligations are still past their deadline", count("revocation_pending_compensation"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := count("compensation_unconfirmed"); got != total {
		t.Fatalf("after the retried sweep: %d of %d unconfirmed", got, total)
	}
	var events, entries int
	if err := pool.QueryRow(t.Context(), `SELECT
		(SELECT count(*) FROM events WHERE type = 'compensation_deadline_passed'),
		(SELECT count(*) FROM budget_entries WHERE kind <> 'hold' AND kind <> 'fund')`).Scan(&events, &entries); err != nil {
		t.Fatal(err)
	}
	if events != total {
		t.Errorf("%d compensation_deadline_passed events for %d obligations, want exactly one each", events, total)
	}
	if entries != 0 {
		t.Errorf("%d budget entries moved money; a deadline never moves a hold", entries)
	}
	var budget struct {
		Held int64 `json:"held_minor"`
	}
	e.api.must(t, http.MethodGet, "/admin/v1/budgets/"+faultBudget, e.oncall, nil, &budget, http.StatusOK)
	if want := int64(total) * faultAmount; budget.Held != want {
		t.Errorf("budget holds %d, want %d", budget.Held, want)
	}
	close(ops)
	e.check(<-ops)
}

// compensationDefaultBatch is the sweep's batch size in the binary.
const compensationDefaultBatch = 100

// sendCounter wraps an A2A agent and counts the SendMessage requests it
// receives per messageId, and the task ids it answers them with.
type sendCounter struct {
	next  http.Handler
	mu    sync.Mutex
	sends map[string]int
	tasks map[string]map[string]bool // messageId -> task ids answered
}

func (c *sendCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		c.next.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "unreadable", http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(strings.NewReader(string(body)))
	var req struct {
		Method string `json:"method"`
		Params struct {
			Message struct {
				MessageID string `json:"messageId"`
			} `json:"message"`
		} `json:"params"`
	}
	_ = json.Unmarshal(body, &req)
	if req.Method != "SendMessage" {
		c.next.ServeHTTP(w, r)
		return
	}
	rec := httptest.NewRecorder()
	c.next.ServeHTTP(rec, r)
	var resp struct {
		Result struct {
			Task struct {
				ID string `json:"id"`
			} `json:"task"`
		} `json:"result"`
	}
	_ = json.Unmarshal(rec.Body.Bytes(), &resp)
	id := req.Params.Message.MessageID
	c.mu.Lock()
	c.sends[id]++
	if c.tasks[id] == nil {
		c.tasks[id] = map[string]bool{}
	}
	if resp.Result.Task.ID != "" {
		c.tasks[id][resp.Result.Task.ID] = true
	}
	c.mu.Unlock()
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

func (c *sendCounter) counts(messageID string) (sends, tasks int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sends[messageID], len(c.tasks[messageID])
}

// TestCrashBeforeRemoteSend kills the service after its worker claimed the
// dispatch job and before it sent the message to the remote agent. After
// the restart the job's lease runs out, the job is claimed again and sent
// with the same messageId, and the remote sees exactly one message and one
// task; the orchestrator's retried creation returns the same delegation.
func TestCrashBeforeRemoteSend(t *testing.T) {
	t.Parallel()
	agent, err := demoagent.New(demoagent.Config{OrgID: faultOrg, LedgerID: faultLedgerID, WorkDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agent.Close)
	counter := &sendCounter{next: agent.Handler(), sends: map[string]int{}, tasks: map[string]map[string]bool{}}
	srv := httptest.NewServer(counter)
	t.Cleanup(srv.Close)

	e := newCrashEnv(t, "before-remote-send",
		map[string]any{"agent_card_url": agent.CardURL(srv.URL), "allowed_hosts": []string{"127.0.0.1"}},
		map[string]string{
			"QUITTANCE_EGRESS_ALLOW_HTTP": "true", "QUITTANCE_EGRESS_ALLOW_CIDRS": "127.0.0.1/32",
			"QUITTANCE_A2A_INTERVAL": "100ms", "QUITTANCE_A2A_LEASE": "2s", "QUITTANCE_A2A_STREAMING": "false",
		})
	const op = "crash-before-remote-send"
	body := map[string]any{
		"business_operation_id": op, "org_id": faultOrg, "task_class": "procurement", "budget_id": faultBudget,
		"hold":     map[string]any{"amount_minor": faultAmount, "currency": "EUR"},
		"dispatch": map[string]any{"message": map[string]any{"parts": []any{map[string]any{"text": "Order 40 laptops"}}}},
	}
	// The worker may kill the process before or after the creation was
	// answered: either way the hold and the job are committed together.
	res := e.api.do(t.Context(), http.MethodPost, "/v1/delegations", e.orch, body)
	if res.err == nil && res.status != http.StatusCreated {
		t.Fatalf("create answered %v", res)
	}
	e.expectKilled()

	pool := testPool(t, e.env["DATABASE_URL"])
	id, attempts := dispatchJob(t, pool, op)
	messageID := delegate.DispatchMessageID(uuid.MustParse(id))
	if sends, _ := counter.counts(messageID); sends != 0 || attempts != 1 {
		t.Fatalf("before the restart: %d sends, job claimed %d times; want 0 and 1 (killed between claim and send)", sends, attempts)
	}

	e.start("")
	var d delegationView
	e.api.must(t, http.MethodPost, "/v1/delegations", e.orch, body, &d, http.StatusOK)
	if d.ID != id {
		t.Fatalf("retry answered delegation %s, want %s", d.ID, id)
	}
	deadline := time.Now().Add(15 * time.Second)
	for d.Remote.TaskID == "" {
		if time.Now().After(deadline) {
			t.Fatalf("the dispatch did not resume after the restart: %+v", d)
		}
		time.Sleep(100 * time.Millisecond)
		e.api.must(t, http.MethodGet, "/v1/delegations/"+id, e.orch, nil, &d, http.StatusOK)
	}
	sends, tasks := counter.counts(messageID)
	if sends != 1 || tasks != 1 {
		t.Errorf("the remote got %d SendMessage with messageId %s creating %d tasks; want exactly 1 and 1", sends, messageID, tasks)
	}
	if (d.TaskStatus != "submitted" && d.TaskStatus != "working") || d.ObligationState != "held" {
		t.Errorf("after the dispatch: task %s, obligation %s; want submitted or working, held", d.TaskStatus, d.ObligationState)
	}
	var dispatched int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM events WHERE delegation_id = $1 AND type = 'task_dispatched'`, id).Scan(&dispatched); err != nil || dispatched != 1 {
		t.Errorf("%d task_dispatched events (%v), want 1", dispatched, err)
	}
	e.check(op)
}

// dispatchJob returns the delegation of business operation op and how many
// times its dispatch job was claimed.
func dispatchJob(t *testing.T, pool *pgxpool.Pool, op string) (id string, attempts int) {
	t.Helper()
	if err := pool.QueryRow(t.Context(), `SELECT d.id::text, o.attempts FROM delegations d
		JOIN a2a_outbox o ON o.delegation_id = d.id AND o.kind = 'dispatch'
		WHERE d.business_operation_id = $1`, op).Scan(&id, &attempts); err != nil {
		t.Fatalf("the dispatch job: %v", err)
	}
	return id, attempts
}
