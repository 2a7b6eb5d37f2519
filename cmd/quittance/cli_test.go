package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quittance/quittance/cmd/quittance/internal/errkind"
	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/ledger/access"
	"github.com/quittance/quittance/sql/pgtest"
)

// cliEnv is the real service (run serve) on a test database, and a way to
// run client commands against it.
type cliEnv struct {
	url string
	// bootstrap is QUITTANCE_BOOTSTRAP_TOKEN; oncall and oncall2 are the two
	// on-call principals it created (all it may do outside dev).
	bootstrap string
	oncall    string
	oncall2   string
	// ownerURL is the test database as its owner, serviceURL as the
	// service's own role, which the service connects as; exec runs SQL as
	// the owner (who can alter the events table).
	ownerURL   string
	serviceURL string
	exec       func(ctx context.Context, sql string, args ...any) error
	// query returns the first column of each row, as text.
	query func(ctx context.Context, sql string, args ...any) ([]string, error)
	// profilesURL is where the service serves its runtime profiles, when
	// QUITTANCE_DEBUG_ADDR was set.
	profilesURL string
	// metricsURL is where the service serves /metrics apart from the API,
	// when QUITTANCE_METRICS_ADDR was set.
	metricsURL string
	// env is the environment serve runs with, to start another replica.
	env map[string]string
}

// startService runs serve as production does: migrations as the owner of
// the schema (QUITTANCE_MIGRATION_DATABASE_URL), the service as its own
// restricted role (DATABASE_URL).
func startService(t *testing.T, extraEnv ...string) *cliEnv {
	t.Helper()
	return startServiceOn(t, pgtest.Pool(t), extraEnv...)
}

// startCheckpointingService is startService on a private cluster, for a
// test that creates checkpoints: one waits up to ten seconds for every
// transaction open on the server to end (a checkpoint covers the feed up
// to its cut), other tests' on the shared server included, and answers
// 409 checkpoint_held_back past that.
func startCheckpointingService(t *testing.T, extraEnv ...string) *cliEnv {
	t.Helper()
	return startServiceOn(t, pgtest.PrivatePool(t), extraEnv...)
}

// startServiceOn is startService on pool's database.
func startServiceOn(t *testing.T, pool *pgxpool.Pool, extraEnv ...string) *cliEnv {
	t.Helper()
	ownerURL := pool.Config().ConnString()
	token := access.NewTokenSecret()
	env := map[string]string{
		"DATABASE_URL": pgtest.ServiceURL(t, ownerURL), "QUITTANCE_MIGRATION_DATABASE_URL": ownerURL,
		"QUITTANCE_ADDR":            "127.0.0.1:0",
		"QUITTANCE_BOOTSTRAP_TOKEN": token, "QUITTANCE_LEDGER_ID": "ledger-cli",
		"QUITTANCE_LOG_LEVEL": "error",
		// As shipped: serve refuses to start without a signing key unless
		// QUITTANCE_CHECKPOINTS=off.
		"QUITTANCE_SIGNING_KEY_FILE": signingKeyFile(t),
	}
	for _, kv := range extraEnv {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	a := startServe(t, env)
	e := &cliEnv{url: a.api, profilesURL: a.profiles, metricsURL: a.metrics, bootstrap: token, ownerURL: ownerURL, serviceURL: env["DATABASE_URL"], env: env, exec: func(ctx context.Context, sql string, args ...any) error {
		_, err := pool.Exec(ctx, sql, args...)
		return err
	}}
	e.query = func(ctx context.Context, sql string, args ...any) ([]string, error) {
		rows, err := pool.Query(ctx, sql, args...)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, pgx.RowTo[string])
	}
	e.oncall, e.oncall2 = twoOncall(t, newTestClient(e.url), token)
	return e
}

// serveAddresses are where a serve started by startServe listens.
type serveAddresses struct{ api, profiles, metrics string }

