package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/report"
)

// The model test drives the public HTTP API with seeded random operations
// and predicts every answer from an in-memory model of ledger/DESIGN.md §2: the
// status class (and problem code) of each response, and the task_status,
// obligation_state and budget columns it leaves behind. After every step
// it compares the whole database with the model and re-checks the
// invariants of §2.2 straight from the database (pgstore.CheckInvariants:
// conservation, and no hold leaving active without a matching evidence
// row). The operations include early evidence (an ack or a declaration
// while the obligation is held), partial amounts (a hold raised or cut, a
// partial settlement, a partial reversal in an ack) and ambiguous replies
// (a dispatch whose resend is refused after an attempt that may have
// reached the agent: dispatch_unknown, never released).
//
//	QUITTANCE_MODEL_SEED=<n>    replay one seed
//	QUITTANCE_MODEL_STEPS=<n>   steps per seed (default 400)

const (
	modelLedgerID  = "ledger-model"
	modelThreshold = 500 // write-offs above this need a second on-call approver
)

// modelBudget is a budget as the model sees it.
type modelBudget struct {
	id, currency                           string
	funded, avail, held, spent, writtenOff int64
	// tenants may hold on the budget; any other tenant's hold is refused
	// as one on a budget that does not exist.
	tenants []string
}

// modelOrg is a remote org: its key, whether it shares a transaction
// coordinator, whether its identity was revoked.
type modelOrg struct {
	id      string
	signer  *compensationtest.Signer
	shared  bool
	revoked bool
	jtis    []string // jtis of its accepted tokens
}

// modelClass is a task class.
type modelClass struct {
	effectCapable bool
	gateOn        []ledger.TaskStatus
	timeout       time.Duration
}

// modelToken is an accepted evidence token, kept to be re-sent.
type modelToken struct {
	path     string
	token    string
	exp      time.Time
	reversed *int64 // an ack's reversed_amount_minor claim
}

// modelWriteOff is a write-off the model knows of.
type modelWriteOff struct {
	id, delegation, requester, status string
}

// modelDelegation is a delegation as the model sees it.
type modelDelegation struct {
	id, tenant, org, class, budget string
	req                            apitest.CreateRequest
	hold                           int64  // the hold as it stands (PATCH .../hold changes it while held)
	settled, reversed              *int64 // what settling spent, what compensation returned, once ended so
	dispatched                     bool   // dispatched by Quittance to the model's agent; no orchestrator operation picks it
	taskStatus                     ledger.TaskStatus
	taskAt                         time.Time
	// taskUndated: the status applied came without a timestamp (dated
	// on receipt), so it makes no later report stale.
	taskUndated     bool
	obligation      ledger.ObligationState
	compKey         string
	deadline        time.Time
	cancelRequested bool
	dispatchUnknown bool // an ambiguous dispatch: listed as dispatch_unknown, the hold active
	pendingWriteOff *modelWriteOff
	accepted        []modelToken
	evidence        *modelEvidence // accepted under the compensation idempotency key
}

// modelEvidence is the evidence accepted for a delegation's compensation
// idempotency key: what it says (kind and receipt id) and what became of
// it (received, applied, unused).
type modelEvidence struct {
	kind      ledger.ObligationEvent
	receiptID string
	reversed  *int64 // an ack's reversed amount; nil: the whole hold
	status    ledger.EvidenceStatus
}

// model is the world and the expectations.
type model struct {
	t       *testing.T
	env     *apitest.Env
	rng     *rand.Rand
	seed    uint64
	step    int
	log     []string
	orch    map[string]string // tenant → orchestrator token
	oncall  [2]string         // two on-call tokens: oncall and oncall-2
	oncallN [2]string
	budgets []*modelBudget
	orgs    []*modelOrg
	classes map[string]modelClass
	delegs  []*modelDelegation
	byID    map[string]*modelDelegation
	wos     []*modelWriteOff
	rogue   *compensationtest.Signer
	agent   *modelAgent // the A2A agent dispatched delegations go to, once there is one
	ops     map[string]int
	answers map[string]int // predicted status and code → how often

	// What the invariant checks have seen of the event log.
	lastSeq    int64
	lastCount  int64
	streams    map[string][]ledger.Event
	eventState map[string]ledger.ObligationState // delegation id → state its events lead to
}

// modelStates are the task states orchestrators report, in A2A v1.0 and
// v0.3 spellings, grouped so the terminal ones that gate come up often;
// the last group does not parse.
var modelStates = [][]string{
	{"TASK_STATE_CANCELED", "canceled", "cancelled"},
	{"TASK_STATE_CANCELED", "canceled"},
	{"TASK_STATE_FAILED", "failed"},
	{"TASK_STATE_COMPLETED", "completed"},
	{"TASK_STATE_REJECTED", "rejected"},
	{"TASK_STATE_SUBMITTED", "submitted", "TASK_STATE_WORKING", "working"},
	{"TASK_STATE_INPUT_REQUIRED", "input-required", "TASK_STATE_AUTH_REQUIRED", "auth-required"},
	{"TASK_STATE_UNSPECIFIED", "paused", ""},
}

// TestModel runs seeded random sequences of API operations against the
// model, a few seeds of a few hundred steps each; a failure names its seed
// and how to replay it.
func TestModel(t *testing.T) {
	t.Parallel()
	seeds := []uint64{1, 2, uint64(time.Now().UnixNano())}
	if s := os.Getenv("QUITTANCE_MODEL_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("QUITTANCE_MODEL_SEED: %v", err)
		}
		seeds = []uint64{seed}
	}
	steps := 400
	if s := os.Getenv("QUITTANCE_MODEL_STEPS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("QUITTANCE_MODEL_STEPS: %q is not a positive number", s)
		}
		steps = n
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			m := newModel(t, seed)
			for m.step = 1; m.step <= steps; m.step++ {
				m.env.Clock.Advance(time.Second)
				m.randomOp()
				m.checkDatabase()
			}
			if problems := apitest.Violations(context.Background(), m.env); len(problems) > 0 {
				m.fatalf("invariants at the end: %v", problems)
			}
			t.Logf("seed %d: %d steps, %d delegations, %d write-offs; operations %v; answers %v", seed, steps, len(m.delegs), len(m.wos), m.ops, m.answers)
		})
	}
}

// fatalf fails the run with the seed and how to replay it.
func (m *model) fatalf(format string, args ...any) {
	m.t.Helper()
	m.t.Fatalf("seed %d, step %d: %s\nlast operations:\n  %s\nreplay: QUITTANCE_MODEL_SEED=%d go test -run TestModel ./cmd/quittance/internal/httpapi/",
		m.seed, m.step, fmt.Sprintf(format, args...), strings.Join(m.log[max(0, len(m.log)-12):], "\n  "), m.seed)
}

func (m *model) logf(format string, args ...any) {
	m.log = append(m.log, fmt.Sprintf("%d: ", m.step)+fmt.Sprintf(format, args...))
}

