package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/internal/jose"
	"github.com/quittance/quittance/ledger"
)

// batchResult is one item's answer in a batch, as a client reads it.
type batchResult struct {
	Status     int                     `json:"status"`
	Delegation *httpapi.DelegationBody `json:"delegation"`
	ID         string                  `json:"id"`
	Evidence   *struct {
		Outcome string `json:"outcome"`
	} `json:"evidence"`
	Problem json.RawMessage `json:"problem"`
}

// batch posts body to path with token, expects 200 and one result per
// item, and returns the results.
func batch(t *testing.T, e *apitest.Env, path, token string, body any, items int) []batchResult {
	t.Helper()
	var out struct {
		Results []batchResult `json:"results"`
	}
	e.Do(t, http.MethodPost, path, token, body).Expect(t, http.StatusOK).JSON(t, &out)
	if len(out.Results) != items {
		t.Fatalf("%s: %d results for %d items", path, len(out.Results), items)
	}
	return out.Results
}

// sameProblem fails unless a batch item's problem is, member for member,
// the body the single call answered (which must be a problem of the same
// status).
func sameProblem(t *testing.T, what string, got batchResult, single *apitest.Response) {
	t.Helper()
	if got.Status != single.Status || !strings.HasPrefix(single.Header.Get("Content-Type"), "application/problem+json") {
		t.Fatalf("%s: batch status %d, single call %d %s", what, got.Status, single.Status, single.Body)
	}
	var a, b map[string]any
	if err := json.Unmarshal(got.Problem, &a); err != nil {
		t.Fatalf("%s: problem %s: %v", what, got.Problem, err)
	}
	if err := json.Unmarshal(single.Body, &b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("%s: batch problem\n  %s\nsingle call\n  %s", what, got.Problem, single.Body)
	}
}

// TestBatchDelegations: a batch mixing creates, repeats (of an earlier
// call and within the batch), an idempotency mismatch, validation errors,
// a budget the tenant may not hold on and a hot budget that runs out
// mid-batch answers each item as the single create would, in request
// order: exactly the right number of holds refused for insufficient funds,
// and the budget holds exactly what the accepted items hold.
func TestBatchDelegations(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	e.PutOrg(t, "org-b", false)
	orch := e.NewOrchestrator(t, "acme")
	e.PutBudget(t, "hot", "EUR", 10_000)
	e.PutBudget(t, "roomy", "EUR", 1_000_000)
	e.PutBudgetFor(t, "globex-only", "EUR", 1_000_000, "globex")
	req := func(op, budget string, amount int64) apitest.CreateRequest {
		return apitest.NewCreateRequest(op, "org-b", "procurement", budget, amount, "EUR")
	}
	earlier := e.CreateDelegation(t, orch, req("earlier", "hot", 100))

	badCurrency := map[string]any{"business_operation_id": "bad-currency", "org_id": "org-b", "task_class": "procurement",
		"budget_id": "roomy", "hold": map[string]any{"amount_minor": 1, "currency": "eur"}, "remote": map[string]any{"task_id": "t-bad"}}
	noOp := map[string]any{"org_id": "org-b", "task_class": "procurement", "budget_id": "roomy",
		"hold": map[string]any{"amount_minor": 1, "currency": "EUR"}, "remote": map[string]any{"task_id": "t-noop"}}
	items := []any{
		req("earlier", "hot", 100),         // 0: a repeat of an earlier call
		req("twice", "roomy", 300),         // 1: created
		req("twice", "roomy", 300),         // 2: its repeat within the batch
		req("twice", "roomy", 301),         // 3: the same id, another request
		badCurrency,                        // 4: a schema violation
		noOp,                               // 5: a missing field
		req("foreign", "globex-only", 100), // 6: a budget acme may not hold on
		req("zero", "roomy", 0),            // 7: the service's validation
		json.RawMessage(`"not an object"`), // 8: not a create body at all
	}
	const hot = 12 // holds of 1,000 on a budget with 9,900 left: 9 fit
	for i := range hot {
		items = append(items, req(fmt.Sprintf("hot-%d", i), "hot", 1_000))
	}
	results := batch(t, e, "/v1/delegations/batch", orch, map[string]any{"delegations": items}, len(items))

	if r := results[0]; r.Status != http.StatusOK || r.Delegation == nil || r.Delegation.ID != earlier.ID {
		t.Fatalf("repeat of an earlier call: %+v", r)
	}
	if r := results[1]; r.Status != http.StatusCreated || r.Delegation == nil || r.Delegation.BusinessOperationID != "twice" {
		t.Fatalf("a new item: %+v %s", r, r.Problem)
	}
	if r := results[2]; r.Status != http.StatusOK || r.Delegation == nil || r.Delegation.ID != results[1].Delegation.ID {
		t.Fatalf("a repeat within the batch: %+v", r)
	}
	// Every refused item's problem is the single create's, member for member.
	for _, i := range []int{3, 4, 5, 6, 7, 8} {
		single := e.Do(t, http.MethodPost, "/v1/delegations", orch, items[i])
		sameProblem(t, fmt.Sprintf("item %d", i), results[i], single)
	}
	for i, want := range map[int]string{3: "idempotency_mismatch", 4: "validation_failed", 5: "validation_failed", 6: "budget_not_found", 7: "validation_failed"} {
		var p apitest.Problem
		if err := json.Unmarshal(results[i].Problem, &p); err != nil || p.Code != want {
			t.Errorf("item %d: problem %s, want code %s", i, results[i].Problem, want)
		}
	}
	var bad apitest.Problem
	if err := json.Unmarshal(results[4].Problem, &bad); err != nil || len(bad.Errors) != 1 || bad.Errors[0].Location != "body.hold.currency" {
		t.Errorf("the schema violation does not name body.hold.currency: %s", results[4].Problem)
	}

	accepted, refused := int64(0), 0
	for _, r := range results[len(items)-hot:] {
		switch r.Status {
		case http.StatusCreated:
			accepted += r.Delegation.Hold.AmountMinor
		case http.StatusUnprocessableEntity:
			var p apitest.Problem
			if err := json.Unmarshal(r.Problem, &p); err != nil || p.Code != "insufficient_funds" {
				t.Fatalf("a refused hot hold: %s", r.Problem)
			}
			refused++
		default:
			t.Fatalf("a hot hold: %+v %s", r, r.Problem)
		}
	}
	if refused != 3 || accepted != 9_000 {
		t.Fatalf("hot budget: %d accepted (%d), %d refused; want 9 accepted, 3 refused", accepted/1_000, accepted, refused)
	}
	if b := e.Budget(t, "hot"); b.HeldMinor != earlier.Hold.AmountMinor+accepted || b.AvailableMinor != 10_000-b.HeldMinor {
		t.Fatalf("hot budget holds %d (available %d); the accepted holds are %d", b.HeldMinor, b.AvailableMinor, earlier.Hold.AmountMinor+accepted)
	}
	if b := e.Budget(t, "globex-only"); b.HeldMinor != 0 {
		t.Fatalf("the foreign budget holds %d", b.HeldMinor)
	}
	e.CheckInvariants(t)
}