// startServe runs serve with env until the test ends, and returns once it
// listens; a serve that stops or does not start in time fails the test.
func startServe(t *testing.T, env map[string]string) serveAddresses {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve"}, func(k string) string { return env[k] }, pw, io.Discard)
		pw.Close()
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	// The profiles and metrics lines, when there are any, come before the
	// API's.
	ready := make(chan serveAddresses, 1)
	go func() {
		var profiles, metrics string
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "Quittance profiles on "); ok {
				profiles = strings.Fields(rest)[0]
			}
			if rest, ok := strings.CutPrefix(sc.Text(), "Quittance metrics on "); ok {
				metrics = strings.Fields(rest)[0]
			}
			if rest, ok := strings.CutPrefix(sc.Text(), "Quittance listening on "); ok {
				ready <- serveAddresses{api: strings.Fields(rest)[0], profiles: profiles, metrics: metrics}
			}
		}
	}()
	select {
	case a := <-ready:
		return a
	case err := <-done:
		done <- err // for the cleanup
		t.Fatalf("serve stopped: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the service did not start")
	}
	return serveAddresses{}
}

// putBudget creates or funds a budget in EUR and, when tenants are given,
// names them: on-call asks, and the second on-call approves the tenants
// when they change.
func (e *cliEnv) putBudget(t *testing.T, id string, funded int64, tenants ...string) {
	t.Helper()
	var b struct {
		PendingChange *struct {
			ID string `json:"id"`
		} `json:"pending_change"`
	}
	body := map[string]any{"currency": "EUR", "funded_minor": funded}
	if tenants != nil {
		body["tenants"] = tenants
	}
	s := e.api(t, http.MethodPut, "/admin/v1/budgets/"+id, e.oncall, body, &b)
	switch {
	case s == http.StatusAccepted && b.PendingChange != nil:
		if _, errOut, code := e.cli(t, e.oncall2, "changes", "approve", b.PendingChange.ID); code != 0 {
			t.Fatalf("approve the tenants of budget %s: exit %d %s", id, code, errOut)
		}
	case s >= 300:
		t.Fatalf("PUT budget %s: %d", id, s)
	}
}

// cli runs a client command and returns stdout, stderr and the exit code
// main would use.
func (e *cliEnv) cli(t *testing.T, token string, args ...string) (string, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	env := map[string]string{"QUITTANCE_URL": e.url, "QUITTANCE_TOKEN": token}
	err := run(context.Background(), args, func(k string) string { return env[k] }, &stdout, &stderr)
	code := 0
	if err != nil {
		code = exitCode(err)
		stderr.WriteString("quittance: " + err.Error() + "\n")
	}
	return stdout.String(), stderr.String(), code
}

func (e *cliEnv) api(t *testing.T, method, path, token string, body any, out any) int {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, e.url+path, r)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil {
		_ = json.NewDecoder(resp.Body).Decode(out)
	}
	return resp.StatusCode
}

func (e *cliEnv) newToken(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := e.cli(t, e.oncall, append([]string{"token", "create"}, args...)...)
	if code != 0 {
		t.Fatalf("token create: %d %s", code, errOut)
	}
	var tok struct {
		Token         string `json:"token"`
		TokenPart     string `json:"token_part"`
		PendingChange *struct {
			ID string `json:"id"`
		} `json:"pending_change"`
	}
	if err := json.Unmarshal([]byte(out), &tok); err != nil || (tok.Token == "") == (tok.TokenPart == "") {
		t.Fatalf("token create printed %q", out)
	}
	if tok.PendingChange != nil {
		// A person principal: the other on-call approves it.
		if _, _, code := e.cli(t, e.oncall, "changes", "approve", tok.PendingChange.ID); code != errkind.ExitAuth {
			t.Errorf("self-approval of a new principal: exit %d, want %d", code, errkind.ExitAuth)
		}
		out, errOut, code := e.cli(t, e.oncall2, "changes", "approve", tok.PendingChange.ID)
		if code != 0 {
			t.Fatalf("changes approve: exit %d %s %s", code, out, errOut)
		}
		if tok.TokenPart != "" {
			// The person's credential is split: the requester's part
			// joined to the one changes approve printed.
			var approved struct {
				TokenPart string `json:"token_part"`
			}
			if err := json.Unmarshal([]byte(out), &approved); err != nil || approved.TokenPart == "" {
				t.Fatalf("changes approve printed no token_part: %q", out)
			}
			return tok.TokenPart + approved.TokenPart
		}
	}
	return tok.Token
}