func newModel(t *testing.T, seed uint64) *model {
	t.Helper()
	env := apitest.New(t, apitest.WithLedgerID(modelLedgerID), apitest.WithWriteOffThreshold(modelThreshold))
	m := &model{
		t: t, env: env, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x5eed)),
		orch: map[string]string{}, byID: map[string]*modelDelegation{}, ops: map[string]int{}, answers: map[string]int{},
		streams: map[string][]ledger.Event{}, eventState: map[string]ledger.ObligationState{},
		rogue: compensationtest.NewEd25519Signer(t, "x-1"),
		classes: map[string]modelClass{
			"procurement": {true, []ledger.TaskStatus{ledger.StatusCanceled, ledger.StatusFailed}, ledger.DefaultCompensationTimeout},
			"read_only":   {false, []ledger.TaskStatus{ledger.StatusCanceled, ledger.StatusFailed}, ledger.DefaultCompensationTimeout},
			"cancel_only": {true, []ledger.TaskStatus{ledger.StatusCanceled}, 2 * time.Hour},
			// "mystery" is never registered: unknown classes gate (fail safe).
			"mystery": {true, []ledger.TaskStatus{ledger.StatusCanceled, ledger.StatusFailed}, ledger.DefaultCompensationTimeout},
		},
	}
	t.Logf("seed %d (replay with QUITTANCE_MODEL_SEED=%d)", seed, seed)
	env.PutTaskClass(t, "cancel_only", true, []string{"canceled"}, 2*time.Hour)
	for _, b := range []*modelBudget{
		{id: "eur-1", currency: "EUR", funded: 20000, tenants: []string{"acme", "umbrella"}},
		{id: "eur-2", currency: "EUR", funded: 6000, tenants: []string{"acme"}},
		{id: "usd-1", currency: "USD", funded: 12000, tenants: []string{"umbrella"}},
	} {
		env.PutBudgetFor(t, b.id, b.currency, b.funded, b.tenants...)
		b.avail = b.funded
		m.budgets = append(m.budgets, b)
	}
	m.addOrg("org-x", false, compensationtest.NewEd25519Signer(t, "x-1"))
	m.addOrg("org-y", false, compensationtest.NewES256Signer(t, "y-1"))
	m.addOrg("org-z", true, compensationtest.NewEd25519Signer(t, "z-1"))
	for _, tenant := range []string{"acme", "umbrella"} {
		m.orch[tenant] = env.NewOrchestrator(t, tenant)
	}
	m.oncall = [2]string{env.OncallToken, env.NewToken(t, ledger.RoleOncall, "", "oncall-2")}
	m.oncallN = [2]string{"oncall", "oncall-2"}
	m.checkDatabase()
	return m
}

func (m *model) addOrg(id string, shared bool, s *compensationtest.Signer) {
	r := m.env.Do(m.t, http.MethodPut, "/admin/v1/orgs/"+id, m.env.OncallToken,
		map[string]any{"name": "Org " + id, "shared_coordinator": shared, "jwks": json.RawMessage(s.JWKS())})
	if r.Status != http.StatusCreated {
		m.fatalf("register org %s: %d %s", id, r.Status, r.Body)
	}
	m.orgs = append(m.orgs, &modelOrg{id: id, signer: s, shared: shared})
}

func (m *model) org(id string) *modelOrg {
	for _, o := range m.orgs {
		if o.id == id {
			return o
		}
	}
	return nil
}

func (m *model) budget(id string) *modelBudget {
	for _, b := range m.budgets {
		if b.id == id {
			return b
		}
	}
	return nil
}

func (m *model) now() time.Time { return m.env.Clock.Now().UTC().Truncate(time.Microsecond) }

func (m *model) pick(n int) int { return m.rng.IntN(n) }

// someDelegation picks a recorded delegation (never a dispatched one:
// the model's operations speak for the orchestrator and the remote org of
// a delegation in record mode).
func (m *model) someDelegation() *modelDelegation {
	recorded := m.recorded()
	if len(recorded) == 0 {
		return nil
	}
	// Favour recent delegations, which are more likely to be open.
	if m.pick(2) == 0 {
		return recorded[len(recorded)-1-m.pick(min(len(recorded), 6))]
	}
	return recorded[m.pick(len(recorded))]
}

// recorded lists the delegations the orchestrator reports on itself.
func (m *model) recorded() []*modelDelegation {
	var out []*modelDelegation
	for _, d := range m.delegs {
		if !d.dispatched {
			out = append(out, d)
		}
	}
	return out
}

// someIn picks, two times out of three, a delegation in one of states
// (when there is one), and any delegation otherwise.
func (m *model) someIn(states ...ledger.ObligationState) *modelDelegation {
	var in []*modelDelegation
	for _, d := range m.recorded() {
		if slices.Contains(states, d.obligation) {
			in = append(in, d)
		}
	}
	if len(in) > 0 && m.pick(3) != 0 {
		return in[m.pick(len(in))]
	}
	return m.someDelegation()
}

// expectation is what the model predicts of one response.
type expectation struct {
	status int
	code   string // problem code, for 4xx
}

func (m *model) expect(r *apitest.Response, want expectation) {
	m.t.Helper()
	m.answers[fmt.Sprintf("%d %s", want.status, want.code)]++
	if r.Status != want.status {
		m.fatalf("%s: status %d, the model predicts %d %s; body %s", r.Request, r.Status, want.status, want.code, r.Body)
	}
	if r.Status >= 400 {
		var p apitest.Problem
		if err := json.Unmarshal(r.Body, &p); err != nil || p.Code == "" {
			m.fatalf("%s: %d without a problem code: %s", r.Request, r.Status, r.Body)
		}
		if want.code != "" && p.Code != want.code {
			m.fatalf("%s: problem %q, the model predicts %q; body %s", r.Request, p.Code, want.code, r.Body)
		}
	}
}

// checkBody compares a delegation in a response with the model.
func (m *model) checkBody(r *apitest.Response, d *modelDelegation, body httpapi.DelegationBody) {
	m.t.Helper()
	if body.ID != d.id || body.TaskStatus != string(d.taskStatus) || body.ObligationState != string(d.obligation) {
		m.fatalf("%s: delegation %s is %s/%s, the model says %s/%s", r.Request, body.ID, body.TaskStatus, body.ObligationState, d.taskStatus, d.obligation)
	}
	if want := string(d.obligation.Hold()); body.HoldState != want {
		m.fatalf("%s: hold_state %s, want %s", r.Request, body.HoldState, want)
	}
	if body.Hold.AmountMinor != d.hold || amountText(body.SettledAmountMinor) != amountText(d.settled) || amountText(body.ReversedAmountMinor) != amountText(d.reversed) {
		m.fatalf("%s: hold %d, settled %s, reversed %s; the model says %d, %s, %s", r.Request, body.Hold.AmountMinor,
			amountText(body.SettledAmountMinor), amountText(body.ReversedAmountMinor), d.hold, amountText(d.settled), amountText(d.reversed))
	}
}

// amountText is an optional amount as text, "none" when absent.
func amountText(n *int64) string {
	if n == nil {
		return "none"
	}
	return strconv.FormatInt(*n, 10)
}

// move moves d's obligation to state to, and its hold with it when the
// hold leaves active: settled spends the settled amount (the whole hold
// unless the report named one) and returns the rest; compensated returns
// the reversed amount (the whole hold unless the ack named one) and spends
// the rest; released returns it all; written_off writes it all off.
func (m *model) move(d *modelDelegation, to ledger.ObligationState) {
	from := d.obligation
	d.obligation = to
	if from.Hold() != ledger.HoldActive || to.Hold() == ledger.HoldActive {
		return
	}
	b, hold := m.budget(d.budget), d.hold
	b.held -= hold
	switch to {
	case ledger.ObligationSettled:
		if d.settled == nil {
			d.settled = &hold
		}
		b.spent += *d.settled
		b.avail += hold - *d.settled
	case ledger.ObligationCompensated:
		if d.reversed == nil {
			d.reversed = &hold
		}
		b.avail += *d.reversed
		b.spent += hold - *d.reversed
	case ledger.ObligationReleased:
		b.avail += hold
	case ledger.ObligationWrittenOff:
		b.writtenOff += hold
	case ledger.ObligationHeld, ledger.ObligationRevocationPendingCompensation, ledger.ObligationCompensationUnconfirmed, ledger.ObligationEscalated:
		m.fatalf("move to %s: not an end", to)
	}
}

// randomOp runs one random operation and checks its answer.
func (m *model) randomOp() {
	n := m.pick(100)
	switch {
	case n < 16 || len(m.recorded()) == 0:
		m.opCreate()
	case n < 20:
		m.opCreateRetry()
	case n < 39:
		m.opReport()
	case n < 44:
		m.opChangeHold()
	case n < 47:
		m.opCancel()
	case n < 56:
		m.opEvidence(true)
	case n < 61:
		m.opEvidence(false)
	case n < 64:
		m.opResend()
	case n < 70:
		m.opForged()
	case n < 76:
		m.opAdvanceAndSweep()
	case n < 77:
		m.opRevoke()
	case n < 87:
		m.opWriteOff()
	case n < 94:
		m.opApprove()
	case n < 96:
		m.opFund()
	case n < 97:
		m.opDispatch()
	case n < 98:
		m.opDispatchedWord()
	default:
		m.opWrongPrincipal()
	}
}

