package main

// Reads from the standby (deploy/OPERATIONS.md, "Reading from a standby"):
// the service runs with DATABASE_URL on a primary and
// QUITTANCE_READ_DATABASE_URL on its synchronous streaming standby, and is
// driven through its HTTP API on loopback.

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/ledger/access"
	"github.com/quittance/quittance/sql/pgtest"
)

// TestReadsFromStandby: writes go to the primary (a create works and is
// read back, which the read-only standby would refuse); reconciliation
// reads are served from the standby, say so in their headers, and, once
// replicated, hold the primary's data; while the standby's replay is
// paused its answers miss the newest write and say how old they are, and
// consistency=strong reads the primary, which has it; with the standby
// stopped, reads fall back to the primary, still 200, and the fallbacks
// are counted.
func TestReadsFromStandby(t *testing.T) {
	t.Parallel()
	pair := pgtest.Replicated(t)
	bootstrap := access.NewTokenSecret()
	api := newTestClient(inProcessService(t, pair.Primary.URL(pair.Database), bootstrap,
		"QUITTANCE_READ_DATABASE_URL="+pair.Standby.URL(pair.Database), "QUITTANCE_CHECKPOINTS=off"))
	signer := compensationtest.NewEd25519Signer(t, "supplier-key-1")
	orch, oncall, _ := fixtures(t, api, bootstrap, signer, nil)

	first := createHeld(t, api, orch, "standby-read-1")
	held := "/v1/obligations?state=held"
	// Synchronous replication waits for the standby's flush, not its replay.
	res := getUntil(t, api, held, oncall, func(r apiResult) bool { return slices.Contains(obligationIDs(t, r), first) })
	checkFreshness(t, res, "standby")
	strong := api.do(t.Context(), http.MethodGet, held+"&consistency=strong", oncall, nil)
	checkFreshness(t, strong, "primary")
	if a, b := obligationRows(t, res), obligationRows(t, strong); !slices.Equal(a, b) {
		t.Errorf("the standby lists %v, the primary %v", a, b)
	}
	for _, path := range []string{"/v1/obligations/summary", "/v1/obligations/queue?state=held", "/v1/anomalies"} {
		checkFreshness(t, api.do(t.Context(), http.MethodGet, path, oncall, nil), "standby")
	}
	summary := api.do(t.Context(), http.MethodGet, "/v1/obligations/summary", oncall, nil)
	strongSummary := api.do(t.Context(), http.MethodGet, "/v1/obligations/summary?consistency=strong", oncall, nil)
	if a, b := summaryRows(t, summary), summaryRows(t, strongSummary); a != b {
		t.Errorf("the standby's summary %s, the primary's %s", a, b)
	}
	csv := api.do(t.Context(), http.MethodGet, held+"&format=csv", oncall, nil)
	checkFreshness(t, csv, "standby")
	if !strings.Contains(string(csv.body), first) {
		t.Errorf("CSV export from the standby lacks %s:\n%s", first, csv.body)
	}
	if bad := api.do(t.Context(), http.MethodGet, held+"&consistency=eventual", oncall, nil); bad.ok() {
		t.Errorf("consistency=eventual: %v, want a refusal", bad)
	}
	// Evidence stays on the primary: no freshness headers.
	if ev := api.do(t.Context(), http.MethodGet, "/v1/delegations/"+first+"/evidence", oncall, nil); !ev.ok() || ev.header.Get("Quittance-Read-From") != "" {
		t.Errorf("evidence: %v, Quittance-Read-From %q, want 200 without it", ev, ev.header.Get("Quittance-Read-From"))
	}

	console := newConsoleClient(t, api.base)
	console.signIn(oncall)
	checkConsoleAsOf(t, console, true)

	checkPausedReplay(t, api, pair, orch, oncall)

	if err := pair.Standby.Stop(t.Context()); err != nil {
		t.Fatalf("stop the standby: %v", err)
	}
	before := readFallbacks(t, api)
	down := api.do(t.Context(), http.MethodGet, held, oncall, nil)
	checkFreshness(t, down, "primary")
	if !slices.Contains(obligationIDs(t, down), first) {
		t.Errorf("with the standby down the list lacks %s: %v", first, down)
	}
	checkFreshness(t, api.do(t.Context(), http.MethodGet, held+"&format=csv", oncall, nil), "primary")
	checkFreshness(t, api.do(t.Context(), http.MethodGet, "/v1/obligations/summary", oncall, nil), "primary")
	if after := readFallbacks(t, api); after < before+3 {
		t.Errorf("quittance_read_fallbacks_total{reason=\"unavailable\"} went from %v to %v over 3 reads with the standby down", before, after)
	}
	checkConsoleAsOf(t, console, false)
}