// pendingDelegation creates a delegation whose task was canceled while the
// gate applied: an open obligation.
// approvePending approves, as the second on-call principal, the pending
// change a privileged request answered with (its JSON answer, out).
func (e *cliEnv) approvePending(t *testing.T, out []byte) {
	t.Helper()
	var pending struct {
		PendingChange struct{ ID string } `json:"pending_change"`
	}
	if err := json.Unmarshal(out, &pending); err != nil || pending.PendingChange.ID == "" {
		t.Fatalf("want a pending change, got %q (%v)", out, err)
	}
	if s := e.api(t, http.MethodPost, "/admin/v1/pending-changes/"+pending.PendingChange.ID+"/approve", e.oncall2, nil, nil); s != http.StatusOK {
		t.Fatalf("approve %s: %d", pending.PendingChange.ID, s)
	}
}

// supplierLedger funds budget ops, registers org supplier with signer's
// key (approved by the second on-call) and returns an orchestrator's token
// for tenant acme and a finance token: the set-up of the audit tests.
func (e *cliEnv) supplierLedger(t *testing.T, signer *compensationtest.Signer) (orch, finance string) {
	t.Helper()
	e.putBudget(t, "ops", 1_000_000, "acme")
	var registered json.RawMessage
	if s := e.api(t, http.MethodPut, "/admin/v1/orgs/supplier", e.oncall, map[string]any{
		"name": "Supplier", "jwks": json.RawMessage(signer.JWKS()),
	}, &registered); s != http.StatusAccepted {
		t.Fatalf("put org: %d", s)
	}
	e.approvePending(t, registered)
	return e.newToken(t, "--role", "orchestrator", "--tenant", "acme", "--name", "orch"), e.newToken(t, "--role", "finance", "--name", "fin")
}

// delegationState is what the CLI tests read of a delegation.
type delegationState struct {
	ID              string `json:"id"`
	ObligationState string `json:"obligation_state"`
}

// createDelegation creates a procurement delegation of 1000 EUR on budget
// ops for org supplier, with remote task task-<op>, as orch.
func (e *cliEnv) createDelegation(t *testing.T, orch, op string) delegationState {
	t.Helper()
	var d delegationState
	if s := e.api(t, http.MethodPost, "/v1/delegations", orch, map[string]any{
		"business_operation_id": op, "org_id": "supplier", "task_class": "procurement", "budget_id": "ops",
		"hold": map[string]any{"amount_minor": 1000, "currency": "EUR"}, "remote": map[string]any{"task_id": "task-" + op},
	}, &d); s != http.StatusCreated {
		t.Fatalf("create delegation: %d", s)
	}
	return d
}

func (e *cliEnv) pendingDelegation(t *testing.T, orch, op string) string {
	t.Helper()
	d := e.createDelegation(t, orch, op)
	if s := e.api(t, http.MethodPost, "/v1/delegations/"+d.ID+"/task-status", orch, map[string]any{"state": "canceled"}, &d); s != http.StatusOK {
		t.Fatalf("report status: %d", s)
	}
	if d.ObligationState != "revocation_pending_compensation" {
		t.Fatalf("state %s", d.ObligationState)
	}
	return d.ID
}