func (m *model) opCreate() {
	m.ops["create"]++
	tenant := []string{"acme", "umbrella"}[m.pick(2)]
	b := m.budgets[m.pick(len(m.budgets))]
	orgID := m.orgs[m.pick(len(m.orgs))].id
	if m.pick(3) == 0 {
		orgID = m.orgs[len(m.orgs)-1].id // the newest org is never revoked yet
	}
	class := []string{"procurement", "procurement", "read_only", "cancel_only", "mystery"}[m.pick(5)]
	currency := b.currency
	budgetID := b.id
	switch m.pick(25) {
	case 0:
		currency = map[string]string{"EUR": "USD", "USD": "EUR"}[currency]
	case 1:
		orgID = "org-unknown"
	case 2:
		budgetID = "budget-unknown"
	}
	op := fmt.Sprintf("op-%d", m.step)
	req := apitest.NewCreateRequest(op, orgID, class, budgetID, int64(1+m.pick(800)), currency)
	r := m.env.Do(m.t, http.MethodPost, "/v1/delegations", m.orch[tenant], req)

	o, budget := m.org(orgID), m.budget(budgetID)
	var want expectation
	switch {
	case budget == nil || !slices.Contains(budget.tenants, tenant):
		want = expectation{http.StatusUnprocessableEntity, "budget_not_found"}
	case o == nil:
		want = expectation{http.StatusUnprocessableEntity, "org_not_found"}
	case o.revoked:
		want = expectation{http.StatusConflict, "org_identity_revoked"}
	case budget.currency != currency:
		want = expectation{http.StatusConflict, "currency_mismatch"}
	case budget.avail < req.Hold.AmountMinor:
		want = expectation{http.StatusUnprocessableEntity, "insufficient_funds"}
	default:
		want = expectation{http.StatusCreated, ""}
	}
	m.logf("create %s %s/%s/%s %d %s → %d", tenant, orgID, class, budgetID, req.Hold.AmountMinor, currency, r.Status)
	m.expect(r, want)
	if r.Status != http.StatusCreated {
		return
	}
	var body httpapi.DelegationBody
	r.JSON(m.t, &body)
	d := &modelDelegation{
		id: body.ID, tenant: tenant, org: orgID, class: class, budget: budgetID, req: req, hold: req.Hold.AmountMinor,
		taskStatus: ledger.StatusUnknown, obligation: ledger.ObligationHeld,
	}
	budget.avail -= req.Hold.AmountMinor
	budget.held += req.Hold.AmountMinor
	m.delegs = append(m.delegs, d)
	m.byID[d.id] = d
	m.checkBody(r, d, body)
}

func (m *model) opCreateRetry() {
	m.ops["create-retry"]++
	d := m.someDelegation()
	req := d.req
	changed := m.pick(3) == 0
	if changed {
		req.Hold.AmountMinor++
	}
	r := m.env.Do(m.t, http.MethodPost, "/v1/delegations", m.orch[d.tenant], req)
	m.logf("create retry %s changed=%v → %d", d.id, changed, r.Status)
	if changed {
		m.expect(r, expectation{http.StatusUnprocessableEntity, "idempotency_mismatch"})
		return
	}
	m.expect(r, expectation{http.StatusOK, ""})
	var body httpapi.DelegationBody
	r.JSON(m.t, &body)
	m.checkBody(r, d, body)
}

func (m *model) opReport() {
	m.ops["report"]++
	d := m.someIn(ledger.ObligationHeld)
	group := modelStates[m.pick(len(modelStates))]
	raw := group[m.pick(len(group))]
	body := map[string]any{"state": raw}
	at, undated := m.now(), true
	if m.pick(4) != 0 {
		// A remote timestamp, sometimes older than the last applied one.
		undated = false
		at = m.now().Add(time.Duration(m.pick(700)-600) * time.Second)
		body["timestamp"] = at.Format(time.RFC3339Nano)
	}
	// What the work cost, often on a completed report and now and then on
	// another (refused): within the hold, all of it, nothing, or more than
	// the hold (refused).
	var settled *int64
	if st, err := ledger.ParseTaskStatus(raw); (err == nil && st == ledger.StatusCompleted && m.pick(2) == 0) || m.pick(12) == 0 {
		n := []int64{0, int64(m.pick(int(d.hold) + 1)), d.hold, d.hold + 1}[m.pick(4)]
		if d.settled != nil && m.pick(2) == 0 {
			n = *d.settled // a repeat of the report that settled
		}
		settled, body["settled_amount_minor"] = &n, n
	}
	r := m.env.Do(m.t, http.MethodPost, "/v1/delegations/"+d.id+"/task-status", m.orch[d.tenant], body)
	m.logf("report %s (settled %v) %s at %s on %s (%s/%s, hold %d) → %d", raw, body["settled_amount_minor"], d.id, at.Format(time.TimeOnly), d.class, d.taskStatus, d.obligation, d.hold, r.Status)

	if at.After(m.now().Add(compensation.MaxReportSkew)) {
		at = m.now() // a report dated too far ahead is taken as dated now
	}
	st, err := ledger.ParseTaskStatus(raw)
	newStatus := err == nil && !d.taskStatus.Terminal() && (d.taskAt.IsZero() || d.taskUndated || !at.Before(d.taskAt)) && st != d.taskStatus
	switch {
	case err != nil:
		m.expect(r, expectation{http.StatusUnprocessableEntity, "unknown_task_status"})
		return
	case settled != nil && st != ledger.StatusCompleted:
		m.expect(r, expectation{http.StatusUnprocessableEntity, ""})
		return
	case settled != nil && d.obligation != ledger.ObligationHeld && (d.settled == nil || *d.settled != *settled || d.obligation != ledger.ObligationSettled):
		m.ops["report: settlement not applicable"]++
		m.expect(r, expectation{http.StatusConflict, "settlement_not_applicable"})
		return
	case settled != nil && newStatus && d.obligation == ledger.ObligationHeld && *settled > d.hold:
		m.expect(r, expectation{http.StatusUnprocessableEntity, ""})
		return
	}
	m.expect(r, expectation{http.StatusOK, ""})
	if newStatus {
		d.taskStatus, d.taskAt, d.taskUndated = st, at, undated
		if st.Terminal() && d.obligation == ledger.ObligationHeld {
			if st == ledger.StatusCompleted && settled != nil {
				m.ops["report: partial settlement"]++
				d.settled = settled
			}
			m.terminal(d, st)
		}
	}
	var out httpapi.DelegationBody
	r.JSON(m.t, &out)
	m.checkBody(r, d, out)
	// The key is shown in every state, the same from creation on.
	if key := ledger.CompensationKey(ledger.Delegation{ID: uuid.MustParse(d.id)}); out.Compensation == nil || out.Compensation.IdempotencyKey != key {
		m.fatalf("%s: compensation %+v, want key %s", r.Request, out.Compensation, key)
	}
}

// opChangeHold raises or cuts the hold of (mostly) a held obligation: a
// raise needs the budget's available amount, a cut returns the
// difference; once the obligation is not held the hold is fixed.
func (m *model) opChangeHold() {
	m.ops["hold change"]++
	d := m.someIn(ledger.ObligationHeld)
	b := m.budget(d.budget)
	amount := []int64{d.hold, d.hold + 1 + int64(m.pick(300)), max(1, d.hold-1-int64(m.pick(int(d.hold)))), d.hold + b.avail + 1, 0}[m.pick(5)]
	r := m.env.Do(m.t, http.MethodPatch, "/v1/delegations/"+d.id+"/hold", m.orch[d.tenant], map[string]any{"amount_minor": amount})
	m.logf("hold %s (%s) %d → %d (available %d) → %d", d.id, d.obligation, d.hold, amount, b.avail, r.Status)
	switch {
	case amount <= 0:
		m.expect(r, expectation{http.StatusUnprocessableEntity, ""})
		return
	case d.obligation != ledger.ObligationHeld:
		m.expect(r, expectation{http.StatusConflict, "hold_not_changeable"})
		return
	case amount-d.hold > b.avail:
		m.expect(r, expectation{http.StatusUnprocessableEntity, "insufficient_funds"})
		return
	}
	m.expect(r, expectation{http.StatusOK, ""})
	if amount != d.hold {
		m.ops["hold changed"]++
	}
	b.avail -= amount - d.hold
	b.held += amount - d.hold
	d.hold = amount
	var out httpapi.DelegationBody
	r.JSON(m.t, &out)
	m.checkBody(r, d, out)
}

