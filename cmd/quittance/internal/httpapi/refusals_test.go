package httpapi_test

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/report"
)

// TestRefusedTokensAnswerIdentically: what an attacker can learn from the
// public evidence endpoints without a registered key. A garbage token, a
// token signed by a forged key for a real task, one naming an unknown
// task, one from a revoked org (validly signed, for its real delegation)
// and a tampered token for a real task all get the same status and the
// same bytes — nothing tells an existing org, task or delegation from a
// missing or revoked one.
func TestRefusedTokensAnswerIdentically(t *testing.T) {
	t.Parallel()
	e := newCompEnv(t)
	real := e.pending(t, orgB, 1_000)
	revoked := e.pending(t, orgC, 1_000)
	e.Do(t, http.MethodPost, "/admin/v1/orgs/"+orgC+"/revoke-identity", e.OncallToken, map[string]any{"reason": "key leaked"}).Expect(t, http.StatusOK)
	forger := compensationtest.NewEd25519Signer(t, e.b.KeyID())

	tokens := map[string]string{
		"garbage":                    "garbage." + strings.Repeat("A", 40) + ".x",
		"forged key, real task":      forger.Sign(t, ackTyp, e.ackClaims(real)),
		"real key, unknown task":     e.b.Sign(t, ackTyp, with(e.ackClaims(real), "sub", "task-that-does-not-exist")),
		"revoked org, real task":     e.c.Sign(t, ackTyp, e.ackClaims(revoked)),
		"tampered token, real task":  flipLast(e.ack(t, real)),
		"unregistered org, any task": forger.Sign(t, ackTyp, with(e.ackClaims(real), "iss", "org-nobody")),
	}
	bodies := map[string]string{}
	for name, token := range tokens {
		r := e.post(t, acksPath, token)
		if r.Status != http.StatusUnauthorized {
			t.Errorf("%s: status %d: %s", name, r.Status, r.Body)
		}
		var p httpapi.Problem
		if err := json.Unmarshal(r.Body, &p); err != nil {
			t.Fatalf("%s: %v: %s", name, err, r.Body)
		}
		p.Instance = "" // the only member that may differ between two answers
		b, _ := json.Marshal(p)
		bodies[name] = string(b)
		if r.Header.Get("Content-Type") != "application/problem+json" || r.Header.Get(httpapi.EvidenceOutcomeHeader) != "" {
			t.Errorf("%s: headers %v", name, r.Header)
		}
	}
	want := bodies["garbage"]
	if !strings.Contains(want, `"code":"token_refused"`) {
		t.Fatalf("garbage token answered %s", want)
	}
	for name, b := range bodies {
		if b != want {
			t.Errorf("%s answered\n%s\nbut a garbage token\n%s", name, b, want)
		}
	}
	// Nothing was recorded on either chain; both are still open.
	for _, d := range []httpapi.DelegationBody{real, revoked} {
		for _, ev := range e.Events(t, e.OncallToken, d.ID) {
			if ev.Type == ledger.EventTypeTokenRefused {
				t.Errorf("delegation %s got a %s event", d.ID, ev.Type)
			}
		}
	}
	counts := e.refusalCounts(t)
	for k, n := range map[[2]string]int64{
		{"", compensation.CodeTokenMalformed}:           1,
		{orgB, compensation.CodeTokenSignatureInvalid}:  2,
		{orgB, compensation.CodeTokenDelegationUnknown}: 1,
		{orgC, compensation.CodeTokenOrgRevoked}:        1,
		{"", compensation.CodeTokenOrgUnknown}:          1,
	} {
		if counts[k] != n {
			t.Errorf("refusals %v: %d, want %d (all: %v)", k, counts[k], n, counts)
		}
	}
	e.CheckInvariants(t)
}