func TestCLIEndToEnd(t *testing.T) {
	t.Parallel()
	e := startService(t)
	e.putBudget(t, "ops", 1_000_000, "acme")
	if s := e.api(t, http.MethodPut, "/admin/v1/orgs/supplier", e.oncall, map[string]any{"name": "Supplier"}, nil); s >= 300 {
		t.Fatalf("put org: %d", s)
	}
	orch := e.newToken(t, "--role", "orchestrator", "--tenant", "acme", "--name", "orch")
	finance := e.newToken(t, "--role", "finance", "--name", "fin")
	id := e.pendingDelegation(t, orch, "cli-1")
	id2 := e.pendingDelegation(t, orch, "cli-2")

	// Usage errors: exit 2.
	if _, _, code := e.cli(t, e.oncall, "token", "create", "--name", "x"); code != exitUsage {
		t.Errorf("token create without --role: exit %d, want 2", code)
	}
	if _, _, code := e.cli(t, e.oncall, "obligations", "list", "-o", "xml"); code != exitUsage {
		t.Errorf("-o xml: exit %d, want 2", code)
	}
	if _, _, code := e.cli(t, e.oncall, "delegations", "show"); code != exitUsage {
		t.Errorf("show without id: exit %d, want 2", code)
	}
	if _, _, code := e.cli(t, e.oncall, "principals", "disable", uuid.NewString()); code != exitUsage {
		t.Errorf("principals disable without --reason: exit %d, want 2", code)
	}
	if _, _, code := e.cli(t, e.oncall, "credentials", "revoke", "not-a-uuid"); code != exitUsage {
		t.Errorf("credentials revoke of a non-UUID: exit %d, want 2", code)
	}
	if _, _, code := e.cli(t, e.oncall, "changes", "list", "--status", "maybe"); code != exitUsage {
		t.Errorf("changes list --status maybe: exit %d, want 2", code)
	}
	// The bootstrap token has created its two on-call principals: nothing else.
	if _, _, code := e.cli(t, e.bootstrap, "obligations", "list"); code != errkind.ExitAuth {
		t.Errorf("bootstrap token listing obligations: exit %d, want 4", code)
	}
	// Credentials: listed without secrets, revoked, rotated.
	spare := e.newToken(t, "--role", "orchestrator", "--tenant", "acme", "--name", "spare")
	out, errOut, code := e.cli(t, e.oncall, "credentials", "list")
	if code != 0 || strings.Contains(out, spare) || !strings.Contains(out, `"spare"`) {
		t.Errorf("credentials list: exit %d %s\n%s", code, errOut, out)
	}
	var creds struct {
		Credentials []struct {
			ID   string `json:"id"`
			Name string `json:"name"`
		} `json:"credentials"`
	}
	_ = json.Unmarshal([]byte(out), &creds)
	for _, c := range creds.Credentials {
		if c.Name == "spare" {
			if _, errOut, code := e.cli(t, e.oncall, "credentials", "revoke", c.ID, "--reason", "unused"); code != 0 {
				t.Errorf("credentials revoke: exit %d %s", code, errOut)
			}
		}
	}
	if _, _, code := e.cli(t, spare, "obligations", "list"); code != errkind.ExitAuth {
		t.Errorf("a revoked credential: exit %d, want 4", code)
	}
	// Auth errors: exit 4, one line "quittance: <code>: <detail>".
	_, errOut, code = e.cli(t, finance, "token", "create", "--role", "oncall", "--name", "sneaky")
	if code != errkind.ExitAuth || !strings.HasPrefix(errOut, "quittance: forbidden: ") {
		t.Errorf("finance creating a token: exit %d, stderr %q", code, errOut)
	}
	if _, _, code := e.cli(t, "qt_wrong", "obligations", "list"); code != errkind.ExitAuth {
		t.Errorf("bad token: exit %d, want 4", code)
	}
	// Not found: exit 1.
	if _, errOut, code := e.cli(t, e.oncall, "delegations", "show", uuid.NewString()); code != exitFailure || !strings.Contains(errOut, "not_found") {
		t.Errorf("show missing: exit %d, %q", code, errOut)
	}

	out, _, code = e.cli(t, finance, "obligations", "list")
	if code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "revocation_pending_compensation") {
		t.Errorf("list table: exit %d\n%s", code, out)
	}
	out, _, code = e.cli(t, finance, "obligations", "list", "-o", "csv", "--org", "supplier", "--state", "revocation_pending_compensation")
	if code != 0 || !strings.HasPrefix(out, "delegation_id,tenant,") || strings.Count(out, "\r\n") != 3 {
		t.Errorf("list csv: exit %d\n%s", code, out)
	}
	out, _, code = e.cli(t, finance, "obligations", "list", "-o", "json", "--older-than", "1h")
	if code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("list json older than 1h: exit %d\n%s", code, out)
	}
	out, _, code = e.cli(t, e.oncall, "delegations", "show", id)
	if code != 0 || !strings.Contains(out, `"delegation_created"`) || strings.Contains(out, `"remote_tasks"`) {
		t.Errorf("show: exit %d\n%s", code, out)
	}
	// An extra remote task recorded on the delegation (as the A2A worker
	// records one it found) is listed by show.
	if err := e.exec(context.Background(), `INSERT INTO delegation_remote_tasks
		(delegation_id, task_id, purpose, context_id, found_by, status, found_at, named_round, updated_at)
		VALUES ($1, 'extra-7', 'dispatch', 'ctx-7', 'list_tasks', 'working', now(), 1, now())`, id); err != nil {
		t.Fatal(err)
	}
	out, _, code = e.cli(t, e.oncall, "delegations", "show", id)
	var shown struct {
		Delegation struct {
			RemoteTasks []struct {
				TaskID     string `json:"task_id"`
				Purpose    string `json:"purpose"`
				Status     string `json:"status"`
				NamedRound int    `json:"named_round"`
			} `json:"remote_tasks"`
		} `json:"delegation"`
	}
	if err := json.Unmarshal([]byte(out), &shown); code != 0 || err != nil || len(shown.Delegation.RemoteTasks) != 1 ||
		shown.Delegation.RemoteTasks[0].TaskID != "extra-7" || shown.Delegation.RemoteTasks[0].Purpose != "dispatch" ||
		shown.Delegation.RemoteTasks[0].Status != "working" || shown.Delegation.RemoteTasks[0].NamedRound != 1 {
		t.Errorf("show with an extra remote task: exit %d (%v)\n%s", code, err, out)
	}

	// On-call actions (compensation endpoints).
	if out, errOut, code := e.cli(t, e.oncall, "sweep"); code != 0 {
		t.Errorf("sweep: exit %d %s %s", code, out, errOut)
	}
	if _, errOut, code := e.cli(t, e.oncall, "write-off", id, "--reference", "INC-1"); code != exitUsage {
		t.Errorf("write-off without reason: exit %d %s", code, errOut)
	}
	if _, errOut, code := e.cli(t, e.oncall, "compensation", "redrive", id); code != exitUsage {
		t.Errorf("redrive without reason: exit %d %s", code, errOut)
	}
	if _, errOut, code := e.cli(t, e.oncall, "compensation", "redrive", id, "--reason", "try again"); code != exitConflict || !strings.Contains(errOut, "redrive_not_allowed") {
		t.Errorf("redrive outside compensation_unconfirmed: exit %d %s, want 3 redrive_not_allowed", code, errOut)
	}
	if out, errOut, code := e.cli(t, e.oncall, "write-off", id, "--reason", "remote unreachable", "--reference", "INC-1"); code != 0 {
		t.Errorf("write-off: exit %d %s %s", code, out, errOut)
	}
	if _, errOut, code := e.cli(t, e.oncall, "write-off", id, "--reason", "again"); code != exitConflict {
		t.Errorf("write-off of a written-off obligation: exit %d %s, want 3", code, errOut)
	}
	if _, _, code := e.cli(t, e.oncall, "write-offs", "approve", uuid.NewString()); code != exitFailure {
		t.Errorf("approve missing write-off: exit %d, want 1", code)
	}
	if out, errOut, code := e.cli(t, e.oncall, "orgs", "revoke", "supplier", "--reason", "key compromise"); code != 0 || !strings.Contains(out, `"escalated"`) {
		t.Errorf("revoke: exit %d %s %s", code, out, errOut)
	}

	// verify-chain: intact, then a tampered row.
	out, _, code = e.cli(t, finance, "verify-chain")
	if code != 0 || !strings.Contains(out, "ok\t"+id2) {
		t.Fatalf("verify-chain: exit %d\n%s", code, out)
	}
	ctx := context.Background()
	for _, stmt := range []string{
		"ALTER TABLE events DISABLE TRIGGER events_append_only",
		"UPDATE events SET actor = 'token:mallory' WHERE delegation_id = '" + id2 + "' AND stream_seq = 1",
		"ALTER TABLE events ENABLE TRIGGER events_append_only",
	} {
		if err := e.exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	out, _, code = e.cli(t, finance, "verify-chain", "--delegation", id2)
	if code != exitFailure || !strings.Contains(out, "BROKEN\t"+id2) || !strings.Contains(out, "hash does not match") {
		t.Fatalf("verify-chain after tampering: exit %d\n%s", code, out)
	}
	if _, _, code := e.cli(t, finance, "verify-chain", "--delegation", id); code != 0 {
		t.Errorf("an untouched chain still verifies: exit %d", code)
	}
}

