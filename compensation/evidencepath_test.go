package compensation_test

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/ledger"
)

// modulePrefix is the import path prefix of the module's packages.
const modulePrefix = "github.com/quittance/quittance/"

// transactionRunner is the package whose InTx calls a transaction's
// function back: it runs the transaction and is no step of the path, so
// the path is read as if the function were called directly.
const transactionRunner = modulePrefix + "sql/pgstore"

// pathRecorder keeps the package path of every write the evidence path
// makes (ledger/DESIGN.md §5), taken from the call stack at the write.
type pathRecorder struct {
	mu    sync.Mutex
	paths [][]string
}

// record notes the stack of the write being made, outermost first.
func (r *pathRecorder) record() {
	pcs := make([]uintptr, 128)
	n := runtime.Callers(2, pcs)
	frames := runtime.CallersFrames(pcs[:n])
	var inner []string
	for {
		f, more := frames.Next()
		if pkg, ok := modulePackage(f.Function); ok {
			inner = append(inner, pkg)
		}
		if !more {
			break
		}
	}
	path := make([]string, 0, len(inner))
	for i := len(inner) - 1; i >= 0; i-- {
		if len(path) == 0 || path[len(path)-1] != inner[i] {
			path = append(path, inner[i])
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.paths = append(r.paths, path)
}

// modulePackage is the package of a function named as runtime.Frame
// names it, when it is a step of the path: a package of the module other
// than a test package and the transaction runner.
func modulePackage(function string) (string, bool) {
	if !strings.HasPrefix(function, modulePrefix) {
		return "", false
	}
	slash := strings.LastIndex(function, "/")
	dot := strings.Index(function[slash:], ".")
	if dot < 0 {
		return "", false
	}
	pkg := function[:slash+dot]
	if strings.HasSuffix(pkg, "_test") || pkg == transactionRunner {
		return "", false
	}
	return strings.TrimPrefix(pkg, modulePrefix), true
}

// reentered returns the first package path enters again after leaving it
// (A→B→A), or "" when it crosses each boundary once. path has no two
// equal neighbours.
func reentered(path []string) string {
	seen := map[string]bool{}
	for _, pkg := range path {
		if seen[pkg] {
			return pkg
		}
		seen[pkg] = true
	}
	return ""
}

// recordingStore is the real compensation store, its transactions
// recording the path of each write.
type recordingStore struct {
	compensation.Store
	rec *pathRecorder
}

func (s recordingStore) InTx(ctx context.Context, fn func(compensation.Tx) error) error {
	return s.Store.InTx(ctx, func(tx compensation.Tx) error { return fn(recordingTx{Tx: tx, rec: s.rec}) })
}

// recordingTx is a real transaction that records the path of its writes
// of a delegation, its events and its budget.
type recordingTx struct {
	compensation.Tx
	rec *pathRecorder
}

func (t recordingTx) AppendEvent(ctx context.Context, e ledger.Event) (ledger.Event, error) {
	t.rec.record()
	return t.Tx.AppendEvent(ctx, e)
}

func (t recordingTx) UpdateDelegation(ctx context.Context, d ledger.Delegation) error {
	t.rec.record()
	return t.Tx.UpdateDelegation(ctx, d)
}

func (t recordingTx) MoveBudget(ctx context.Context, m ledger.BudgetMove) error {
	t.rec.record()
	return t.Tx.MoveBudget(ctx, m)
}

// TestEvidencePathCrossesEachBoundaryOnce: a delegation's evidence path,
// from a status report or a signed ack or declaration down to the writes
// of its delegation, events and budget, never enters a package it left
// (issue 24, ledger/DESIGN.md §5): the path goes down and never back up.
func TestEvidencePathCrossesEachBoundaryOnce(t *testing.T) {
	t.Parallel()
	for _, path := range [][]string{{"compensation", "ledger", "compensation"}, {"a", "b", "c", "a"}} {
		if reentered(path) == "" {
			t.Fatalf("the detector missed the re-entry in %v", path)
		}
	}
	if got := reentered([]string{"compensation", "ledger"}); got != "" {
		t.Fatalf("the detector flagged %q in a path that goes down", got)
	}

	start := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	b := setupDB(t, start)
	ctx := context.Background()
	signer := compensationtest.NewEd25519Signer(t, "org-b-1")
	if err := b.store.Compensation().InTx(ctx, func(tx compensation.Tx) error {
		org, err := tx.Revocation().OrgForUpdate(ctx, "org-b")
		if err != nil {
			return err
		}
		org.JWKS = signer.JWKS()
		return tx.Revocation().PutOrg(ctx, org)
	}); err != nil {
		t.Fatal(err)
	}
	acked := b.pending(t, "op-acked", 1000)
	declared := b.pending(t, "op-declared", 1000)
	early, _, err := b.ledger.CreateDelegation(ctx, orch, ledger.CreateInput{
		BusinessOperationID: "op-early", OrgID: "org-b", TaskClass: "procurement", BudgetID: "ops",
		Hold: ledger.Money{AmountMinor: 1000, Currency: "EUR"}, Remote: ledger.RemoteTask{TaskID: "task-op-early"},
	})
	if err != nil {
		t.Fatal(err)
	}
	completed, _, err := b.ledger.CreateDelegation(ctx, orch, ledger.CreateInput{
		BusinessOperationID: "op-completed", OrgID: "org-b", TaskClass: "procurement", BudgetID: "ops",
		Hold: ledger.Money{AmountMinor: 1000, Currency: "EUR"}, Remote: ledger.RemoteTask{TaskID: "task-op-completed"},
	})
	if err != nil {
		t.Fatal(err)
	}

	rec := &pathRecorder{}
	comp := compensation.NewService(compensation.Config{Store: recordingStore{Store: b.store.Compensation(), rec: rec}, Clock: b.clock, LedgerID: "ledger"})
	ack := compensationtest.AckClaims("org-b", "ledger", acked.Remote.TaskID, ledger.CompensationKey(acked), start)
	steps := []struct {
		name string
		run  func() error
	}{
		{"status report", func() error {
			_, err := comp.ReportTaskStatus(ctx, orch, completed.ID, compensation.Observation{Status: ledger.StatusCompleted})
			return err
		}},
		{"signed ack", func() error {
			_, err := comp.SubmitAck(ctx, []byte(signer.Sign(t, string(compensation.KindAck), ack)), "192.0.2.1")
			return err
		}},
		{"signed declaration", func() error {
			claims := compensationtest.DeclarationClaims("org-b", "ledger", declared.Remote.TaskID, start)
			_, err := comp.SubmitDeclaration(ctx, []byte(signer.Sign(t, string(compensation.KindDeclaration), claims)), "192.0.2.1")
			return err
		}},
		{"declaration before the status", func() error {
			claims := compensationtest.DeclarationClaims("org-b", "ledger", early.Remote.TaskID, start)
			_, err := comp.SubmitDeclaration(ctx, []byte(signer.Sign(t, string(compensation.KindDeclaration), claims)), "192.0.2.1")
			return err
		}},
		{"status report applying held evidence", func() error {
			_, err := comp.ReportTaskStatus(ctx, orch, early.ID, compensation.Observation{Status: ledger.StatusCanceled})
			return err
		}},
	}
	for _, step := range steps {
		rec.paths = nil
		if err := step.run(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if len(rec.paths) == 0 {
			t.Fatalf("%s: wrote nothing through the transaction", step.name)
		}
		for _, path := range rec.paths {
			if pkg := reentered(path); pkg != "" {
				t.Errorf("%s: the path %s enters %s again", step.name, strings.Join(path, " → "), pkg)
			}
		}
	}
}