// TestGarbageTokensAppendNoEvents: 200 garbage tokens naming a real
// delegation's org and task leave its chain as it was (so nothing fans
// out to webhooks either); they are counted for (org, reason), in the
// database and in Prometheus, and the last ten are kept as samples by
// sha256 with the client address, listed in /v1/anomalies.
func TestGarbageTokensAppendNoEvents(t *testing.T) {
	t.Parallel()
	e := newCompEnv(t)
	d := e.pending(t, orgB, 1_000)
	forger := compensationtest.NewEd25519Signer(t, e.b.KeyID())
	before := e.state(t, d.ID)
	chain := e.Events(t, e.OncallToken, d.ID)

	const n = 200
	var last []string
	for i := range n {
		token := forger.Sign(t, ackTyp, with(e.ackClaims(d), "receipt_id", fmt.Sprintf("rcpt-forged-%d", i)))
		refusedUniformly(t, e.post(t, acksPath, token))
		last = append(last, sha(token))
	}
	if after := e.state(t, d.ID); after != before {
		t.Fatalf("garbage tokens changed the delegation: %+v -> %+v", before, after)
	}
	if got := e.Events(t, e.OncallToken, d.ID); len(got) != len(chain) || got[len(got)-1].Hash != chain[len(chain)-1].Hash {
		t.Fatalf("the chain grew from %d to %d events", len(chain), len(got))
	}

	var out struct {
		Anomalies     []httpapi.AnomalyBody       `json:"anomalies"`
		RefusedTokens []httpapi.RefusedTokensBody `json:"refused_tokens"`
	}
	e.Do(t, http.MethodGet, "/v1/anomalies", e.OncallToken, nil).Expect(t, http.StatusOK).JSON(t, &out)
	for _, a := range out.Anomalies {
		if a.Kind == string(report.AnomalyRefusedToken) {
			t.Errorf("a refused token listed as an event anomaly: %+v", a)
		}
	}
	if len(out.RefusedTokens) != 1 {
		t.Fatalf("refused_tokens %+v, want one (org, reason)", out.RefusedTokens)
	}
	r := out.RefusedTokens[0]
	if r.OrgID != orgB || !r.OrgRegistered || r.Reason != compensation.CodeTokenSignatureInvalid || r.Refused != n {
		t.Fatalf("refused_tokens %+v", r)
	}
	if len(r.Samples) != report.TokenRefusalSampleSize {
		t.Fatalf("%d samples, want %d", len(r.Samples), report.TokenRefusalSampleSize)
	}
	kept := map[string]bool{}
	for _, s := range r.Samples {
		kept[s.TokenSHA256] = true
		if s.ClientAddress != "127.0.0.1" || s.Kind != ackTyp || s.ClaimedIssuer != orgB || s.TokenBytes == 0 {
			t.Errorf("sample %+v", s)
		}
	}
	for _, sum := range last[n-report.TokenRefusalSampleSize:] {
		if !kept[sum] {
			t.Errorf("the sample ring lost one of the last %d tokens (%s): %v", report.TokenRefusalSampleSize, sum, kept)
		}
	}

	expected := `
# HELP quittance_evidence_tokens_refused_total Signed acks and declarations refused at the public evidence endpoints, by org (a registered org's id, else "unknown") and server-side reason (the refusal code).
# TYPE quittance_evidence_tokens_refused_total counter
quittance_evidence_tokens_refused_total{org="org-b",reason="token_signature_invalid"} 200
`
	if err := testutil.GatherAndCompare(e.Registry, strings.NewReader(expected), "quittance_evidence_tokens_refused_total"); err != nil {
		t.Fatal(err)
	}
	if v := evidenceCounter(t, e.Env, "ack", "refused"); v != n {
		t.Fatalf("quittance_evidence_total{kind=ack,result=refused} = %v, want %d", v, n)
	}
	e.CheckInvariants(t)
}

// evidenceCounter is the quittance_evidence_total series of kind and result.
func evidenceCounter(t *testing.T, e *apitest.Env, kind, result string) float64 {
	t.Helper()
	families, err := e.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "quittance_evidence_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["kind"] == kind && labels["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no quittance_evidence_total{kind=%q,result=%q}", kind, result)
	return 0
}