// TestBatchLimits: a batch holds 1 to 1,000 items; outside that the whole
// request is a 422 naming the field, and nothing is created. The batch is
// authorized as a single create.
func TestBatchLimits(t *testing.T) {
	t.Parallel()
	e := newCompEnv(t)
	one := apitest.NewCreateRequest("limit-1", orgB, "procurement", budgetID, 1, "EUR")
	for _, n := range []int{-1, 0, 1001} { // -1: null
		var items []any
		var tokens []string
		if n >= 0 {
			items, tokens = make([]any, n), make([]string, n)
		}
		for i := range n {
			items[i], tokens[i] = one, "x"
		}
		p := e.Do(t, http.MethodPost, "/v1/delegations/batch", e.orch, map[string]any{"delegations": items}).
			Problem(t, http.StatusUnprocessableEntity, "validation_failed")
		if len(p.Errors) != 1 || p.Errors[0].Location != "body.delegations" {
			t.Errorf("%d items: %+v", n, p)
		}
		p = e.Do(t, http.MethodPost, "/v1/compensation/evidence/batch", "", map[string]any{"tokens": tokens}).
			Problem(t, http.StatusUnprocessableEntity, "validation_failed")
		if len(p.Errors) != 1 || p.Errors[0].Location != "body.tokens" {
			t.Errorf("%d tokens: %+v", n, p)
		}
	}
	e.Do(t, http.MethodPost, "/v1/delegations/batch", e.orch, map[string]any{}).Problem(t, http.StatusUnprocessableEntity, "validation_failed")
	e.Do(t, http.MethodPost, "/v1/delegations/batch", "", map[string]any{"delegations": []any{one}}).
		Problem(t, http.StatusUnauthorized, "unauthenticated")
	finance := e.NewToken(t, ledger.RoleFinance, "", "fin")
	e.Do(t, http.MethodPost, "/v1/delegations/batch", finance, map[string]any{"delegations": []any{one}}).
		Problem(t, http.StatusForbidden, "forbidden")
	if b := e.Budget(t, budgetID); b.HeldMinor != 0 {
		t.Fatalf("refused batches held %d", b.HeldMinor)
	}
	// 1,000 is allowed.
	items := make([]any, 1000)
	for i := range items {
		items[i] = apitest.NewCreateRequest(fmt.Sprintf("many-%d", i), orgB, "procurement", budgetID, 1, "EUR")
	}
	for i, r := range batch(t, e.Env, "/v1/delegations/batch", e.orch, map[string]any{"delegations": items}, 1000) {
		if r.Status != http.StatusCreated {
			t.Fatalf("item %d of 1000: %d %s", i, r.Status, r.Problem)
		}
	}
	if b := e.Budget(t, budgetID); b.HeldMinor != 1000 {
		t.Fatalf("1000 holds of 1 hold %d", b.HeldMinor)
	}
}