// httpGet GETs url with no credential and returns the status and body.
func httpGet(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// TestProfilesOnTheirOwnListener: with QUITTANCE_DEBUG_ADDR the service
// serves Go's CPU profile there, and never on the API's address; without
// it, there is no profile listener at all.
func TestProfilesOnTheirOwnListener(t *testing.T) {
	t.Parallel()
	e := startService(t, "QUITTANCE_DEBUG_ADDR=127.0.0.1:0")
	if e.profilesURL == "" {
		t.Fatal("no profile listener announced")
	}
	status, body := httpGet(t, e.profilesURL+"profile?seconds=1")
	// A CPU profile is a gzip-compressed protocol buffer.
	if status != http.StatusOK || !bytes.HasPrefix(body, []byte{0x1f, 0x8b}) {
		t.Fatalf("CPU profile: status %d, %d bytes", status, len(body))
	}
	if status, _ := httpGet(t, e.url+"/debug/pprof/"); status == http.StatusOK {
		t.Fatal("the API's address serves profiles")
	}
	if off := startService(t); off.profilesURL != "" {
		t.Fatalf("profiles served at %s without QUITTANCE_DEBUG_ADDR", off.profilesURL)
	}
}

// TestMetricsOnTheirOwnListener: with QUITTANCE_METRICS_ADDR the service
// serves /metrics there and answers 404 for it on the API's address, where
// anyone who can post a token could read what the uniform 401 hides (the
// refusal's reason, by the org the token named).
func TestMetricsOnTheirOwnListener(t *testing.T) {
	t.Parallel()
	e := startService(t, "QUITTANCE_METRICS_ADDR=127.0.0.1:0")
	if e.metricsURL == "" {
		t.Fatal("no metrics listener announced")
	}
	// A refused token is counted by org and reason: on the metrics listener
	// only.
	if s := e.postEvidence(t, "/v1/compensation/acks", "not.a.token"); s != http.StatusUnauthorized {
		t.Fatalf("a garbage token: %d, want 401", s)
	}
	status, body := httpGet(t, e.metricsURL)
	if status != http.StatusOK || !bytes.Contains(body, []byte("quittance_collector_up 1")) || !bytes.Contains(body, []byte("quittance_evidence_tokens_refused_total{")) {
		t.Fatalf("metrics listener: status %d\n%.500s", status, body)
	}
	if status, body := httpGet(t, e.url+"/metrics"); status != http.StatusNotFound {
		t.Fatalf("the API's address answers /metrics with %d, want 404:\n%.300s", status, body)
	}
	if status, _ := httpGet(t, e.url+"/healthz"); status != http.StatusOK {
		t.Errorf("/healthz on the API's address: %d", status)
	}
}

func TestMetricsEndpointServesDashboardMetrics(t *testing.T) {
	t.Parallel()
	e := startService(t)
	resp, err := http.Get(e.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, name := range []string{"quittance_obligations{", "quittance_collector_up 1", "quittance_write_offs_total{", "quittance_evidence_total{", "quittance_compensation_requests_total{"} {
		if !bytes.Contains(body, []byte(name)) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
}