// TestEvidenceFloodRateLimited: the public evidence endpoints are limited
// per client address. A flood of garbage tokens gets 429 once the
// address's burst is spent, and so does a flood that sends a different
// random bearer token with each request (each would get a fresh bucket if
// buckets were per credential); requests refused by the limiter never
// reach the ledger, so they are not counted as refused tokens.
func TestEvidenceFloodRateLimited(t *testing.T) {
	t.Parallel()
	const burst = 30
	flood := func(t *testing.T, e *compEnv, send func(i int) *apitest.Response) (passed int) {
		t.Helper()
		for i := range 3 * burst {
			r := send(i)
			if r.Status == http.StatusTooManyRequests {
				r.Problem(t, http.StatusTooManyRequests, "rate_limited")
				if r.Header.Get("Retry-After") == "" {
					t.Fatalf("429 without Retry-After: %v", r.Header)
				}
				if passed == 0 || passed > burst {
					t.Fatalf("limited after %d requests, burst %d", passed, burst)
				}
				// Limited it stays: the bucket refills at 0.001/s.
				for j := range 5 {
					if r := send(i + 1 + j); r.Status != http.StatusTooManyRequests {
						t.Fatalf("request after the limit: %d %s", r.Status, r.Body)
					}
				}
				return passed
			}
			refusedUniformly(t, r)
			passed++
		}
		t.Fatalf("%d requests were never rate limited", 3*burst)
		return 0
	}
	limit := apitest.WithRateLimit(httpapi.RateLimit{RPS: 0.001, Burst: burst})

	t.Run("garbage tokens", func(t *testing.T) {
		t.Parallel()
		e := newCompEnv(t, limit)
		passed := flood(t, e, func(i int) *apitest.Response {
			return e.post(t, acksPath, fmt.Sprintf("garbage-%d", i))
		})
		if n := e.refusalCounts(t)[[2]string{"", compensation.CodeTokenMalformed}]; n != int64(passed) {
			t.Fatalf("%d refusals counted, %d requests reached the ledger", n, passed)
		}
	})
	t.Run("random bearer tokens", func(t *testing.T) {
		t.Parallel()
		e := newCompEnv(t, limit)
		d := e.pending(t, orgB, 1_000)
		forger := compensationtest.NewEd25519Signer(t, e.b.KeyID())
		flood(t, e, func(int) *apitest.Response {
			secret := make([]byte, 16)
			_, _ = rand.Read(secret)
			req, err := http.NewRequest(http.MethodPost, e.URL+declsPath, strings.NewReader(forger.Sign(t, declTyp, e.declClaims(d))))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/jose")
			req.Header.Set("Authorization", "Bearer qt_"+hex.EncodeToString(secret))
			return e.Send(t, req)
		})
		// The same address is limited on the authenticated API too,
		// whatever bearer it makes up.
		e.Do(t, http.MethodGet, "/v1/obligations", "qt_made-up", nil).Problem(t, http.StatusTooManyRequests, "rate_limited")
	})
}