// TestBatchEvidence: an evidence batch answers each token as its single
// endpoint would: an ack that applies, the same ack again (a duplicate), a
// forged token (another key) with the uniform 401 token_refused the single
// endpoint gives, a declaration routed by its typ, a token that is no JWS,
// and one over 16 KiB (413 token_too_large, alone).
func TestBatchEvidence(t *testing.T) {
	t.Parallel()
	e := newCompEnv(t)
	acked, forgedFor, declared := e.pending(t, orgB, 1_000), e.pending(t, orgB, 2_000), e.pending(t, orgC, 3_000)
	ack := e.ack(t, acked)
	forger := compensationtest.NewEd25519Signer(t, "b-1") // not registered, reuses org-b's kid
	forged := forger.Sign(t, ackTyp, e.ackClaims(forgedFor))
	tooLarge := strings.Repeat("a", jose.MaxTokenSize+1)
	tokens := []string{ack, ack, forged, e.declaration(t, declared), "not-a-jws", tooLarge}
	results := batch(t, e.Env, "/v1/compensation/evidence/batch", "", map[string]any{"tokens": tokens}, len(tokens))

	for i, want := range map[int]string{0: "applied", 1: "duplicate", 3: "applied"} {
		r := results[i]
		if r.Status != http.StatusOK || r.Evidence == nil || r.Evidence.Outcome != want || r.Problem != nil {
			t.Fatalf("token %d: %+v %s, want outcome %s", i, r, r.Problem, want)
		}
	}
	if results[0].ID != acked.ID || results[3].ID != declared.ID {
		t.Fatalf("answers name %s and %s, want %s and %s", results[0].ID, results[3].ID, acked.ID, declared.ID)
	}
	for _, i := range []int{2, 4} {
		single := e.post(t, acksPath, tokens[i])
		refusedUniformly(t, single)
		sameProblem(t, fmt.Sprintf("token %d", i), results[i], single)
	}
	var p apitest.Problem
	if err := json.Unmarshal(results[5].Problem, &p); err != nil || results[5].Status != http.StatusRequestEntityTooLarge || p.Code != compensation.CodeTokenTooLarge {
		t.Fatalf("the token over 16 KiB: %d %s", results[5].Status, results[5].Problem)
	}
	if got := e.Delegation(t, e.OncallToken, acked.ID); got.ObligationState != "compensated" {
		t.Fatalf("acked delegation is %s", got.ObligationState)
	}
	if got := e.Delegation(t, e.OncallToken, declared.ID); got.ObligationState != "released" {
		t.Fatalf("declared delegation is %s", got.ObligationState)
	}
	if got := e.Delegation(t, e.OncallToken, forgedFor.ID); got.ObligationState != "revocation_pending_compensation" {
		t.Fatalf("the forged token moved its delegation to %s", got.ObligationState)
	}
	e.CheckInvariants(t)
}

// TestBatchEvidenceRateLimit: the evidence batch is rate limited per
// client address like the single endpoints, and counts as one request
// whatever its number of tokens: with a burst of 2, two batches of five
// tokens are answered item by item and the third request is 429.
func TestBatchEvidenceRateLimit(t *testing.T) {
	t.Parallel()
	e := apitest.New(t, apitest.WithRateLimit(httpapi.RateLimit{RPS: 0.001, Burst: 2}))
	tokens := map[string]any{"tokens": []string{"a", "b", "c", "d", "e"}}
	for range 2 {
		for i, r := range batch(t, e, "/v1/compensation/evidence/batch", "", tokens, 5) {
			if r.Status != http.StatusUnauthorized {
				t.Fatalf("token %d: %d %s", i, r.Status, r.Problem)
			}
		}
	}
	r := e.Do(t, http.MethodPost, "/v1/compensation/evidence/batch", "", tokens)
	r.Problem(t, http.StatusTooManyRequests, "rate_limited")
	if r.Header.Get("Retry-After") == "" {
		t.Fatal("429 without Retry-After")
	}
}