// checkConsoleAsOf checks that the console's overview, obligations and
// counterparties pages say their figures were read from the standby when
// fromStandby, and never with consistency=strong.
func checkConsoleAsOf(t *testing.T, console *consoleClient, fromStandby bool) {
	t.Helper()
	for _, page := range []string{"/console/", "/console/obligations", "/console/orgs"} {
		_, body := console.get(page)
		if got := strings.Contains(body, "read from the standby"); got != fromStandby {
			t.Errorf("%s says \"read from the standby\": %v, want %v", page, got, fromStandby)
		}
		if _, strong := console.get(page + "?consistency=strong"); strings.Contains(strong, "read from the standby") {
			t.Errorf("%s?consistency=strong says it was read from the standby", page)
		}
	}
}

// TestReadsWithoutReadURL: without QUITTANCE_READ_DATABASE_URL every read
// is the primary's, and its answers say so.
func TestReadsWithoutReadURL(t *testing.T) {
	t.Parallel()
	bootstrap := access.NewTokenSecret()
	api := newTestClient(inProcessService(t, pgtest.URL(t), bootstrap, "QUITTANCE_CHECKPOINTS=off"))
	signer := compensationtest.NewEd25519Signer(t, "supplier-key-1")
	orch, oncall, _ := fixtures(t, api, bootstrap, signer, nil)
	id := createHeld(t, api, orch, "primary-read-1")
	res := api.do(t.Context(), http.MethodGet, "/v1/obligations?state=held", oncall, nil)
	checkFreshness(t, res, "primary")
	if !slices.Contains(obligationIDs(t, res), id) {
		t.Errorf("the list lacks %s: %v", id, res)
	}
	if n := readFallbacks(t, api); n != 0 {
		t.Errorf("%v fallbacks without a standby", n)
	}
}

// TestReadsFallBackOnStandbyError: a read database that answers with
// errors (here one without the schema) costs no request: the reads are
// served by the primary and counted with reason "error".
func TestReadsFallBackOnStandbyError(t *testing.T) {
	t.Parallel()
	bootstrap := access.NewTokenSecret()
	api := newTestClient(inProcessService(t, pgtest.URL(t), bootstrap,
		"QUITTANCE_READ_DATABASE_URL="+pgtest.EmptyURL(t), "QUITTANCE_CHECKPOINTS=off"))
	signer := compensationtest.NewEd25519Signer(t, "supplier-key-1")
	orch, oncall, _ := fixtures(t, api, bootstrap, signer, nil)
	id := createHeld(t, api, orch, "error-read-1")
	res := api.do(t.Context(), http.MethodGet, "/v1/obligations?state=held", oncall, nil)
	checkFreshness(t, res, "primary")
	if !slices.Contains(obligationIDs(t, res), id) {
		t.Errorf("the list lacks %s: %v", id, res)
	}
	metrics := api.do(t.Context(), http.MethodGet, "/metrics", "", nil)
	if m := errorFallbacks.FindSubmatch(metrics.body); m == nil || string(m[1]) == "0" {
		t.Errorf("no fallback counted with reason error:\n%s", errorFallbacks.Find(metrics.body))
	}
}

