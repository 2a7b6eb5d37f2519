package pgstore_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/pgstore"
)

// The model test of the write coalescer (ledger/DESIGN.md §5, "The write
// path"): concurrent callers submit a seeded random mix of operations on a
// few budgets and delegations; afterwards the database is replayed, in its
// own serial order (each stream's sequence, each budget's entries in id
// order), against the obligation machine and the budget arithmetic.

const (
	modelBudgets  = 3
	modelFunded   = 10_000
	modelOpIDs    = 60
	modelCallers  = 16
	modelPerCalls = 30
)

type modelKind int

const (
	modelCreate modelKind = iota
	modelReport
	modelCancel
	modelHold
	modelEvidence
)

// modelLedgerID is the audience of the model's signed evidence.
const modelLedgerID = "ledger-model"

// modelOp is one operation of the script and, once run, its answer.
type modelOp struct {
	kind   modelKind
	opID   int               // the business operation it creates or targets
	status ledger.TaskStatus // modelReport
	amount int64             // modelHold: the new hold
	at     time.Time         // modelReport: the observation's time
	budget string            // the budget whose entries bracket it
	before int               // budget entries committed before it was sent
	after  int               // and once it was answered
	target uuid.UUID         // the delegation it acted on (not modelCreate)
	ran    bool              // false: its target was not created yet
	err    error
	got    ledger.Delegation           // the delegation answered
	added  bool                        // modelCreate: a new delegation
	res    compensation.EvidenceResult // modelEvidence: the answer
	// conflict, for modelEvidence: the other kind of evidence, sent only
	// once the delegation stores its own (token), to be refused unwritten.
	conflict bool
	token    []byte
}

// modelCreation is the creation every repeat of business operation i
// sends: its budget and its amount (a few more than any budget holds).
func modelCreation(i int) (budget string, amount int64) {
	budget = fmt.Sprintf("m%d", i%modelBudgets)
	amount = int64(100 + (i*7919)%15*100)
	if i%17 == 5 {
		amount = modelFunded + 1
	}
	return budget, amount
}

func modelOpName(i int) string { return fmt.Sprintf("mop-%02d", i) }

// modelSeed is QUITTANCE_COALESCE_SEED, or the time.
func modelSeed(t *testing.T) uint64 {
	t.Helper()
	if s := os.Getenv("QUITTANCE_COALESCE_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("QUITTANCE_COALESCE_SEED: %v", err)
		}
		return seed
	}
	return uint64(time.Now().UnixNano())
}

// modelScript is each caller's operations, drawn from rng.
func modelScript(rng *rand.Rand) [][]*modelOp {
	statuses := []ledger.TaskStatus{ledger.StatusWorking, ledger.StatusCanceled, ledger.StatusFailed, ledger.StatusCompleted}
	at := epoch.Add(-time.Hour)
	script := make([][]*modelOp, modelCallers)
	for c := range script {
		for range modelPerCalls {
			o := &modelOp{opID: rng.IntN(modelOpIDs)}
			switch r := rng.IntN(12); {
			case r < 4:
				o.kind = modelCreate
			case r < 7:
				o.kind, o.status = modelReport, statuses[rng.IntN(len(statuses))]
				at = at.Add(time.Millisecond)
				o.at = at
			case r < 8:
				o.kind = modelCancel
			case r < 10:
				o.kind, o.amount = modelHold, int64(50+rng.IntN(40)*50)
			default:
				o.kind, o.conflict = modelEvidence, rng.IntN(3) == 0
			}
			o.budget, _ = modelCreation(o.opID)
			script[c] = append(script[c], o)
		}
	}
	return script
}

