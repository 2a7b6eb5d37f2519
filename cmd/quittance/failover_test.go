package main

// Failover to a synchronous standby under load: the service runs on a
// multi-host DATABASE_URL with target_session_attrs=read-write, the
// primary's postmaster is SIGKILLed and the standby promoted while clients
// run lifecycles (deploy/OPERATIONS.md, "Failover").

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/ledger/access"
	"github.com/quittance/quittance/sql/pgtest"
)

// TestFailoverToSynchronousStandby: with four clients running create →
// working → canceled → signed ack (or completed), and a fifth dispatching
// delegations to a real A2A agent through the outbox, the primary is
// killed and its synchronous standby promoted by the test (pg_ctl
// promote). See runFailover for what is checked.
func TestFailoverToSynchronousStandby(t *testing.T) {
	t.Parallel()
	runFailover(t, pgtest.Replicated(t))
}

// failoverPair is a primary and its standby that a test can fail over:
// URL names both (target_session_attrs=read-write), Failover kills the
// primary and returns once a new primary takes writes.
type failoverPair interface {
	URL() string
	Failover(ctx context.Context) (killed time.Time, err error)
}

// runFailover runs the service on pair's multi-host URL under load and
// fails the pair over. Writes resume by themselves on the new primary;
// every answer 2xx is in its database, nothing twice, with the invariants
// of ledger/DESIGN.md §2.2 (load.check); every refusal during the switch
// is 503 with Retry-After, or, for a commit whose answer the dying primary
// never sent, 500 outcome_unknown, and the clients' retries with the same
// idempotency keys complete each operation once; the outbox resumes with
// exactly one remote task per dispatched delegation; an SSE client cut at
// the kill reconnects with Last-Event-ID and receives every event once; a
// credential cached before the kill and revoked on the new primary while
// the credentials listener is down is refused (the cache is not trusted
// while LISTEN is down: checkRefusedWhileListenerDown); the LISTEN connections come back
// on the new primary and a credential revoked there then is refused at
// once; checkpoints continue the chain from the last signed head; and
// `quittance verify-chain` passes. The time from the kill to the first
// write sent after it that succeeded is logged (BENCHMARK.md).
func runFailover(t *testing.T, pair failoverPair) {
	dbURL := pair.URL()
	bootstrap := access.NewTokenSecret()
	counter, agent, agentURL := failoverAgent(t)
	agentCard := agent.CardURL(agentURL)
	api := newTestClient(inProcessService(t, dbURL, bootstrap, append([]string{"QUITTANCE_CHECKPOINT_INTERVAL=1s"}, a2aEnv...)...))
	signer := compensationtest.NewEd25519Signer(t, "supplier-key-1")
	orch, oncall, probe := fixtures(t, api, bootstrap, signer, nil)
	mustPrivileged(t, api, http.MethodPut, "/admin/v1/orgs/"+failoverAgentOrg, oncall, probe, map[string]any{
		"name": "Agent supplier", "shared_coordinator": false, "jwks": json.RawMessage(signer.JWKS()),
		"agent_card_url": agentCard, "allowed_hosts": []string{"127.0.0.1"},
	})
	var outageProbe struct {
		Token string `json:"token"`
	}
	api.must(t, http.MethodPost, "/admin/v1/tokens", oncall,
		map[string]any{"role": "orchestrator", "tenant": "failover-probe", "name": "outage probe"}, &outageProbe, http.StatusCreated)
	// The probe credential is authenticated, and so cached, before the switch.
	api.must(t, http.MethodGet, "/admin/v1/task-classes", probe, nil, nil, http.StatusOK)
	before := testPool(t, dbURL)
	listening := listenChannels(t, before)
	if !slices.Contains(listening, "quittance_credentials") {
		t.Fatalf("before the failover the service listens on %v: no credentials listener", listening)
	}

	events := newSSEFollower(api.base, oncall)
	followCtx, stopFollowing := context.WithCancel(t.Context())
	followed := make(chan struct{})
	go func() { defer close(followed); events.run(followCtx) }()
	defer func() { stopFollowing(); <-followed }()

	l := newLoad(t, api, orch, signer, "failover")
	stop := make(chan struct{})
	const clients = 4
	wait := l.run(clients, stop)
	d := &dispatcher{l: l}
	waitDispatch := d.run(stop, 150*time.Millisecond)
	time.Sleep(2 * time.Second)
	headBefore := latestCheckpointOf(t, api, oncall)
	// Cached now: a lookup within the cache's lifetime is answered from it
	// while the credentials listener proves itself alive.
	api.must(t, http.MethodGet, "/v1/delegations/"+uuid.NewString(), outageProbe.Token, nil, nil, http.StatusNotFound)
	killed, err := pair.Failover(t.Context())
	events.cutNow()
	if err != nil {
		close(stop)
		wait()
		waitDispatch()
		t.Fatalf("failover: %v", err)
	}
	t.Logf("new primary %s after the kill", time.Since(killed).Round(time.Millisecond))
	checkRefusedWhileListenerDown(t, api, dbURL, outageProbe.Token)
	l.waitRecovered(t, killed, 20*time.Second)
	time.Sleep(2 * time.Second)
	close(stop)
	wait()
	waitDispatch()
	t.Logf("writes resumed %s after the kill (the first 2xx to a write sent after it)", firstOKAfter(t, l, killed))

	after := testPool(t, dbURL)
	l.check(t, after)
	checkRefusals(t, l, clients+1) // and the dispatcher
	checkOutbox(t, api, orch, d, counter, 20*time.Second)
	checkListenersBack(t, after, listening)
	checkRevokedAtOnce(t, api, after, probe)
	checkCheckpointsContinue(t, api, oncall, headBefore.ID)
	checkCheckpointChain(t, after, headBefore)
	events.check(t, after, 15*time.Second)
	if out, errOut, code := runCLI(api.base, oncall, "verify-chain"); code != 0 {
		t.Errorf("verify-chain after the failover: exit %d\n%s\n%s", code, out, errOut)
	}
}