var replayLag = regexp.MustCompile(`(?m)^quittance_read_replay_lag_seconds (\S+)`)

var errorFallbacks = regexp.MustCompile(`(?m)^quittance_read_fallbacks_total\{reason="error"\} (\S+)`)

// checkPausedReplay pauses the standby's replay, writes on the primary and
// checks that the standby's answer lacks the write and says its data is
// older than zero, that consistency=strong has it, and that the standby
// has it once replay resumes.
func checkPausedReplay(t *testing.T, api *testClient, pair *pgtest.Pair, orch, oncall string) {
	t.Helper()
	standby := standbyConn(t, pair)
	if _, err := standby.Exec(t.Context(), "SELECT pg_wal_replay_pause()"); err != nil {
		t.Fatalf("pause replay: %v", err)
	}
	time.Sleep(1100 * time.Millisecond) // the last replayed commit ages
	second := createHeld(t, api, orch, "standby-read-2")
	held := "/v1/obligations?state=held"
	stale := api.do(t.Context(), http.MethodGet, held, oncall, nil)
	age := checkFreshness(t, stale, "standby")
	if age < 1 {
		t.Errorf("replay paused: Quittance-Data-Age %v, want at least 1 s", age)
	}
	if slices.Contains(obligationIDs(t, stale), second) {
		t.Errorf("replay paused, yet the standby lists %s", second)
	}
	metrics := api.do(t.Context(), http.MethodGet, "/metrics", "", nil)
	if m := replayLag.FindSubmatch(metrics.body); m == nil {
		t.Errorf("no quittance_read_replay_lag_seconds in /metrics")
	} else if lag, err := strconv.ParseFloat(string(m[1]), 64); err != nil || lag < 1 {
		t.Errorf("replay paused: quittance_read_replay_lag_seconds %s, want at least 1", m[1])
	}
	if !slices.Contains(obligationIDs(t, api.do(t.Context(), http.MethodGet, held+"&consistency=strong", oncall, nil)), second) {
		t.Errorf("consistency=strong lacks %s, written before it", second)
	}
	if _, err := standby.Exec(t.Context(), "SELECT pg_wal_replay_resume()"); err != nil {
		t.Fatalf("resume replay: %v", err)
	}
	// Caught up, the standby lists it and its data age is back to 0 (while
	// WAL it received is not yet replayed, the age is the time since the
	// last commit it replayed, an upper bound).
	caught := getUntil(t, api, held, oncall, func(r apiResult) bool {
		return slices.Contains(obligationIDs(t, r), second) && r.header.Get("Quittance-Data-Age") == "0"
	})
	checkFreshness(t, caught, "standby")
}