// TestRemoteTaskIDsPerTenant: a remote task id is unique per (org,
// tenant). Two tenants record the same task id of one org and neither is
// told about the other; evidence for it discharges only the delegation
// whose compensation idempotency key it carries; a declaration without a
// key is refused (told: the org signed it) rather than guessed; the shared
// id is listed as an anomaly for on-call; and one tenant still cannot
// record the same task twice.
func TestRemoteTaskIDsPerTenant(t *testing.T) {
	t.Parallel()
	e := newCompEnv(t)
	globex := e.NewOrchestrator(t, "globex")
	const task = "task-shared"
	create := func(token, op string) httpapi.DelegationBody {
		req := apitest.NewCreateRequest(op, orgB, "procurement", budgetID, 2_000, "EUR")
		req.Remote.TaskID = task
		d := e.CreateDelegation(t, token, req)
		return e.ReportStatus(t, token, d.ID, "TASK_STATE_CANCELED", time.Time{})
	}
	acme := create(e.orch, "op-acme")
	glob := create(globex, "op-globex")
	if acme.Remote.TaskID != task || glob.Remote.TaskID != task || acme.Compensation.IdempotencyKey == glob.Compensation.IdempotencyKey {
		t.Fatalf("delegations %+v and %+v", acme, glob)
	}
	// Neither tenant sees the other's delegation.
	e.Do(t, http.MethodGet, "/v1/delegations/"+glob.ID, e.orch, nil).Problem(t, http.StatusNotFound, "not_found")
	e.Do(t, http.MethodGet, "/v1/delegations/"+acme.ID, globex, nil).Problem(t, http.StatusNotFound, "not_found")
	// The same tenant cannot record the task twice.
	again := apitest.NewCreateRequest("op-acme-2", orgB, "procurement", budgetID, 2_000, "EUR")
	again.Remote.TaskID = task
	e.Do(t, http.MethodPost, "/v1/delegations", e.orch, again).Problem(t, http.StatusConflict, "remote_task_taken")

	var out struct {
		SharedRemoteTasks []httpapi.SharedRemoteTaskBody `json:"shared_remote_tasks"`
	}
	e.Do(t, http.MethodGet, "/v1/anomalies?kind=shared_remote_task", e.OncallToken, nil).Expect(t, http.StatusOK).JSON(t, &out)
	if len(out.SharedRemoteTasks) != 1 || out.SharedRemoteTasks[0].RemoteTaskID != task || out.SharedRemoteTasks[0].OrgID != orgB ||
		len(out.SharedRemoteTasks[0].DelegationIDs) != 2 || !slices.Contains(out.SharedRemoteTasks[0].Tenants, "globex") {
		t.Fatalf("shared_remote_tasks %+v", out.SharedRemoteTasks)
	}

	acmeBefore, globBefore := e.state(t, acme.ID), e.state(t, glob.ID)
	// A declaration naming the task but no key matches neither.
	e.post(t, declsPath, e.declaration(t, glob)).Problem(t, http.StatusUnprocessableEntity, compensation.CodeTokenIdempotencyKeyRequired)
	// A key of neither: the same answer as for a lone delegation.
	e.post(t, acksPath, e.b.Sign(t, ackTyp, with(e.ackClaims(glob), "idempotency_key", "qc_00000000000000000000000000000000"))).
		Problem(t, http.StatusUnprocessableEntity, compensation.CodeTokenIdempotencyKeyMismatch)
	if a, g := e.state(t, acme.ID), e.state(t, glob.ID); a != acmeBefore || g != globBefore {
		t.Fatalf("refused evidence changed something: %+v %+v", a, g)
	}

	// globex's ack discharges globex's delegation only.
	got := e.accept(t, acksPath, e.ack(t, glob), "applied")
	if got.ID != glob.ID || got.ObligationState != string(ledger.ObligationCompensated) {
		t.Fatalf("globex's ack applied to %+v", got.DelegationBody)
	}
	if a := e.state(t, acme.ID); a.Obligation != acmeBefore.Obligation || a.Version != acmeBefore.Version || a.Events != acmeBefore.Events {
		t.Fatalf("acme's delegation changed: %+v -> %+v", acmeBefore, a)
	}
	// And a declaration carrying acme's key releases acme's.
	decl := e.b.Sign(t, declTyp, with(e.declClaims(acme), "idempotency_key", acme.Compensation.IdempotencyKey))
	if got := e.accept(t, declsPath, decl, "applied"); got.ID != acme.ID || got.ObligationState != string(ledger.ObligationReleased) {
		t.Fatalf("acme's declaration applied to %+v", got.DelegationBody)
	}
	e.CheckInvariants(t)
}

// TestDispatchGetsTaskIDAnotherTenantRecorded: another tenant recorded a
// task id of the org first (record mode, its orchestrator's word); a
// dispatch of this tenant to which the agent reports that same id still
// gets it, with no remote_task_conflict and no stuck hold.
func TestDispatchGetsTaskIDAnotherTenantRecorded(t *testing.T) {
	t.Parallel()
	const task = "t-squatted"
	agent := startRawAgent(t, &rawAgent{handle: func(string, int, json.RawMessage) (any, *rawRPCError, bool) {
		return workingTask(task), nil, false
	}})
	e := newA2AEnv(t, apitest.Worker{NoPush: true})
	e.putOrg(t, "squatted", agent.cardURL, http.StatusCreated)
	squatter := e.NewOrchestrator(t, "globex")
	req := apitest.NewCreateRequest("po-squat", "squatted", "procurement", "ops", 100, "EUR")
	req.Remote.TaskID = task
	e.CreateDelegation(t, squatter, req)

	d := e.dispatch(t, "po-dispatched", "squatted")
	got := e.waitFor(t, d.ID, "the dispatch", func(d httpapi.DelegationBody) bool { return d.Remote.TaskID != "" })
	if got.Remote.TaskID != task || got.ObligationState != "held" || got.HoldState != "active" {
		t.Fatalf("after the dispatch: %+v", got)
	}
	if n := countEvents(e.events(t, d.ID), ledger.EventTypeRemoteTaskConflict); n != 0 {
		t.Fatalf("%d remote_task_conflict events", n)
	}
	e.CheckInvariants(t)
}