// checkRefusedWhileListenerDown: a credential the service authenticated
// (and cached) just before the kill is revoked on the new primary while
// the service's credentials listener is down, so that no notification of
// it is ever heard: the test disallows new connections to the database
// (ALTER DATABASE … ALLOW_CONNECTIONS false, as a listener that cannot
// reconnect yet), ends the listener's session if it came back, and then
// revokes. The credential's requests must be refused (401), or turned
// away as unavailable (503), never answered from the cache: the cache was
// emptied when the listener lost its connection and answers nothing until
// a listener proves itself again. Once connections are allowed and the
// listener is back, it is refused still.
func checkRefusedWhileListenerDown(t *testing.T, api *testClient, dbURL, token string) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dbURL)
	if err != nil {
		t.Fatalf("connect to the new primary: %v", err)
	}
	defer conn.Close(context.Background())
	// A database's connections are disallowed from another one.
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	db := cfg.Database
	cfg.Database = "postgres"
	admin, err := pgx.ConnectConfig(t.Context(), cfg)
	if err != nil {
		t.Fatalf("connect to the new primary's maintenance database: %v", err)
	}
	defer admin.Close(context.Background())
	allow := func(on bool) {
		q := fmt.Sprintf("ALTER DATABASE %s ALLOW_CONNECTIONS %v", pgx.Identifier{db}.Sanitize(), on)
		if _, err := admin.Exec(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	allow(false)
	reallowed := false
	defer func() {
		if !reallowed {
			allow(true)
		}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var listeners int
		if err := conn.QueryRow(t.Context(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE application_name LIKE 'quittance listen quittance_credentials%'`).Scan(&listeners); err != nil {
			t.Fatal(err)
		}
		if listeners == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the credentials listener's session did not end")
		}
		time.Sleep(20 * time.Millisecond)
	}
	tag, err := conn.Exec(t.Context(), `UPDATE api_tokens SET revoked_at = now(), revoke_reason = 'failover test'
		WHERE token_hash = $1`, access.HashToken(token))
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("revoke the outage probe: %v (%d rows)", err, tag.RowsAffected())
	}
	answers := map[int]int{}
	probe := func() bool {
		res := api.do(t.Context(), http.MethodGet, "/v1/delegations/"+uuid.NewString(), token, nil)
		switch {
		case res.err == nil && (res.status == http.StatusUnauthorized || res.status == http.StatusServiceUnavailable):
			answers[res.status]++
			return res.status == http.StatusUnauthorized
		default:
			t.Fatalf("a credential cached before the kill, revoked on the new primary while the listener was down, answered %v; want 401 (or 503)", res)
			return true
		}
	}
	for end := time.Now().Add(time.Second); time.Now().Before(end); {
		probe()
		time.Sleep(50 * time.Millisecond)
	}
	allow(true)
	reallowed = true
	for end := time.Now().Add(20 * time.Second); !probe(); {
		if time.Now().After(end) {
			t.Error("the outage probe was still answered 503 20s after connections were allowed again")
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("a credential revoked while the credentials listener was down: answered 401 %d times, 503 %d times, never from the cache",
		answers[http.StatusUnauthorized], answers[http.StatusServiceUnavailable])
}

// firstOKAfter is how long after t0 the first 2xx answer to a request
// sent after t0 came: a write that the database took after t0.
func firstOKAfter(t *testing.T, l *load, t0 time.Time) time.Duration {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var first time.Time
	for _, a := range l.oks {
		if a.sent.After(t0) && (first.IsZero() || a.answered.Before(first)) {
			first = a.answered
		}
	}
	if first.IsZero() {
		t.Fatal("no request sent after the kill succeeded")
	}
	return first.Sub(t0).Round(time.Millisecond)
}

// checkRefusals: the switch was felt (some request was refused), and every
// refusal was a 503 with Retry-After, or a 500 outcome_unknown for a
// commit in flight when the primary died (at most one for each of the
// senders, which one flush may carry together), never a transport error
// or another 5xx.
func checkRefusals(t *testing.T, l *load, senders int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.refusals) == 0 {
		t.Error("no request was refused: the failover did not hit the load")
	}
	unavailable, unknown := 0, 0
	for _, r := range l.refusals {
		switch {
		case r.err == nil && r.status == http.StatusServiceUnavailable && r.header.Get("Retry-After") != "":
			unavailable++
		case r.err == nil && r.status == http.StatusInternalServerError && problemCode(r) == "outcome_unknown":
			unknown++
		default:
			t.Errorf("refusal during the failover: %v (Retry-After %q), want 503 with Retry-After", r, r.header.Get("Retry-After"))
		}
	}
	if unknown > senders {
		t.Errorf("%d answers outcome_unknown, more than one for each of the %d senders", unknown, senders)
	}
	t.Logf("refusals: %d answered 503 with Retry-After, %d 500 outcome_unknown", unavailable, unknown)
}

// listenChannels are the channels the service's LISTEN connections listen
// on, as the server shows them.
func listenChannels(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT DISTINCT substr(application_name, 18) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name LIKE 'quittance listen %' ORDER BY 1`)
	if err != nil {
		t.Fatalf("read pg_stat_activity: %v", err)
	}
	defer rows.Close()
	var channels []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			t.Fatal(err)
		}
		channels = append(channels, strings.TrimSpace(c))
	}
	return channels
}

// checkListenersBack: every channel listened on before the failover is
// listened on again on the new primary, within a few seconds.
func checkListenersBack(t *testing.T, pool *pgxpool.Pool, want []string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := listenChannels(t, pool)
		if !slices.ContainsFunc(want, func(c string) bool { return !slices.Contains(got, c) }) {
			t.Logf("LISTEN connections back on the new primary: %v", got)
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("after the failover the service listens on %v, want %v", got, want)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkRevokedAtOnce revokes the probe's credential in the new primary's
// database, as another replica's revocation would commit it, and expects
// the service, whose cache held it before the switch, to refuse it within
// a second.
func checkRevokedAtOnce(t *testing.T, api *testClient, pool *pgxpool.Pool, token string) {
	t.Helper()
	api.must(t, http.MethodGet, "/admin/v1/task-classes", token, nil, nil, http.StatusOK)
	tag, err := pool.Exec(t.Context(), `UPDATE api_tokens SET revoked_at = now(), revoke_reason = 'failover test'
		WHERE token_hash = $1`, access.HashToken(token))
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("revoke the probe credential: %v (%d rows)", err, tag.RowsAffected())
	}
	deadline := time.Now().Add(time.Second)
	for {
		res := api.do(t.Context(), http.MethodGet, "/admin/v1/task-classes", token, nil)
		if res.err == nil && res.status == http.StatusUnauthorized {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("a credential revoked on the new primary still answered %v a second later", res)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// latestCheckpointID is the id of the newest signed checkpoint, or 0.
func latestCheckpointID(t *testing.T, api *testClient, token string) int64 {
	t.Helper()
	return latestCheckpointOf(t, api, token).ID
}

// latestCheckpointOf is the newest signed checkpoint, or none (id 0).
func latestCheckpointOf(t *testing.T, api *testClient, token string) latestCheckpoint {
	t.Helper()
	var c latestCheckpoint
	api.must(t, http.MethodGet, "/v1/checkpoints/latest", token, nil, &c, http.StatusOK, http.StatusNotFound)
	return c
}

// checkCheckpointsContinue: a checkpoint is signed on the new primary
// after the one before the switch.
func checkCheckpointsContinue(t *testing.T, api *testClient, token string, before int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for latestCheckpointID(t, api, token) <= before {
		if time.Now().After(deadline) {
			t.Errorf("no checkpoint after %d was signed within 10s of the failover", before)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// runCLI runs the quittance command against the service at base, as token.
func runCLI(base, token string, args ...string) (stdout, stderr string, code int) {
	var out, errOut bytes.Buffer
	env := map[string]string{"QUITTANCE_URL": base, "QUITTANCE_TOKEN": token}
	if err := run(context.Background(), args, func(k string) string { return env[k] }, &out, &errOut); err != nil {
		errOut.WriteString("quittance: " + err.Error() + "\n")
		return out.String(), errOut.String(), exitCode(err)
	}
	return out.String(), errOut.String(), 0
}
