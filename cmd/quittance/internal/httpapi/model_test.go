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
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/ledger"
)

// The model test drives the public HTTP API with seeded random operations
// and predicts every answer from an in-memory model of ledger/DESIGN.md §2: the
// status class (and problem code) of each response, and the task_status,
// obligation_state and budget columns it leaves behind. After every step
// it compares the whole database with the model and re-checks the
// invariants of §2.2 straight from the database.
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
	path  string
	token string
	exp   time.Time
}

// modelWriteOff is a write-off the model knows of.
type modelWriteOff struct {
	id, delegation, requester, status string
}

// modelDelegation is a delegation as the model sees it.
type modelDelegation struct {
	id, tenant, org, class, budget string
	req                            apitest.CreateRequest
	taskStatus                     ledger.TaskStatus
	taskAt                         time.Time
	obligation                     ledger.ObligationState
	compKey                        string
	deadline                       time.Time
	cancelRequested                bool
	pendingWriteOff                *modelWriteOff
	accepted                       []modelToken
	evidence                       *modelEvidence // accepted under the compensation idempotency key
}

// modelEvidence is the evidence accepted for a delegation's compensation
// idempotency key: what it says (kind and receipt id) and what became of
// it (received, applied, unused).
type modelEvidence struct {
	kind      ledger.ObligationEvent
	receiptID string
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
	for _, b := range []*modelBudget{{id: "eur-1", currency: "EUR", funded: 20000}, {id: "eur-2", currency: "EUR", funded: 6000}, {id: "usd-1", currency: "USD", funded: 12000}} {
		env.PutBudget(t, b.id, b.currency, b.funded)
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

func (m *model) someDelegation() *modelDelegation {
	if len(m.delegs) == 0 {
		return nil
	}
	// Favour recent delegations, which are more likely to be open.
	if m.pick(2) == 0 {
		return m.delegs[len(m.delegs)-1-m.pick(min(len(m.delegs), 6))]
	}
	return m.delegs[m.pick(len(m.delegs))]
}

// someIn picks, two times out of three, a delegation in one of states
// (when there is one), and any delegation otherwise.
func (m *model) someIn(states ...ledger.ObligationState) *modelDelegation {
	var in []*modelDelegation
	for _, d := range m.delegs {
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
}

// move moves d's hold as its obligation goes from → to.
func (m *model) move(d *modelDelegation, to ledger.ObligationState) {
	from := d.obligation
	next := to
	d.obligation = next
	kind, ok := ledger.HoldMove(from, next)
	if !ok {
		return
	}
	b := m.budget(d.budget)
	amount := d.req.Hold.AmountMinor
	b.held -= amount
	switch kind {
	case ledger.MoveSpend:
		b.spent += amount
	case ledger.MoveReturn:
		b.avail += amount
	case ledger.MoveWriteOff:
		b.writtenOff += amount
	case ledger.MoveFund, ledger.MoveHold:
		m.fatalf("unexpected hold move %s", kind)
	}
}

// randomOp runs one random operation and checks its answer.
func (m *model) randomOp() {
	n := m.pick(100)
	switch {
	case n < 16 || len(m.delegs) == 0:
		m.opCreate()
	case n < 20:
		m.opCreateRetry()
	case n < 42:
		m.opReport()
	case n < 45:
		m.opCancel()
	case n < 55:
		m.opEvidence(true)
	case n < 61:
		m.opEvidence(false)
	case n < 64:
		m.opResend()
	case n < 72:
		m.opForged()
	case n < 78:
		m.opAdvanceAndSweep()
	case n < 79:
		m.opRevoke()
	case n < 89:
		m.opWriteOff()
	case n < 96:
		m.opApprove()
	case n < 98:
		m.opFund()
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
	case o == nil:
		want = expectation{http.StatusUnprocessableEntity, "org_not_found"}
	case o.revoked:
		want = expectation{http.StatusConflict, "org_identity_revoked"}
	case budget == nil:
		want = expectation{http.StatusUnprocessableEntity, "budget_not_found"}
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
		id: body.ID, tenant: tenant, org: orgID, class: class, budget: budgetID, req: req,
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
	at := m.now()
	if m.pick(4) != 0 {
		// A remote timestamp, sometimes older than the last applied one.
		at = m.now().Add(time.Duration(m.pick(700)-600) * time.Second)
		body["timestamp"] = at.Format(time.RFC3339Nano)
	}
	r := m.env.Do(m.t, http.MethodPost, "/v1/delegations/"+d.id+"/task-status", m.orch[d.tenant], body)
	m.logf("report %s %s at %s on %s (%s/%s) → %d", raw, d.id, at.Format(time.TimeOnly), d.class, d.taskStatus, d.obligation, r.Status)

	st, err := ledger.ParseTaskStatus(raw)
	if err != nil {
		m.expect(r, expectation{http.StatusUnprocessableEntity, "unknown_task_status"})
		return
	}
	m.expect(r, expectation{http.StatusOK, ""})
	switch {
	case d.taskStatus.Terminal(): // duplicate or status_conflict: recorded, not applied
	case !d.taskAt.IsZero() && at.Before(d.taskAt): // stale: recorded, ignored
	case st == d.taskStatus: // duplicate
	default:
		d.taskStatus, d.taskAt = st, at
		if st.Terminal() && d.obligation == ledger.ObligationHeld {
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
	if ack && d.evidence != nil && d.evidence.kind == ev && m.pick(2) == 0 {
		claims["receipt_id"] = d.evidence.receiptID
	}
	receiptID, _ := claims["receipt_id"].(string)
	token := o.signer.Sign(m.t, typ, claims)
	r := m.postToken(path, token)
	m.logf("%s for %s (%s, org revoked %v, evidence %+v) → %d", typ, d.id, d.obligation, o.revoked, d.evidence, r.Status)
	_, _, transErr := ledger.NextObligation(d.obligation, ev)
	switch {
	case o.revoked:
		m.expect(r, tokenRefused)
		return
	case d.evidence != nil && (d.evidence.kind != ev || d.evidence.receiptID != receiptID):
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
		d.evidence = &modelEvidence{kind: ev, receiptID: receiptID, status: ledger.EvidenceReceived}
	case transErr == nil:
		outcome = "applied"
		m.move(d, to)
		d.evidence = &modelEvidence{kind: ev, receiptID: receiptID, status: ledger.EvidenceApplied}
		if w := d.pendingWriteOff; w != nil {
			w.status, d.pendingWriteOff = "void", nil
		}
	default:
		outcome = "late_evidence"
	}
	m.checkEvidence(r, d, outcome)
	o.jtis = append(o.jtis, claims["jti"].(string))
	d.accepted = append(d.accepted, modelToken{path: path, token: token, exp: time.Unix(claims["exp"].(int64), 0)})
}

func (m *model) checkEvidence(r *apitest.Response, d *modelDelegation, outcome string) {
	m.t.Helper()
	var out struct {
		httpapi.DelegationBody
		Evidence struct {
			Outcome string `json:"outcome"`
		} `json:"evidence"`
	}
	r.JSON(m.t, &out)
	if out.Evidence.Outcome != outcome || r.Header.Get(httpapi.EvidenceOutcomeHeader) != outcome {
		m.fatalf("%s: outcome %q, the model predicts %q", r.Request, out.Evidence.Outcome, outcome)
	}
	m.checkBody(r, d, out.DelegationBody)
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
	m.logf("write-off %s by %s (%s, %d) → %d", d.id, m.oncallN[who], d.obligation, d.req.Hold.AmountMinor, r.Status)
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
	if d.req.Hold.AmountMinor > modelThreshold {
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
		FROM budgets b ORDER BY b.id`, ledger.ActiveObligationStates)
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

	// Delegations: the model's task_status and obligation_state.
	rows, err = pool.Query(ctx, `SELECT id::text, task_status, obligation_state FROM delegations`)
	if err != nil {
		m.fatalf("query delegations: %v", err)
	}
	type row struct{ task, obligation string }
	db := map[string]row{}
	for rows.Next() {
		var id string
		var r row
		if err := rows.Scan(&id, &r.task, &r.obligation); err != nil {
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
}