func standbyConn(t *testing.T, pair *pgtest.Pair) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), pair.Standby.URL(pair.Database))
	if err != nil {
		t.Fatalf("connect to the standby: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// createHeld records a delegation as the orchestrator and reads it back;
// it returns its id.
func createHeld(t *testing.T, api *testClient, orch, op string) string {
	t.Helper()
	var d delegationView
	api.must(t, http.MethodPost, "/v1/delegations", orch, createBody(op), &d, http.StatusCreated)
	var back delegationView
	api.must(t, http.MethodGet, "/v1/delegations/"+d.ID, orch, nil, &back, http.StatusOK)
	if back.ID != d.ID || back.BusinessOperationID != op {
		t.Fatalf("created %+v, read back %+v", d, back)
	}
	return d.ID
}

// getUntil sends GET path until done accepts the answer, for 10 s.
func getUntil(t *testing.T, api *testClient, path, token string, done func(apiResult) bool) apiResult {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		res := api.do(t.Context(), http.MethodGet, path, token, nil)
		if res.ok() && done(res) {
			return res
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: still %v", path, res)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkFreshness checks that res is a 200 served from `from` and returns
// its data age in seconds.
func checkFreshness(t *testing.T, res apiResult, from string) float64 {
	t.Helper()
	if res.err != nil || res.status != http.StatusOK {
		t.Errorf("want 200 from the %s, got %v", from, res)
		return 0
	}
	if got := res.header.Get("Quittance-Read-From"); got != from {
		t.Errorf("Quittance-Read-From %q, want %q", got, from)
	}
	age, err := strconv.ParseFloat(res.header.Get("Quittance-Data-Age"), 64)
	if err != nil || age < 0 || (from == "primary" && age != 0) {
		t.Errorf("Quittance-Data-Age %q from the %s", res.header.Get("Quittance-Data-Age"), from)
	}
	return age
}

func obligationList(t *testing.T, res apiResult) []map[string]any {
	t.Helper()
	var body struct {
		Obligations []map[string]any `json:"obligations"`
	}
	if err := json.Unmarshal(res.body, &body); err != nil {
		t.Fatalf("decode %s: %v", res.body, err)
	}
	return body.Obligations
}

func obligationIDs(t *testing.T, res apiResult) []string {
	t.Helper()
	var ids []string
	for _, o := range obligationList(t, res) {
		ids = append(ids, o["delegation_id"].(string))
	}
	return ids
}

// obligationRows are the listed obligations without their ages, which are
// measured at each answer's time.
func obligationRows(t *testing.T, res apiResult) []string {
	t.Helper()
	var rows []string
	for _, o := range obligationList(t, res) {
		rows = append(rows, o["delegation_id"].(string)+" "+o["obligation_state"].(string)+" "+strconv.FormatFloat(o["amount_minor"].(float64), 'f', -1, 64))
	}
	return rows
}

// summaryRows is a summary answer without its as_of.
func summaryRows(t *testing.T, res apiResult) string {
	t.Helper()
	var body map[string]json.RawMessage
	if err := json.Unmarshal(res.body, &body); err != nil {
		t.Fatalf("decode %s: %v", res.body, err)
	}
	delete(body, "as_of")
	b, _ := json.Marshal(body)
	return string(b)
}

var unavailableFallbacks = regexp.MustCompile(`(?m)^quittance_read_fallbacks_total\{reason="unavailable"\} (\S+)`)

// readFallbacks is the service's count of reads that fell back to the
// primary because the standby was unavailable.
func readFallbacks(t *testing.T, api *testClient) float64 {
	t.Helper()
	res := api.do(t.Context(), http.MethodGet, "/metrics", "", nil)
	m := unavailableFallbacks.FindSubmatch(res.body)
	if !res.ok() || m == nil {
		t.Fatalf("GET /metrics: no quittance_read_fallbacks_total{reason=\"unavailable\"}: %v", res)
	}
	n, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestServeRefusesABadReadURL: a QUITTANCE_READ_DATABASE_URL that is no
// PostgreSQL URL stops serve before anything starts (exit 2), with a
// reason that names the variable and not its value (it may hold a
// password).
func TestServeRefusesABadReadURL(t *testing.T) {
	t.Parallel()
	const bad = "postgres://app:s3cret@db:notaport/quittance"
	env := map[string]string{
		"DATABASE_URL": "postgres://127.0.0.1:1/none", "QUITTANCE_ADDR": "127.0.0.1:0", "QUITTANCE_CHECKPOINTS": "off",
		"QUITTANCE_READ_DATABASE_URL": bad,
	}
	err := run(t.Context(), []string{"serve"}, func(k string) string { return env[k] }, io.Discard, io.Discard)
	if err == nil || exitCode(err) != exitUsage || !strings.Contains(err.Error(), "QUITTANCE_READ_DATABASE_URL") || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("serve: %v (exit %d), want exit %d naming QUITTANCE_READ_DATABASE_URL without its password", err, exitCode(err), exitUsage)
	}
}