// terminal applies a newly terminal status to a held obligation.
func (m *model) terminal(d *modelDelegation, st ledger.TaskStatus) {
	class, o := m.classes[d.class], m.org(d.org)
	switch st {
	case ledger.StatusCompleted:
		m.move(d, ledger.ObligationSettled)
	case ledger.StatusRejected:
		m.move(d, ledger.ObligationReleased)
	case ledger.StatusCanceled, ledger.StatusFailed:
		gated := class.effectCapable && !o.shared && slices.Contains(class.gateOn, st)
		switch {
		case gated && d.evidence != nil && d.evidence.status == ledger.EvidenceReceived:
			// Early evidence: held goes straight to compensated or released.
			d.compKey = ledger.CompensationKey(ledger.Delegation{ID: uuid.MustParse(d.id)})
			d.evidence.status = ledger.EvidenceApplied
			if d.evidence.kind == ledger.EventCompensationAck {
				if r := d.evidence.reversed; r != nil {
					// The hold may have been cut since the ack came: it
					// cannot return more than is held.
					m.ops["early ack: partial reversal"]++
					n := min(*r, d.hold)
					d.reversed = &n
				}
				m.move(d, ledger.ObligationCompensated)
			} else {
				m.move(d, ledger.ObligationReleased)
			}
		case gated:
			m.move(d, ledger.ObligationRevocationPendingCompensation)
			d.compKey = ledger.CompensationKey(ledger.Delegation{ID: uuid.MustParse(d.id)})
			d.deadline = m.now().Add(class.timeout)
		default:
			m.move(d, ledger.ObligationReleased)
		}
	case ledger.StatusUnknown, ledger.StatusSubmitted, ledger.StatusWorking, ledger.StatusInputRequired, ledger.StatusAuthRequired:
	}
	if d.evidence != nil && d.evidence.status == ledger.EvidenceReceived {
		d.evidence.status = ledger.EvidenceUnused // an unused_early_evidence anomaly
	}
}

func (m *model) opCancel() {
	m.ops["cancel"]++
	d := m.someDelegation()
	r := m.env.Do(m.t, http.MethodPost, "/v1/delegations/"+d.id+"/cancel", m.orch[d.tenant], nil)
	m.logf("cancel %s (%s) → %d", d.id, d.taskStatus, r.Status)
	switch {
	case d.cancelRequested:
		m.expect(r, expectation{http.StatusOK, ""})
	case d.taskStatus.Terminal():
		m.expect(r, expectation{http.StatusConflict, "task_terminal"})
	default:
		m.expect(r, expectation{http.StatusOK, ""})
		d.cancelRequested = true
	}
}