// TestCoalescedModel: random interleavings of creations (some repeated,
// some beyond their budget), task status reports, cancellations, hold
// changes and compensation evidence (repeated, and conflicting evidence
// refused) through the coalescer agree with the obligation machine and the
// budget arithmetic replayed in the database's serial order; each refusal
// for funds is one the budget could not cover at some point between its
// sending and its answer; the invariants hold and every chain verifies.
// QUITTANCE_COALESCE_SEED replays a seed.
func TestCoalescedModel(t *testing.T) {
	t.Parallel()
	seed := modelSeed(t)
	t.Logf("seed %d (QUITTANCE_COALESCE_SEED=%d replays it)", seed, seed)
	b, log := setupCoalesced(t, pgstore.Coalescing{MaxBatch: 16, Flushers: 2})
	ctx := context.Background()
	for i := range modelBudgets {
		id := fmt.Sprintf("m%d", i)
		if _, _, err := b.svc.PutBudget(ctx, oncall, id, ledger.BudgetInput{Currency: "EUR", FundedMinor: modelFunded}); err != nil {
			t.Fatalf("PutBudget: %v", err)
		}
		holdsFor(t, b.store, id, orch.Tenant)
	}
	if _, _, err := b.svc.PutOrg(ctx, oncall, "globex", ledger.OrgInput{Name: "Globex"}); err != nil {
		t.Fatalf("PutOrg: %v", err)
	}
	kit := newModelEvidence(t, b)
	script := modelScript(rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)))
	var (
		mu      sync.Mutex
		created = map[int]uuid.UUID{}
		flushed atomic.Int64
	)
	var wg sync.WaitGroup
	for _, ops := range script {
		wg.Go(func() {
			for _, o := range ops {
				mu.Lock()
				id, ok := created[o.opID]
				mu.Unlock()
				if o.kind != modelCreate && !ok {
					continue
				}
				o.ran, o.target = true, id
				o.before = modelEntries(t, b, o.budget)
				runModelOp(ctx, b, kit, o)
				o.after = modelEntries(t, b, o.budget)
				if o.kind == modelCreate && o.err == nil {
					mu.Lock()
					created[o.opID] = o.got.ID
					mu.Unlock()
				}
				flushed.Add(1)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	checkModel(t, b, script)
	modelMix(t, script)
	sizes, _ := log.snapshot()
	carried := 0
	for _, n := range sizes {
		carried += n
	}
	t.Logf("seed %d: %d operations run, %d flushes carried %d transactions (largest %d)", seed, flushed.Load(), len(sizes), carried, slices.Max(sizes))
	if len(sizes) >= carried || slices.Max(sizes) < 2 {
		t.Errorf("%d flushes carried %d transactions: the coalescer never batched", len(sizes), carried)
	}
	checkInvariants(t, b)
	if t.Failed() {
		t.Logf("failed with seed %d", seed)
	}
}

// modelEntries is the number of budget's committed entries: they commit
// in id order under the budget's row lock, so what is visible is a prefix.
func modelEntries(t *testing.T, b bundle, budget string) int {
	var n int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM budget_entries WHERE budget_id = $1`, budget).Scan(&n); err != nil {
		t.Errorf("count entries: %v", err)
	}
	return n
}

// runModelOp sends o through the services and notes its answer.
func runModelOp(ctx context.Context, b bundle, kit *modelEvidenceKit, o *modelOp) {
	switch o.kind {
	case modelCreate:
		budget, amount := modelCreation(o.opID)
		in := creation(modelOpName(o.opID), "globex", amount)
		in.BudgetID = budget
		o.got, o.added, o.err = b.svc.CreateDelegation(ctx, orch, in)
	case modelReport:
		o.got, o.err = b.comp().ReportTaskStatus(ctx, orch, o.target, compObservation(o.status, o.at))
	case modelCancel:
		o.got, o.err = b.svc.RequestCancel(ctx, orch, o.target)
	case modelHold:
		o.got, o.err = b.svc.ChangeHold(ctx, orch, o.target, o.amount)
	case modelEvidence:
		kind, token := kit.token(o.opID, o.target)
		if o.conflict {
			kind, token, o.conflict = kit.conflicting(o.opID, o.target)
		}
		o.token = token
		o.res, o.err = kit.comp.Submit(ctx, kind, token, "127.0.0.1")
		o.got = o.res.Delegation
		if o.err == nil && (o.res.Outcome == compensation.OutcomeReceived || o.res.Outcome == compensation.OutcomeApplied) {
			kit.mu.Lock()
			kit.stored[o.target] = true
			kit.mu.Unlock()
		}
	}
}

// modelRefusal: err is one of the answers the model allows, a refusal.
func modelRefusal(err error) bool {
	var conflict *ledger.ConflictError
	var transition *ledger.TransitionError
	var ref *compensation.RefusalError
	if errors.As(err, &ref) {
		return ref.Code == compensation.CodeEvidenceNotExpected
	}
	return errors.Is(err, ledger.ErrInsufficientFunds) || errors.As(err, &conflict) || errors.As(err, &transition)
}

// modelDelegation is a delegation replayed from its stream.
type modelDelegation struct {
	state   ledger.ObligationState
	states  map[ledger.ObligationState]bool // every state it passed through
	hold    int64                           // the hold now
	minHold int64                           // the least hold it had
	budget  string
}

// checkModel replays the database against the model and compares.
func checkModel(t *testing.T, b bundle, script [][]*modelOp) {
	t.Helper()
	ctx := context.Background()
	delegations := map[uuid.UUID]*modelDelegation{}
	byOp := map[string]uuid.UUID{}
	rows, err := b.pool.Query(ctx, `SELECT id, business_operation_id FROM delegations`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id uuid.UUID
		var op string
		if err := rows.Scan(&id, &op); err != nil {
			t.Fatal(err)
		}
		byOp[op] = id
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for op, id := range byOp {
		delegations[id] = replayDelegation(t, b, op, id)
	}
	accepted := map[int]bool{}
	for _, ops := range script {
		for _, o := range ops {
			checkAnswer(t, o, delegations, byOp)
			if o.ran && o.kind == modelCreate && o.err == nil {
				accepted[o.opID] = true
			}
		}
	}
	checkModelEvidence(t, script, delegations)
	checkConflictsUnwritten(t, b, script)
	for op := range modelOpIDs {
		if _, ok := byOp[modelOpName(op)]; ok != accepted[op] {
			t.Errorf("business operation %s: a delegation %v, an accepted creation %v", modelOpName(op), ok, accepted[op])
		}
	}
	available := checkBudgets(t, b, delegations)
	for _, ops := range script {
		for _, o := range ops {
			if !errors.Is(o.err, ledger.ErrInsufficientFunds) {
				continue
			}
			need := o.amount
			if o.kind == modelCreate {
				_, need = modelCreation(o.opID)
			} else if d := delegations[o.target]; d != nil {
				need -= d.minHold
			}
			if !slices.ContainsFunc(available[o.budget][o.before:o.after+1], func(a int64) bool { return a < need }) {
				t.Errorf("%s (kind %d, amount %d, delegation %s) refused for funds (%v), needing %d, while %s had %v available between its sending and its answer (entries %d to %d)",
					modelOpName(o.opID), o.kind, o.amount, o.target, o.err, need, o.budget, available[o.budget][o.before:o.after+1], o.before, o.after)
			}
		}
	}
}

// checkAnswer compares one operation's answer with the model.
func checkAnswer(t *testing.T, o *modelOp, delegations map[uuid.UUID]*modelDelegation, byOp map[string]uuid.UUID) {
	t.Helper()
	if !o.ran {
		return
	}
	var ref *compensation.RefusalError
	if o.conflict != (errors.As(o.err, &ref) && ref.Code == compensation.CodeEvidenceConflict) {
		t.Errorf("evidence for %s (delegation %s), conflicting %v: answered %v", modelOpName(o.opID), o.target, o.conflict, o.err)
	}
	if o.conflict {
		return
	}
	if o.err != nil {
		if !modelRefusal(o.err) {
			t.Errorf("%s (kind %d): unexpected answer %v", modelOpName(o.opID), o.kind, o.err)
		}
		return
	}
	if o.kind == modelEvidence && !modelEvidenceAnswer(t, o) {
		return
	}
	if o.kind == modelCreate && o.got.ID != byOp[modelOpName(o.opID)] {
		t.Errorf("creation of %s answered delegation %s, the database has %s", modelOpName(o.opID), o.got.ID, byOp[modelOpName(o.opID)])
	}
	d := delegations[o.got.ID]
	if d == nil {
		t.Errorf("%s (kind %d) answered delegation %s, which the database does not have", modelOpName(o.opID), o.kind, o.got.ID)
		return
	}
	if !d.states[o.got.ObligationState] {
		t.Errorf("%s (kind %d) answered obligation %s, which its stream never reached", modelOpName(o.opID), o.kind, o.got.ObligationState)
	}
}

// replayDelegation replays delegation id's stream through the obligation
// machine and the hold's changes, and compares the row with the result.
func replayDelegation(t *testing.T, b bundle, op string, id uuid.UUID) *modelDelegation {
	t.Helper()
	ctx := context.Background()
	events, err := b.store.StreamEvents(ctx, "delegation:"+id.String())
	if err != nil {
		t.Fatal(err)
	}
	if err := ledger.VerifyChain(events); err != nil {
		t.Errorf("delegation %s: chain: %v", id, err)
	}
	m := &modelDelegation{states: map[ledger.ObligationState]bool{}}
	for i, e := range events {
		if i == 0 {
			if e.Type != ledger.EventTypeDelegationCreated {
				t.Errorf("delegation %s begins with %s", id, e.Type)
			}
			var n int
			fmt.Sscanf(op, "mop-%d", &n)
			_, m.hold = modelCreation(n)
			m.state, m.minHold = ledger.ObligationHeld, m.hold
			m.states[m.state] = true
			continue
		}
		if e.Type == ledger.EventTypeHoldChanged {
			var data struct {
				Hold struct {
					Old int64 `json:"old_amount_minor"`
					New int64 `json:"new_amount_minor"`
				} `json:"hold"`
			}
			if err := json.Unmarshal(e.Data, &data); err != nil {
				t.Fatal(err)
			}
			if m.state != ledger.ObligationHeld || data.Hold.Old != m.hold {
				t.Errorf("delegation %s: hold changed from %d in %s; the model holds %d", id, data.Hold.Old, m.state, m.hold)
			}
			m.hold, m.minHold = data.Hold.New, min(m.minHold, data.Hold.New)
		}
		if e.ObligationTo == "" || e.ObligationTo == e.ObligationFrom {
			continue
		}
		if e.ObligationFrom != m.state || !slices.ContainsFunc(ledger.ObligationEvents, func(ev ledger.ObligationEvent) bool {
			to, _, err := ledger.NextObligation(m.state, ev)
			return err == nil && to == e.ObligationTo
		}) {
			t.Errorf("delegation %s event %d (%s): %s to %s, the machine is in %s and cannot", id, e.StreamSeq, e.Type, e.ObligationFrom, e.ObligationTo, m.state)
		}
		m.state = e.ObligationTo
		m.states[m.state] = true
	}
	got, err := b.store.Delegation(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got.ObligationState != m.state || got.Hold.AmountMinor != m.hold {
		t.Errorf("delegation %s: %s holding %d; the model: %s holding %d", id, got.ObligationState, got.Hold.AmountMinor, m.state, m.hold)
	}
	m.budget = got.BudgetID
	return m
}

// checkBudgets replays each budget's entries in id order (its commit
// order) and returns, per budget, the amount available after each prefix of
// them; it checks no prefix overdraws, that the rows equal the replay, and
// that what each delegation holds is its hold while active, none after.
func checkBudgets(t *testing.T, b bundle, delegations map[uuid.UUID]*modelDelegation) map[string][]int64 {
	t.Helper()
	ctx := context.Background()
	out := map[string][]int64{}
	for i := range modelBudgets {
		id := fmt.Sprintf("m%d", i)
		rows, err := b.pool.Query(ctx, `SELECT kind, amount_minor, coalesce(delegation_id::text, '') FROM budget_entries WHERE budget_id = $1 ORDER BY id`, id)
		if err != nil {
			t.Fatal(err)
		}
		var available, held int64
		series := []int64{0}
		holding := map[string]int64{}
		for rows.Next() {
			var kind, delegation string
			var amount int64
			if err := rows.Scan(&kind, &amount, &delegation); err != nil {
				t.Fatal(err)
			}
			switch ledger.BudgetMoveKind(kind) {
			case ledger.MoveFund:
				available += amount
			case ledger.MoveHold:
				available, held = available-amount, held+amount
				holding[delegation] += amount
			case ledger.MoveReturn:
				available, held = available+amount, held-amount
				holding[delegation] -= amount
			case ledger.MoveSpend, ledger.MoveWriteOff:
				held -= amount
				holding[delegation] -= amount
			}
			if available < 0 || held < 0 {
				t.Errorf("budget %s overdrawn after entry %d: available %d, held %d", id, len(series), available, held)
			}
			series = append(series, available)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		var rowAvailable, rowHeld int64
		if err := b.pool.QueryRow(ctx, `SELECT available_minor, held_minor FROM budgets WHERE id = $1`, id).Scan(&rowAvailable, &rowHeld); err != nil {
			t.Fatal(err)
		}
		var modelHeld int64
		for did, d := range delegations {
			var want int64
			if !d.state.Terminal() {
				want = d.hold
			}
			if d.budget == id {
				modelHeld += want
				if holding[did.String()] != want {
					t.Errorf("delegation %s (%s) holds %d of %s; the model: %d", did, d.state, holding[did.String()], id, want)
				}
			}
		}
		if rowAvailable != available || rowHeld != held || held != modelHeld || available+held > modelFunded {
			t.Errorf("budget %s: available %d held %d; its entries give %d and %d, its delegations hold %d", id, rowAvailable, rowHeld, available, held, modelHeld)
		}
		out[id] = series
	}
	return out
}

// TestCoalescedRefusalAfterWhatItRestsOn: a creation refused for funds
// that an earlier creation of its flush held is answered only once that
// one has committed, so that its caller then finds the funds held.
func TestCoalescedRefusalAfterWhatItRestsOn(t *testing.T) {
	t.Parallel()
	b, _ := setupCoalesced(t, pgstore.Coalescing{MaxBatch: 16, Flushers: 1})
	fixtures(t, b, 1_000)
	ctx := context.Background()
	var seen int64
	errs := together(t, b.store,
		func() error {
			_, _, err := b.svc.CreateDelegation(ctx, orch, creation("first", "globex", 800))
			return err
		},
		func() error {
			_, _, err := b.svc.CreateDelegation(ctx, orch, creation("second", "globex", 500))
			seen, _, _ = budgetState(t, b, "ops")
			return err
		},
	)
	if errs[0] != nil || !errors.Is(errs[1], ledger.ErrInsufficientFunds) {
		t.Fatalf("answers %v, %v; want the first accepted, the second refused for funds", errs[0], errs[1])
	}
	if seen != 200 {
		t.Errorf("the refused caller found %d available, want 200: it was answered before the hold it rests on was committed", seen)
	}
}

// modelMix logs how each kind of operation was answered and fails a run
// that did not exercise the model: every kind accepted, some creation
// repeated, some refusal for funds.
func modelMix(t *testing.T, script [][]*modelOp) {
	t.Helper()
	var accepted, refused [5]int
	outcomes := map[compensation.Outcome]int{}
	var repeats, funds int
	for _, ops := range script {
		for _, o := range ops {
			switch {
			case !o.ran:
			case o.err == nil:
				accepted[o.kind]++
				if o.kind == modelEvidence {
					outcomes[o.res.Outcome]++
				}
				if o.kind == modelCreate && !o.added {
					repeats++
				}
			default:
				refused[o.kind]++
				if errors.Is(o.err, ledger.ErrInsufficientFunds) {
					funds++
				}
			}
		}
	}
	t.Logf("accepted (create, report, cancel, hold, evidence) %v, refused %v; %d repeated creations, %d refusals for funds; evidence answered %v", accepted, refused, repeats, funds, outcomes)
	if slices.Contains(accepted[:modelEvidence], 0) || repeats == 0 || funds == 0 {
		t.Error("the run did not exercise every kind of operation, a repeat and a refusal for funds")
	}
}

// modelEvidenceKit signs the model's compensation evidence: one token per
// delegation, an ack of the whole hold for an even business operation, a
// no_compensation_required declaration for an odd one, so that every
// submission after the first is a repeat of the same evidence.
type modelEvidenceKit struct {
	t      *testing.T
	signer *compensationtest.Signer
	comp   *compensation.Service
	mu     sync.Mutex
	tokens map[uuid.UUID][]byte
	stored map[uuid.UUID]bool // delegations answered received or applied
}

// newModelEvidence registers a signer's key as globex's and returns the kit.
func newModelEvidence(t *testing.T, b bundle) *modelEvidenceKit {
	t.Helper()
	signer := compensationtest.NewEd25519Signer(t, "globex-model")
	b.setGlobexKey(t, signer)
	return &modelEvidenceKit{
		t: t, signer: signer, tokens: map[uuid.UUID][]byte{}, stored: map[uuid.UUID]bool{},
		comp: compensation.NewService(compensation.Config{Store: b.store.Compensation(), Clock: fixedClock{epoch}, LedgerID: modelLedgerID}),
	}
}

// modelEvidenceKind is the evidence business operation i's delegation gets.
func modelEvidenceKind(i int) compensation.TokenKind {
	if i%2 == 0 {
		return compensation.KindAck
	}
	return compensation.KindDeclaration
}

// token is delegation id's evidence, signed on first use.
func (k *modelEvidenceKit) token(i int, id uuid.UUID) (compensation.TokenKind, []byte) {
	k.mu.Lock()
	defer k.mu.Unlock()
	kind := modelEvidenceKind(i)
	if tok, ok := k.tokens[id]; ok {
		return kind, tok
	}
	task := "task-" + modelOpName(i)
	claims := compensationtest.DeclarationClaims("globex", modelLedgerID, task, epoch)
	if kind == compensation.KindAck {
		claims = compensationtest.AckClaims("globex", modelLedgerID, task, ledger.CompensationKey(ledger.Delegation{ID: id}), epoch)
	}
	tok := []byte(k.signer.Sign(k.t, string(kind), claims))
	k.tokens[id] = tok
	return kind, tok
}

// conflicting is, once delegation id stores its evidence, a fresh token
// of the other kind for it, and true; before, its own token and false.
func (k *modelEvidenceKit) conflicting(i int, id uuid.UUID) (compensation.TokenKind, []byte, bool) {
	k.mu.Lock()
	stored := k.stored[id]
	k.mu.Unlock()
	if !stored {
		kind, tok := k.token(i, id)
		return kind, tok, false
	}
	task := "task-" + modelOpName(i)
	if modelEvidenceKind(i) == compensation.KindAck {
		return compensation.KindDeclaration, []byte(k.signer.Sign(k.t, string(compensation.KindDeclaration), compensationtest.DeclarationClaims("globex", modelLedgerID, task, epoch))), true
	}
	claims := compensationtest.AckClaims("globex", modelLedgerID, task, ledger.CompensationKey(ledger.Delegation{ID: id}), epoch)
	return compensation.KindAck, []byte(k.signer.Sign(k.t, string(compensation.KindAck), claims)), true
}

// modelEvidenceState is the state evidence of business operation i
// releases the obligation to.
func modelEvidenceState(i int) ledger.ObligationState {
	if modelEvidenceKind(i) == compensation.KindAck {
		return ledger.ObligationCompensated
	}
	return ledger.ObligationReleased
}

// modelEvidenceAnswer checks an accepted evidence submission's outcome
// against the state it answered: applied only by the obligation's own
// release, received (held as early evidence) only while the task runs,
// late only once the obligation finished.
func modelEvidenceAnswer(t *testing.T, o *modelOp) bool {
	t.Helper()
	st := o.got.ObligationState
	ok := true
	switch o.res.Outcome {
	case compensation.OutcomeApplied:
		ok = st == modelEvidenceState(o.opID)
	case compensation.OutcomeReceived:
		ok = st == ledger.ObligationHeld
	case compensation.OutcomeLateEvidence:
		ok = st.Terminal() && st != modelEvidenceState(o.opID)
	case compensation.OutcomeDuplicate:
	default:
		ok = false
	}
	if !ok {
		t.Errorf("evidence for %s (delegation %s) answered %s with the obligation %s", modelOpName(o.opID), o.target, o.res.Outcome, st)
	}
	if o.got.ID != o.target {
		t.Errorf("evidence for %s answered delegation %s, sent for %s", modelOpName(o.opID), o.got.ID, o.target)
		return false
	}
	return ok
}

// checkModelEvidence: each delegation's evidence is applied at most once;
// a delegation whose evidence was applied ends in the state it releases
// to, holding nothing (checkBudgets: its hold returned); a duplicate
// answer follows a submission of the same evidence that was taken.
func checkModelEvidence(t *testing.T, script [][]*modelOp, delegations map[uuid.UUID]*modelDelegation) {
	t.Helper()
	applied := map[uuid.UUID]int{}
	taken := map[uuid.UUID]bool{}
	duplicate := map[uuid.UUID]int{}
	for _, ops := range script {
		for _, o := range ops {
			if !o.ran || o.kind != modelEvidence || o.err != nil {
				continue
			}
			switch o.res.Outcome {
			case compensation.OutcomeDuplicate:
				duplicate[o.target] = o.opID
			case compensation.OutcomeApplied:
				applied[o.target]++
				taken[o.target] = true
				if d := delegations[o.target]; d != nil && d.state != modelEvidenceState(o.opID) {
					t.Errorf("evidence for %s (delegation %s) applied; the delegation ends %s, the model: %s", modelOpName(o.opID), o.target, d.state, modelEvidenceState(o.opID))
				}
			default:
				taken[o.target] = true
			}
		}
	}
	for id, n := range applied {
		if n > 1 {
			t.Errorf("delegation %s: its evidence applied %d times", id, n)
		}
	}
	for id, op := range duplicate {
		if !taken[id] {
			t.Errorf("evidence for %s (delegation %s) answered as a duplicate, and no submission of it was taken", modelOpName(op), id)
		}
	}
}

// checkConflictsUnwritten: conflicting evidence was refused before it
// wrote anything of its own: its jti is not used, and the one event that
// carries it is the evidence_conflict Submit records on the delegation's
// chain after the refusal, which moves no obligation.
func checkConflictsUnwritten(t *testing.T, b bundle, script [][]*modelOp) {
	t.Helper()
	ctx := context.Background()
	for _, ops := range script {
		for _, o := range ops {
			if !o.ran || !o.conflict {
				continue
			}
			sum := sha256.Sum256(o.token)
			var used, conflicts, others int
			if err := b.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM used_token_ids WHERE token_sha256 = $1),
				(SELECT count(*) FILTER (WHERE type = $3 AND delegation_id = $4 AND coalesce(obligation_to, obligation_from, '') = coalesce(obligation_from, '')) FROM events WHERE evidence = $2),
				(SELECT count(*) FILTER (WHERE NOT (type = $3 AND delegation_id = $4 AND coalesce(obligation_to, obligation_from, '') = coalesce(obligation_from, ''))) FROM events WHERE evidence = $2)`,
				sum[:], string(o.token), string(ledger.EventTypeEvidenceConflict), o.target).Scan(&used, &conflicts, &others); err != nil {
				t.Fatal(err)
			}
			if used != 0 || conflicts != 1 || others != 0 {
				t.Errorf("conflicting evidence for %s (delegation %s), refused: %d used token rows, %d evidence_conflict events, %d other events carry it; want 0, 1, 0", modelOpName(o.opID), o.target, used, conflicts, others)
			}
		}
	}
}
