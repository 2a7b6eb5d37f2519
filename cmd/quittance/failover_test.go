package main

// Failover to a synchronous standby under load: the service runs on a
// multi-host DATABASE_URL with target_session_attrs=read-write, the
// primary's postmaster is SIGKILLed and the standby promoted while clients
// run lifecycles (deploy/OPERATIONS.md, "Failover").

import (
	"bytes"
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/ledger/access"
	"github.com/quittance/quittance/sql/pgtest"
)

// TestFailoverToSynchronousStandby: with four clients running create →
// working → canceled → signed ack (or completed), the primary is killed
// and its synchronous standby promoted. Writes resume by themselves on the
// new primary; every answer 2xx is in its database, nothing twice, with
// the invariants of ledger/DESIGN.md §2.2 (load.check); every refusal
// during the switch is 503 with Retry-After, or, for a commit whose answer
// the dying primary never sent, 500 outcome_unknown, and the clients'
// retries with the same idempotency keys complete each operation once;
// the LISTEN connections come back on the new primary, a credential
// revoked there is refused at once, checkpoints continue, and
// `quittance verify-chain` passes. The time from the kill to the first
// write sent after it that succeeded is logged (BENCHMARK.md).
func TestFailoverToSynchronousStandby(t *testing.T) {
	t.Parallel()
	pair := pgtest.Replicated(t)
	dbURL := pair.URL()
	bootstrap := access.NewTokenSecret()
	api := newTestClient(inProcessService(t, dbURL, bootstrap, "QUITTANCE_CHECKPOINT_INTERVAL=1s"))
	signer := compensationtest.NewEd25519Signer(t, "supplier-key-1")
	orch, oncall, probe := fixtures(t, api, bootstrap, signer, nil)
	// The probe credential is authenticated, and so cached, before the switch.
	api.must(t, http.MethodGet, "/admin/v1/task-classes", probe, nil, nil, http.StatusOK)
	before := testPool(t, dbURL)
	listening := listenChannels(t, before)
	if !slices.Contains(listening, "quittance_credentials") {
		t.Fatalf("before the failover the service listens on %v: no credentials listener", listening)
	}

	l := newLoad(t, api, orch, signer, "failover")
	stop := make(chan struct{})
	wait := l.run(4, stop)
	time.Sleep(2 * time.Second)
	checkpointBefore := latestCheckpointID(t, api, oncall)
	killed, err := pair.Failover(t.Context())
	if err != nil {
		close(stop)
		wait()
		t.Fatalf("failover: %v", err)
	}
	t.Logf("standby promoted %s after the kill", time.Since(killed).Round(time.Millisecond))
	l.waitRecovered(t, killed, 20*time.Second)
	time.Sleep(2 * time.Second)
	close(stop)
	wait()
	t.Logf("writes resumed %s after the kill (the first 2xx to a write sent after it)", firstOKAfter(t, l, killed))

	after := testPool(t, dbURL)
	l.check(t, after)
	checkRefusals(t, l)
	checkListenersBack(t, after, listening)
	checkRevokedAtOnce(t, api, after, probe)
	checkCheckpointsContinue(t, api, oncall, checkpointBefore)
	if out, errOut, code := runCLI(api.base, oncall, "verify-chain"); code != 0 {
		t.Errorf("verify-chain after the failover: exit %d\n%s\n%s", code, out, errOut)
	}
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
// commit in flight when the primary died (at most one per client), never
// a transport error or another 5xx.
func checkRefusals(t *testing.T, l *load) {
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
	if unknown > 4 {
		t.Errorf("%d answers outcome_unknown, more than one per client", unknown)
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
	var c latestCheckpoint
	api.must(t, http.MethodGet, "/v1/checkpoints/latest", token, nil, &c, http.StatusOK, http.StatusNotFound)
	return c.ID
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