// postToken sends a compact JWS to an evidence endpoint.
func (m *model) postToken(path, token string) *apitest.Response {
	req, err := http.NewRequest(http.MethodPost, m.env.URL+path, bytes.NewReader([]byte(token)))
	if err != nil {
		m.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/jose")
	return m.env.Send(m.t, req)
}

const (
	modelAcks  = "/v1/compensation/acks"
	modelDecls = "/v1/compensation/declarations"
)

// claims are valid claims of an ack (ack true) or a declaration about d.
func (m *model) claims(d *modelDelegation, ack bool) map[string]any {
	if ack {
		key := ledger.CompensationKey(ledger.Delegation{ID: uuid.MustParse(d.id)})
		return compensationtest.AckClaims(d.org, modelLedgerID, d.req.Remote.TaskID, key, m.now())
	}
	return compensationtest.DeclarationClaims(d.org, modelLedgerID, d.req.Remote.TaskID, m.now())
}

// opEvidence sends a valid, freshly signed ack or declaration: to a held
// obligation (early evidence), one waiting for compensation, or one that
// ended. Sometimes an ack repeats the receipt id of the evidence already
// accepted (the same payload under a new jti: the original result).
func (m *model) opEvidence(ack bool) {
	d := m.someIn(ledger.ObligationRevocationPendingCompensation, ledger.ObligationCompensationUnconfirmed, ledger.ObligationHeld)
	o := m.org(d.org)
	path, typ, ev, to := modelDecls, string(compensation.KindDeclaration), ledger.EventDeclarationVerified, ledger.ObligationReleased
	if ack {
		path, typ, ev, to = modelAcks, string(compensation.KindAck), ledger.EventCompensationAck, ledger.ObligationCompensated
	}
	m.ops[typ]++
	claims := m.claims(d, ack)
	var reversed *int64
	if ack && m.pick(2) == 0 {
		// A partial reversal, all of it, none, or more than is held.
		n := []int64{0, int64(m.pick(int(d.hold) + 1)), d.hold, d.hold + 1}[m.pick(4)]
		reversed = &n
	}
	if ack && d.evidence != nil && d.evidence.kind == ev && m.pick(2) == 0 {
		claims["receipt_id"], reversed = d.evidence.receiptID, d.evidence.reversed // the same payload again
	}
	if reversed != nil {
		claims["reversed_amount_minor"] = *reversed
	}
	receiptID, _ := claims["receipt_id"].(string)
	token := o.signer.Sign(m.t, typ, claims)
	r := m.postToken(path, token)
	m.logf("%s for %s (%s, hold %d, reversed %s, org revoked %v, evidence %+v) → %d", typ, d.id, d.obligation, d.hold, amountText(reversed), o.revoked, d.evidence, r.Status)
	_, _, transErr := ledger.NextObligation(d.obligation, ev)
	switch {
	case o.revoked:
		m.expect(r, tokenRefused)
		return
	case reversed != nil && *reversed > d.hold:
		m.ops["ack reversing more than the hold"]++
		m.expect(r, expectation{http.StatusUnprocessableEntity, compensation.CodeTokenAmountInvalid})
		return
	case d.evidence != nil && (d.evidence.kind != ev || d.evidence.receiptID != receiptID || amountText(d.evidence.reversed) != amountText(reversed)):
		m.ops["evidence conflict"]++
		m.expect(r, expectation{http.StatusUnprocessableEntity, compensation.CodeEvidenceConflict})
		return
	case d.evidence == nil && transErr != nil && d.obligation != ledger.ObligationHeld && !d.obligation.Terminal():
		m.expect(r, expectation{http.StatusConflict, compensation.CodeEvidenceNotExpected})
		return
	}
	m.expect(r, expectation{http.StatusOK, ""})
	var outcome string
	switch {
	case d.evidence != nil:
		m.ops["evidence same payload"]++
		outcome = "duplicate"
	case d.obligation == ledger.ObligationHeld:
		m.ops["evidence early"]++
		outcome = "received"
		d.evidence = &modelEvidence{kind: ev, receiptID: receiptID, reversed: reversed, status: ledger.EvidenceReceived}
	case transErr == nil:
		outcome = "applied"
		if reversed != nil {
			m.ops["ack: partial reversal"]++
			d.reversed = reversed
		}
		m.move(d, to)
		d.evidence = &modelEvidence{kind: ev, receiptID: receiptID, reversed: reversed, status: ledger.EvidenceApplied}
		if w := d.pendingWriteOff; w != nil {
			w.status, d.pendingWriteOff = "void", nil
		}
	default:
		outcome = "late_evidence"
	}
	m.checkEvidence(r, d, outcome)
	o.jtis = append(o.jtis, claims["jti"].(string))
	d.accepted = append(d.accepted, modelToken{path: path, token: token, exp: time.Unix(claims["exp"].(int64), 0), reversed: reversed})
}

func (m *model) checkEvidence(r *apitest.Response, d *modelDelegation, outcome string) {
	m.t.Helper()
	// The signer is told the delegation's id and the outcome, nothing
	// else; the delegation is checked as on-call reads it.
	var out map[string]json.RawMessage
	r.JSON(m.t, &out)
	var id string
	var evidence struct {
		Outcome string `json:"outcome"`
	}
	if len(out) != 2 || json.Unmarshal(out["id"], &id) != nil || json.Unmarshal(out["evidence"], &evidence) != nil {
		m.fatalf("%s: the answer to the signer is %s; want only id and evidence", r.Request, r.Body)
	}
	if id != d.id || evidence.Outcome != outcome || r.Header.Get(httpapi.EvidenceOutcomeHeader) != outcome {
		m.fatalf("%s: delegation %s, outcome %q; the model predicts %s, %q", r.Request, id, evidence.Outcome, d.id, outcome)
	}
	m.checkBody(r, d, m.env.Delegation(m.t, m.env.OncallToken, id))
}

// opResend re-sends an accepted token: a duplicate, unless it expired.
func (m *model) opResend() {
	m.ops["resend"]++
	var withTokens []*modelDelegation
	for _, d := range m.delegs {
		if len(d.accepted) > 0 {
			withTokens = append(withTokens, d)
		}
	}
	if len(withTokens) == 0 {
		m.opEvidence(true)
		return
	}
	d := withTokens[m.pick(len(withTokens))]
	tok := d.accepted[m.pick(len(d.accepted))]
	r := m.postToken(tok.path, tok.token)
	m.logf("resend accepted token for %s → %d", d.id, r.Status)
	switch {
	case m.org(d.org).revoked:
		m.expect(r, tokenRefused)
	case m.now().After(tok.exp.Add(compensation.ClockSkew)):
		m.expect(r, tokenRefused)
	case tok.reversed != nil && *tok.reversed > d.hold:
		// Accepted early, before the hold was cut below what it reverses.
		m.expect(r, expectation{http.StatusUnprocessableEntity, compensation.CodeTokenAmountInvalid})
	default:
		m.expect(r, expectation{http.StatusOK, ""})
		m.checkEvidence(r, d, "duplicate")
	}
}

// tokenRefused is the one answer to every token refused before it verified
// and matched a delegation, whatever the reason.
var tokenRefused = expectation{http.StatusUnauthorized, compensation.CodeTokenRefused}

// opForged sends a token that must be refused, changing nothing. Only a
// token that verified (a replayed jti, a wrong idempotency key) is told its
// reason; the rest get tokenRefused.
func (m *model) opForged() {
	d := m.someDelegation()
	o := m.org(d.org)
	ackTyp, declTyp := string(compensation.KindAck), string(compensation.KindDeclaration)
	var (
		path, token, kind string
		want              expectation
	)
	switch m.pick(7) {
	case 0:
		kind = "wrong key"
		forger := compensationtest.NewEd25519Signer(m.t, o.signer.KeyID())
		token = forger.Sign(m.t, ackTyp, m.claims(d, true))
		path, want = modelAcks, tokenRefused
	case 1:
		kind = "unknown kid"
		token = m.rogue.Sign(m.t, declTyp, m.claims(d, false), compensationtest.WithHeader("kid", "rogue-1"))
		path, want = modelDecls, tokenRefused
	case 2:
		kind = "ack as declaration"
		token = o.signer.Sign(m.t, ackTyp, m.claims(d, true))
		path, want = modelDecls, tokenRefused
	case 3:
		kind = "replayed jti"
		if len(o.jtis) == 0 {
			m.opEvidence(m.pick(2) == 0)
			return
		}
		claims := m.claims(d, true)
		claims["jti"] = o.jtis[m.pick(len(o.jtis))]
		token = o.signer.Sign(m.t, ackTyp, claims)
		path, want = modelAcks, expectation{http.StatusConflict, compensation.CodeTokenReplayed}
	case 4:
		kind = "wrong idempotency key"
		claims := m.claims(d, true)
		claims["idempotency_key"] = "qc_00000000000000000000000000000000"
		token = o.signer.Sign(m.t, ackTyp, claims)
		path, want = modelAcks, expectation{http.StatusUnprocessableEntity, compensation.CodeTokenIdempotencyKeyMismatch}
	case 5:
		kind = "alg none"
		token = compensationtest.NoneToken(m.claims(d, false), compensationtest.WithHeader("typ", declTyp), compensationtest.WithHeader("kid", o.signer.KeyID()))
		path, want = modelDecls, tokenRefused
	default:
		kind = "unknown task"
		claims := m.claims(d, true)
		claims["sub"] = "task-nobody-delegated"
		token = o.signer.Sign(m.t, ackTyp, claims)
		path, want = modelAcks, tokenRefused
	}
	m.ops["forged: "+kind]++
	if o.revoked {
		// A revoked org's signature verifies nothing: refused like any
		// other, whatever else is wrong with the token.
		want = tokenRefused
	}
	r := m.postToken(path, token)
	m.logf("forged (%s) for %s (%s) → %d", kind, d.id, d.obligation, r.Status)
	m.expect(r, want)
}

// opAdvanceAndSweep moves the clock and runs the deadline sweep.
func (m *model) opAdvanceAndSweep() {
	m.ops["sweep"]++
	jump := []time.Duration{time.Minute, 30 * time.Minute, 2*time.Hour + time.Minute, 72*time.Hour + time.Minute}[m.pick(4)]
	m.env.Clock.Advance(jump)
	r := m.env.Do(m.t, http.MethodPost, "/admin/v1/compensation/sweep", m.oncall[m.pick(2)], nil)
	want := 0
	for _, d := range m.delegs {
		if d.obligation == ledger.ObligationRevocationPendingCompensation && !d.deadline.After(m.now()) {
			m.move(d, ledger.ObligationCompensationUnconfirmed)
			want++
		}
	}
	m.logf("advance %s, sweep → %d %s", jump, r.Status, bytes.TrimSpace(r.Body))
	m.expect(r, expectation{http.StatusOK, ""})
	var out httpapi.SweepBody
	r.JSON(m.t, &out)
	if out.Moved != want {
		m.fatalf("sweep moved %d, the model predicts %d", out.Moved, want)
	}
}

// opRevoke revokes an org's identity and registers a new org in its
// place, so that creations go on.
func (m *model) opRevoke() {
	m.ops["revoke"]++
	o := m.orgs[m.pick(len(m.orgs))]
	r := m.env.Do(m.t, http.MethodPost, "/admin/v1/orgs/"+o.id+"/revoke-identity", m.oncall[m.pick(2)], map[string]any{"reason": "key compromise drill"})
	m.logf("revoke %s (revoked %v) → %d", o.id, o.revoked, r.Status)
	if o.revoked {
		m.expect(r, expectation{http.StatusConflict, "identity_already_revoked"})
		return
	}
	m.expect(r, expectation{http.StatusOK, ""})
	o.revoked = true
	want := 0
	for _, d := range m.delegs {
		if d.org == o.id && (d.obligation == ledger.ObligationHeld || d.obligation == ledger.ObligationRevocationPendingCompensation ||
			d.obligation == ledger.ObligationCompensationUnconfirmed) {
			m.move(d, ledger.ObligationEscalated)
			want++
		}
	}
	var out httpapi.RevokeIdentityBody
	r.JSON(m.t, &out)
	if out.Escalated != want || out.Org.IdentityRevokedAt == nil {
		m.fatalf("revoke %s: escalated %d (revoked at %v), the model predicts %d", o.id, out.Escalated, out.Org.IdentityRevokedAt, want)
	}
	if len(m.orgs) < 8 {
		m.addOrg(fmt.Sprintf("org-%d", m.step), m.pick(3) == 0, compensationtest.NewEd25519Signer(m.t, fmt.Sprintf("k-%d", m.step)))
	}
}

func (m *model) opWriteOff() {
	m.ops["write-off"]++
	d := m.someIn(ledger.ObligationRevocationPendingCompensation, ledger.ObligationCompensationUnconfirmed, ledger.ObligationEscalated)
	who := m.pick(2)
	r := m.env.Do(m.t, http.MethodPost, "/admin/v1/delegations/"+d.id+"/write-offs", m.oncall[who],
		map[string]any{"reason": "remote org unresponsive", "reference": "INC-7"})
	m.logf("write-off %s by %s (%s, %d) → %d", d.id, m.oncallN[who], d.obligation, d.hold, r.Status)
	switch d.obligation {
	case ledger.ObligationRevocationPendingCompensation, ledger.ObligationCompensationUnconfirmed, ledger.ObligationEscalated:
	case ledger.ObligationHeld, ledger.ObligationSettled, ledger.ObligationReleased, ledger.ObligationCompensated, ledger.ObligationWrittenOff:
		m.expect(r, expectation{http.StatusConflict, "write_off_not_allowed"})
		return
	}
	if d.pendingWriteOff != nil {
		m.expect(r, expectation{http.StatusConflict, "write_off_pending"})
		return
	}
	m.expect(r, expectation{http.StatusCreated, ""})
	var out httpapi.WriteOffBody
	r.JSON(m.t, &out)
	w := &modelWriteOff{id: out.ID, delegation: d.id, requester: m.oncallN[who], status: "executed"}
	if d.hold > modelThreshold {
		w.status, d.pendingWriteOff = "pending_approval", w
	} else {
		m.move(d, ledger.ObligationWrittenOff)
	}
	m.wos = append(m.wos, w)
	if out.Status != w.status || out.Delegation == nil {
		m.fatalf("%s: write-off %s, the model predicts %s", r.Request, out.Status, w.status)
	}
	m.checkBody(r, d, *out.Delegation)
}

func (m *model) opApprove() {
	m.ops["approve"]++
	var pending []*modelWriteOff
	for _, w := range m.wos {
		if w.status == "pending_approval" {
			pending = append(pending, w)
		}
	}
	var w *modelWriteOff
	switch {
	case len(pending) > 0 && m.pick(4) != 0:
		w = pending[m.pick(len(pending))]
	case len(m.wos) > 0:
		w = m.wos[m.pick(len(m.wos))]
	default:
		m.opWriteOff()
		return
	}
	who := m.pick(2)
	d := m.byID[w.delegation]
	r := m.env.Do(m.t, http.MethodPost, "/admin/v1/write-offs/"+w.id+"/approve", m.oncall[who], nil)
	m.logf("approve %s (%s, by %s, requested by %s, delegation %s) → %d", w.id, w.status, m.oncallN[who], w.requester, d.obligation, r.Status)
	switch {
	case w.status != "pending_approval":
		m.expect(r, expectation{http.StatusConflict, "write_off_not_pending"})
	case w.requester == m.oncallN[who]:
		m.expect(r, expectation{http.StatusForbidden, "self_approval"})
	case d.obligation != ledger.ObligationRevocationPendingCompensation && d.obligation != ledger.ObligationCompensationUnconfirmed &&
		d.obligation != ledger.ObligationEscalated:
		m.expect(r, expectation{http.StatusConflict, "write_off_not_allowed"})
		w.status, d.pendingWriteOff = "void", nil
	default:
		m.expect(r, expectation{http.StatusOK, ""})
		w.status, d.pendingWriteOff = "executed", nil
		m.move(d, ledger.ObligationWrittenOff)
		var out httpapi.WriteOffBody
		r.JSON(m.t, &out)
		if out.Status != "executed" || out.ApprovedBy != m.oncallN[who] || out.Delegation == nil {
			m.fatalf("%s: write-off %+v", r.Request, out)
		}
		m.checkBody(r, d, *out.Delegation)
	}
}

func (m *model) opFund() {
	m.ops["fund"]++
	b := m.budgets[m.pick(len(m.budgets))]
	committed := b.held + b.spent + b.writtenOff
	funded := max(committed+int64(m.pick(12000))-300, 0)
	r := m.env.Do(m.t, http.MethodPut, "/admin/v1/budgets/"+b.id, m.env.OncallToken, map[string]any{"currency": b.currency, "funded_minor": funded})
	m.logf("fund %s to %d (committed %d) → %d", b.id, funded, committed, r.Status)
	if funded < committed {
		m.expect(r, expectation{http.StatusConflict, "funding_below_commitments"})
		return
	}
	m.expect(r, expectation{http.StatusOK, ""})
	b.funded, b.avail = funded, funded-committed
}

// opWrongPrincipal tries what a principal may not do: nothing changes.
func (m *model) opWrongPrincipal() {
	m.ops["wrong principal"]++
	d := m.someDelegation()
	other := map[string]string{"acme": "umbrella", "umbrella": "acme"}[d.tenant]
	var r *apitest.Response
	var want expectation
	switch m.pick(4) {
	case 0: // another tenant's orchestrator reports on it
		r = m.env.Do(m.t, http.MethodPost, "/v1/delegations/"+d.id+"/task-status", m.orch[other], map[string]any{"state": "completed"})
		want = expectation{http.StatusNotFound, "not_found"}
	case 1: // an orchestrator writes off
		r = m.env.Do(m.t, http.MethodPost, "/admin/v1/delegations/"+d.id+"/write-offs", m.orch[d.tenant], map[string]any{"reason": "mine"})
		want = expectation{http.StatusForbidden, "forbidden"}
	case 2: // an orchestrator sweeps
		r = m.env.Do(m.t, http.MethodPost, "/admin/v1/compensation/sweep", m.orch[d.tenant], nil)
		want = expectation{http.StatusForbidden, "forbidden"}
	default: // an orchestrator revokes an org
		r = m.env.Do(m.t, http.MethodPost, "/admin/v1/orgs/"+d.org+"/revoke-identity", m.orch[d.tenant], map[string]any{"reason": "mine"})
		want = expectation{http.StatusForbidden, "forbidden"}
	}
	m.logf("wrong principal %s → %d", r.Request, r.Status)
	m.expect(r, want)
}

// modelAgentOrg is the org whose agent the model dispatches to. It is not
// among the model's orgs: nothing but opDispatch sends it work.
const modelAgentOrg = "org-agent"

// dispatchMode is how the model's agent answers one dispatch.
type dispatchMode int

const (
	// dispatchAmbiguous: attempt 1 reaches the agent and its answer is
	// lost; the resend (same messageId) is refused with -32602. Nothing
	// proves whether a task exists: dispatch_unknown, the hold stays.
	dispatchAmbiguous dispatchMode = iota
	// dispatchRefused: the first send is refused with -32602: no task,
	// no work; rejected, the hold returns.
	dispatchRefused
	// dispatchReply: the first send is answered with a message: the work
	// is done without a task; completed, the hold is spent.
	dispatchReply
)

// modelAgent is an in-test A2A agent (rawAgent) answering each dispatch
// by the mode the model chose for its messageId.
type modelAgent struct {
	*rawAgent
	mu    sync.Mutex
	modes map[string]dispatchMode
	sends map[string]int
}

func (m *model) startAgent() *modelAgent {
	a := &modelAgent{modes: map[string]dispatchMode{}, sends: map[string]int{}}
	a.rawAgent = startRawAgent(m.t, &rawAgent{handle: func(method string, _ int, params json.RawMessage) (any, *rawRPCError, bool) {
		if method != "message/send" {
			return nil, &rawRPCError{Code: -32601, Message: "method not found"}, false
		}
		var p struct {
			Message struct {
				MessageID string `json:"messageId"`
			} `json:"message"`
		}
		_ = json.Unmarshal(params, &p)
		a.mu.Lock()
		a.sends[p.Message.MessageID]++
		mode, n := a.modes[p.Message.MessageID], a.sends[p.Message.MessageID]
		a.mu.Unlock()
		switch {
		case mode == dispatchReply:
			return map[string]any{"kind": "message", "messageId": "reply-" + p.Message.MessageID, "role": "agent",
				"parts": []any{map[string]any{"kind": "text", "text": "done, no task needed"}}}, nil, false
		case mode == dispatchAmbiguous && n == 1:
			return nil, nil, true // the task may exist at the remote; the answer is lost
		}
		return nil, &rawRPCError{Code: -32602, Message: "duplicate messageId"}, false
	}})
	r := m.env.Do(m.t, http.MethodPut, "/admin/v1/orgs/"+modelAgentOrg, m.env.OncallToken, map[string]any{
		"name": "Org with an agent", "agent_card_url": a.cardURL, "allowed_hosts": []string{"127.0.0.1"},
	})
	if r.Status != http.StatusCreated {
		m.fatalf("register org %s: %d %s", modelAgentOrg, r.Status, r.Body)
	}
	return a
}

// opDispatch has Quittance dispatch work to the model's agent, and runs
// the A2A worker until the dispatch is decided. The agent answers
// ambiguously (the delegation stays held, listed as dispatch_unknown: an
// ambiguous reply never releases), refuses the first send (released) or
// replies with a message (settled, through the evidence function like any
// other terminal status).
func (m *model) opDispatch() {
	m.ops["dispatch"]++
	if m.agent == nil {
		m.agent = m.startAgent()
	}
	b := m.budgets[m.pick(2)] // the EUR budgets
	if b.avail < 1 {
		m.opFund()
		return
	}
	amount := 1 + int64(m.pick(int(min(800, b.avail))))
	mode := []dispatchMode{dispatchAmbiguous, dispatchAmbiguous, dispatchRefused, dispatchReply}[m.pick(4)]
	tenant := b.tenants[m.pick(len(b.tenants))]
	op := fmt.Sprintf("dispatch-%d", m.step)
	r := m.env.Do(m.t, http.MethodPost, "/v1/delegations", m.orch[tenant], map[string]any{
		"business_operation_id": op, "org_id": modelAgentOrg, "task_class": "procurement", "budget_id": b.id,
		"hold":     map[string]any{"amount_minor": amount, "currency": b.currency},
		"dispatch": map[string]any{"message": map[string]any{"parts": []any{map[string]any{"text": "buy 3 pallets"}}}},
	})
	m.expect(r, expectation{http.StatusCreated, ""})
	var body httpapi.DelegationBody
	r.JSON(m.t, &body)
	d := &modelDelegation{
		id: body.ID, tenant: tenant, org: modelAgentOrg, class: "procurement", budget: b.id, hold: amount, dispatched: true,
		req:        apitest.NewCreateRequest(op, modelAgentOrg, "procurement", b.id, amount, b.currency),
		taskStatus: ledger.StatusUnknown, obligation: ledger.ObligationHeld,
	}
	b.avail -= amount
	b.held += amount
	m.delegs = append(m.delegs, d)
	m.byID[d.id] = d
	m.checkBody(r, d, body)
	m.agent.mu.Lock()
	m.agent.modes[delegate.DispatchMessageID(uuid.MustParse(d.id))] = mode
	m.agent.mu.Unlock()

	ctx := context.Background()
	decided := func() bool {
		var events int
		var status string
		if err := m.env.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM events WHERE delegation_id = d.id AND type = $2), d.task_status
			FROM delegations d WHERE d.id = $1`, d.id, string(ledger.EventTypeDispatchUnknown)).Scan(&events, &status); err != nil {
			m.fatalf("read dispatch of %s: %v", d.id, err)
		}
		return events > 0 || status != string(ledger.StatusUnknown)
	}
	for attempt := 0; !decided(); attempt++ {
		if attempt == 20 {
			m.fatalf("dispatch %s (mode %d) undecided after %d worker runs", d.id, mode, attempt)
		}
		if _, err := m.env.Worker.RunOnce(ctx); err != nil {
			m.fatalf("run the A2A worker: %v", err)
		}
		m.env.Clock.Advance(time.Second) // past the resend's backoff
	}
	m.logf("dispatch %s to %s (%d, mode %d) → decided", d.id, modelAgentOrg, amount, mode)
	switch mode {
	case dispatchAmbiguous:
		m.ops["dispatch: ambiguous"]++
		d.dispatchUnknown = true
	case dispatchRefused:
		m.ops["dispatch: refused"]++
		d.taskStatus = ledger.StatusRejected
		m.move(d, ledger.ObligationReleased)
	case dispatchReply:
		m.ops["dispatch: message reply"]++
		d.taskStatus = ledger.StatusCompleted
		m.move(d, ledger.ObligationSettled)
	}
}

// opDispatchedWord has the orchestrator try to move the money of a
// delegation Quittance dispatched on its own word (ledger/DESIGN.md §2.4):
// a cut of its hold is refused (every dispatch the model makes was sent),
// a raise holds the difference as in record mode, and a report of any
// status — a completion settling nothing, a rejection, a cancel — is
// recorded and changes nothing.
func (m *model) opDispatchedWord() {
	var dispatched []*modelDelegation
	for _, d := range m.delegs {
		if d.dispatched {
			dispatched = append(dispatched, d)
		}
	}
	if len(dispatched) == 0 {
		m.opDispatch()
		return
	}
	m.ops["dispatched: the orchestrator's word"]++
	d := dispatched[m.pick(len(dispatched))]
	b := m.budget(d.budget)
	if m.pick(2) == 0 {
		amount := []int64{d.hold + 1 + int64(m.pick(300)), max(1, d.hold-1-int64(m.pick(int(d.hold)))), 1}[m.pick(3)]
		r := m.env.Do(m.t, http.MethodPatch, "/v1/delegations/"+d.id+"/hold", m.orch[d.tenant], map[string]any{"amount_minor": amount})
		m.logf("dispatched hold %s (%s) %d → %d (available %d) → %d", d.id, d.obligation, d.hold, amount, b.avail, r.Status)
		switch {
		case d.obligation != ledger.ObligationHeld:
			m.expect(r, expectation{http.StatusConflict, "hold_not_changeable"})
			return
		case amount < d.hold:
			m.ops["dispatched: hold cut refused"]++
			m.expect(r, expectation{http.StatusConflict, ledger.CodeHoldLowerRefused})
			return
		case amount-d.hold > b.avail:
			m.expect(r, expectation{http.StatusUnprocessableEntity, "insufficient_funds"})
			return
		}
		m.expect(r, expectation{http.StatusOK, ""})
		b.avail -= amount - d.hold
		b.held += amount - d.hold
		d.hold = amount
		var out httpapi.DelegationBody
		r.JSON(m.t, &out)
		m.checkBody(r, d, out)
		return
	}
	state := []string{"completed", "rejected", "canceled", "failed", "working", "input_required"}[m.pick(6)]
	body := map[string]any{"state": state}
	if state == "completed" && m.pick(2) == 0 {
		body["settled_amount_minor"] = 0
	}
	r := m.env.Do(m.t, http.MethodPost, "/v1/delegations/"+d.id+"/task-status", m.orch[d.tenant], body)
	m.logf("dispatched report %s (settled %v) on %s (%s/%s, hold %d) → %d", state, body["settled_amount_minor"], d.id, d.taskStatus, d.obligation, d.hold, r.Status)
	m.expect(r, expectation{http.StatusOK, ""})
	m.ops["dispatched: report recorded"]++
	var out httpapi.DelegationBody
	r.JSON(m.t, &out)
	m.checkBody(r, d, out)
}

// checkDatabase compares the database with the model and re-checks the
// invariants of ledger/DESIGN.md §2.2 on it.
func (m *model) checkDatabase() {
	m.t.Helper()
	ctx := context.Background()
	pool := m.env.Pool

	// Budgets: the model's columns, conservation, held = sum of active holds.
	rows, err := pool.Query(ctx, `
		SELECT b.id, b.funded_minor, b.available_minor, b.held_minor, b.spent_minor, b.written_off_minor,
		       coalesce((SELECT sum(amount_minor) FROM delegations d WHERE d.budget_id = b.id
		                 AND d.obligation_state = ANY($1::text[])), 0)::bigint
		FROM budgets b ORDER BY b.id`, report.ActiveObligationStates)
	if err != nil {
		m.fatalf("query budgets: %v", err)
	}
	seen := 0
	for rows.Next() {
		var (
			id                                     string
			funded, avail, held, spent, wo, active int64
		)
		if err := rows.Scan(&id, &funded, &avail, &held, &spent, &wo, &active); err != nil {
			m.fatalf("scan budget: %v", err)
		}
		if avail+held+spent+wo != funded {
			m.fatalf("budget %s not conserved: %d + %d + %d + %d != %d", id, avail, held, spent, wo, funded)
		}
		if held != active {
			m.fatalf("budget %s: held %d != sum of active holds %d", id, held, active)
		}
		b := m.budget(id)
		if b == nil {
			m.fatalf("budget %s is not in the model", id)
		}
		seen++
		if got, want := [5]int64{funded, avail, held, spent, wo}, [5]int64{b.funded, b.avail, b.held, b.spent, b.writtenOff}; got != want {
			m.fatalf("budget %s (funded, available, held, spent, written_off) = %v, the model says %v", id, got, want)
		}
	}
	rows.Close()
	if seen != len(m.budgets) {
		m.fatalf("%d budgets in the database, %d in the model", seen, len(m.budgets))
	}

	// Delegations: the model's task_status, obligation_state, amounts and
	// dispatch_unknown condition.
	rows, err = pool.Query(ctx, `SELECT id::text, task_status, obligation_state, amount_minor,
		coalesce(settled_amount_minor::text, 'none'), coalesce(reversed_amount_minor::text, 'none'), dispatch_unknown_at IS NOT NULL
		FROM delegations`)
	if err != nil {
		m.fatalf("query delegations: %v", err)
	}
	type row struct {
		task, obligation  string
		hold              int64
		settled, reversed string
		dispatchUnknown   bool
	}
	db := map[string]row{}
	for rows.Next() {
		var id string
		var r row
		if err := rows.Scan(&id, &r.task, &r.obligation, &r.hold, &r.settled, &r.reversed, &r.dispatchUnknown); err != nil {
			m.fatalf("scan delegation: %v", err)
		}
		db[id] = r
	}
	rows.Close()
	if len(db) != len(m.delegs) {
		m.fatalf("%d delegations in the database, %d in the model", len(db), len(m.delegs))
	}
	for _, d := range m.delegs {
		r, ok := db[d.id]
		if !ok {
			m.fatalf("delegation %s is missing from the database", d.id)
		}
		if r.task != string(d.taskStatus) || r.obligation != string(d.obligation) {
			m.fatalf("delegation %s is %s/%s in the database, the model says %s/%s", d.id, r.task, r.obligation, d.taskStatus, d.obligation)
		}
		if r.hold != d.hold || r.settled != amountText(d.settled) || r.reversed != amountText(d.reversed) || r.dispatchUnknown != d.dispatchUnknown {
			m.fatalf("delegation %s: hold %d, settled %s, reversed %s, dispatch_unknown %v; the model says %d, %s, %s, %v",
				d.id, r.hold, r.settled, r.reversed, r.dispatchUnknown, d.hold, amountText(d.settled), amountText(d.reversed), d.dispatchUnknown)
		}
	}

	// Events: the log only grows; every stream that grew still verifies;
	// every obligation transition is an allowed one from the state the
	// previous events led to; and the events lead to each row's state, so
	// no hold left active without its evidence event.
	var count, maxSeq int64
	if err := pool.QueryRow(ctx, `SELECT count(*), coalesce(max(seq), 0) FROM events`).Scan(&count, &maxSeq); err != nil {
		m.fatalf("count events: %v", err)
	}
	if count < m.lastCount || maxSeq < m.lastSeq {
		m.fatalf("events shrank: %d → %d events, max seq %d → %d", m.lastCount, count, m.lastSeq, maxSeq)
	}
	rows, err = pool.Query(ctx, `
		SELECT seq, stream, stream_seq, coalesce(delegation_id::text, ''), type, at, actor,
		       coalesce(obligation_from, ''), coalesce(obligation_to, ''), data, coalesce(evidence, ''), prev_hash, hash
		FROM events WHERE seq > $1 ORDER BY seq`, m.lastSeq)
	if err != nil {
		m.fatalf("query events: %v", err)
	}
	grown := map[string]bool{}
	var fresh []ledger.Event
	for rows.Next() {
		var (
			e               ledger.Event
			deleg, from, to string
			data            []byte
		)
		if err := rows.Scan(&e.Seq, &e.Stream, &e.StreamSeq, &deleg, &e.Type, &e.At, &e.Actor, &from, &to, &data, &e.Evidence, &e.PrevHash, &e.Hash); err != nil {
			m.fatalf("scan event: %v", err)
		}
		if deleg != "" {
			e.DelegationID = uuid.MustParse(deleg)
		}
		e.ObligationFrom, e.ObligationTo, e.Data = ledger.ObligationState(from), ledger.ObligationState(to), data
		fresh = append(fresh, e)
	}
	rows.Close()
	for _, e := range fresh {
		m.streams[e.Stream] = append(m.streams[e.Stream], e)
		grown[e.Stream] = true
		if e.DelegationID == uuid.Nil {
			continue
		}
		id := e.DelegationID.String()
		state, known := m.eventState[id]
		if !known {
			if e.Type != ledger.EventTypeDelegationCreated {
				m.fatalf("delegation %s: first event is %s", id, e.Type)
			}
			state = ledger.ObligationHeld
		}
		if e.ObligationFrom != "" || e.ObligationTo != "" {
			var data struct {
				ObligationEvent ledger.ObligationEvent `json:"obligation_event"`
			}
			_ = json.Unmarshal(e.Data, &data)
			next, _, err := ledger.NextObligation(e.ObligationFrom, data.ObligationEvent)
			if e.ObligationFrom != state || err != nil || next != e.ObligationTo {
				m.fatalf("delegation %s event %d (%s): %s -%s-> %s, but its obligation was %s", id, e.StreamSeq, e.Type, e.ObligationFrom, data.ObligationEvent, e.ObligationTo, state)
			}
			state = e.ObligationTo
		}
		m.eventState[id] = state
	}
	for stream := range grown {
		if err := ledger.VerifyChain(m.streams[stream]); err != nil {
			m.fatalf("%v", err)
		}
	}
	if int64(len(fresh)) != count-m.lastCount {
		m.fatalf("events: %d new rows after seq %d, but the count grew by %d (an event was inserted behind the cursor or removed)", len(fresh), m.lastSeq, count-m.lastCount)
	}
	m.lastCount, m.lastSeq = count, maxSeq
	for _, d := range m.delegs {
		if got := m.eventState[d.id]; got != d.obligation {
			m.fatalf("delegation %s: its events lead to %q, the row is %s", d.id, got, d.obligation)
		}
	}

	// Evidence rows: the model's, and no hold left active for compensated
	// or for released on a declaration without an applied evidence row of
	// that kind (the transition's own event is checked above).
	rows, err = pool.Query(ctx, `
		SELECT d.id::text, d.obligation_state, coalesce(d.obligation_reason, ''), coalesce(e.kind, ''), coalesce(e.status, '')
		FROM delegations d LEFT JOIN compensation_evidence e ON e.delegation_id = d.id`)
	if err != nil {
		m.fatalf("query evidence: %v", err)
	}
	for rows.Next() {
		var id, state, reason, kind, status string
		if err := rows.Scan(&id, &state, &reason, &kind, &status); err != nil {
			m.fatalf("scan evidence: %v", err)
		}
		needs := ""
		switch {
		case state == string(ledger.ObligationCompensated):
			needs = string(ledger.EventCompensationAck)
		case state == string(ledger.ObligationReleased) && reason == ledger.ReasonNoCompensationDeclared:
			needs = string(ledger.EventDeclarationVerified)
		}
		if needs != "" && (kind != needs || status != string(ledger.EvidenceApplied)) {
			m.fatalf("delegation %s is %s (%s) with evidence row %q/%q, want an applied %s", id, state, reason, kind, status, needs)
		}
		d := m.byID[id]
		switch {
		case d.evidence == nil && kind != "":
			m.fatalf("delegation %s has evidence %s/%s the model does not know", id, kind, status)
		case d.evidence != nil && (kind != string(d.evidence.kind) || status != string(d.evidence.status)):
			m.fatalf("delegation %s evidence %s/%s, the model says %s/%s", id, kind, status, d.evidence.kind, d.evidence.status)
		}
	}
	rows.Close()

	// No hold left active without a matching evidence row, straight from
	// the database as CheckInvariants re-checks it, after every step
	// (conservation is checked above); every invariant of CheckInvariants,
	// hash chains included, every 50 steps and at the end.
	problems := apitest.HoldEvidenceViolations(ctx, m.env)
	if m.step%50 == 0 {
		problems = apitest.Violations(ctx, m.env)
	}
	if len(problems) > 0 {
		m.fatalf("invariants: %s", strings.Join(problems, "\n"))
	}
}
