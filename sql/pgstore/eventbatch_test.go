package pgstore_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/ledger"
)

// TestCoalescedTaskStatusesShareOneEventStatement: a flush of task
// statuses of three delegations writes their events in one statement.
// Each status reads its delegation's evidence facts, which the pre-read
// answers (served.go), so no operation's read waits for the events of the
// operations before it.
func TestCoalescedTaskStatusesShareOneEventStatement(t *testing.T) {
	t.Parallel()
	b, names, ds := setupUpdateBatches(t, 3)
	ops := make([]func() error, len(ds))
	for i, d := range ds {
		ops[i] = func() error {
			_, err := b.comp().ReportTaskStatus(context.Background(), orch, d.ID, compObservation(ledger.StatusCanceled, epoch.Add(time.Second)))
			return err
		}
	}
	for i, err := range together(t, b.store, ops...) {
		if err != nil {
			t.Fatalf("status %d: %v", i, err)
		}
	}
	// The pre-read answers the three reads of evidence facts (served.go).
	if sent := names.sent(); sent["EvidenceFactsGet"] != 0 || sent["DelegationsServedForFlush"] != 1 || sent["EventInsertBatch"] != 1 {
		t.Errorf("sent %d EvidenceFactsGet, %d DelegationsServedForFlush and %d EventInsertBatch, want 0, 1 and 1",
			sent["EvidenceFactsGet"], sent["DelegationsServedForFlush"], sent["EventInsertBatch"])
	}
	for _, d := range ds {
		if got := stored(t, b, d).ObligationState; got != ledger.ObligationRevocationPendingCompensation {
			t.Errorf("delegation %s is %s", d.ID, got)
		}
	}
}

// TestCoalescedFactsSeeABufferedDispatchResolution: the evidence facts
// of a delegation whose dispatch_resolved event an earlier operation of
// the same flush appended are read after that event is written, and say
// that a person resolved the dispatch.
func TestCoalescedFactsSeeABufferedDispatchResolution(t *testing.T) {
	t.Parallel()
	b, names, ds := setupUpdateBatches(t, 2)
	resolve := func(d ledger.Delegation) func() error {
		return func() error {
			ctx := context.Background()
			return b.store.InTx(ctx, func(tx ledger.Tx) error {
				_, err := tx.AppendEvent(ctx, ledger.Event{
					Stream: "delegation:" + d.ID.String(), DelegationID: d.ID, Type: ledger.EventTypeDispatchResolved,
					At: epoch, Actor: "oncall", Data: []byte(`{"found_by": "oncall"}`),
				})
				return err
			})
		}
	}
	resolved := make([]bool, len(ds))
	facts := func(i int) func() error {
		return func() error {
			ctx := context.Background()
			return b.store.InTx(ctx, func(tx ledger.Tx) error {
				r, ok := tx.(interface{ Receipts() compensation.ReceiptTx })
				if !ok {
					return fmt.Errorf("%T reads no evidence facts", tx)
				}
				if _, err := tx.DelegationForUpdate(ctx, ds[i].ID); err != nil {
					return err
				}
				f, err := r.Receipts().EvidenceFacts(ctx, ds[i].ID)
				resolved[i] = f.ResolvedByPerson
				return err
			})
		}
	}
	// The first delegation's resolution, then both delegations' facts.
	for i, err := range together(t, b.store, resolve(ds[0]), facts(1), facts(0)) {
		if err != nil {
			t.Fatalf("operation %d: %v", i, err)
		}
	}
	if !resolved[0] || resolved[1] {
		t.Errorf("resolved by a person: %v, want [true false]", resolved)
	}
	// The second delegation's facts did not write the buffer; the first's
	// did: the events went out between the two reads.
	var reads []string
	for _, name := range names.inOrder() {
		if name == "EvidenceFactsGet" || name == "EventInsertBatch" {
			reads = append(reads, name)
		}
	}
	if want := []string{"EvidenceFactsGet", "EventInsertBatch", "EvidenceFactsGet"}; !slices.Equal(reads, want) {
		t.Errorf("sent %v, want %v", reads, want)
	}
	checkInvariants(t, b) // a pre-read serves the resolution by a person too
}

// TestCoalescedLifecycleFlushWritesEachBufferOnce: a flush carrying each
// call of the lifecycle twice (two creations, two task statuses, two
// signed acks) sends each buffer's statement once, at its end. No
// operation's read makes an earlier operation's buffered rows go out
// early: each read that names a delegation waits only for that
// delegation's rows. A task status's gate policy (GatePolicy) once wrote
// the buffered creations before it, so a flush of the lifecycle sent two
// inserts of delegations (pg_stat_statements on a bench run).
func TestCoalescedLifecycleFlushWritesEachBufferOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, names, ds := setupUpdateBatches(t, 4)
	kit := newModelEvidence(t, b)
	// The last two wait for compensation, to be acked in the flush.
	for _, d := range ds[2:] {
		if _, err := b.comp().ReportTaskStatus(ctx, orch, d.ID, compObservation(ledger.StatusCanceled, epoch.Add(time.Second))); err != nil {
			t.Fatal(err)
		}
	}
	names.sent()
	names.roundTrips()
	var c1, c2 created
	status := func(d ledger.Delegation) func() error {
		return func() error {
			_, err := b.comp().ReportTaskStatus(ctx, orch, d.ID, compObservation(ledger.StatusCanceled, epoch.Add(time.Second)))
			return err
		}
	}
	ack := func(d ledger.Delegation) func() error {
		return func() error {
			claims := compensationtest.AckClaims("globex", modelLedgerID, d.Remote.TaskID, ledger.CompensationKey(d), epoch)
			res, err := kit.comp.Submit(ctx, compensation.KindAck, []byte(kit.signer.Sign(t, string(compensation.KindAck), claims)), "127.0.0.1")
			if err == nil && res.Outcome != compensation.OutcomeApplied {
				err = fmt.Errorf("ack of %s: %s", d.ID, res.Outcome)
			}
			return err
		}
	}
	for i, err := range together(t, b.store,
		create(b, creation("new-1", "globex", 10), &c1), status(ds[0]), ack(ds[2]),
		create(b, creation("new-2", "globex", 10), &c2), status(ds[1]), ack(ds[3]),
	) {
		if err != nil {
			t.Fatalf("operation %d: %v", i, err)
		}
	}
	sent := names.sent()
	for _, name := range []string{"DelegationInsertBatch", "DelegationUpdateBatch", "EventInsertBatch", "UsedTokenInsertBatch", "CompensationEvidencePutBatch", "BudgetMoveBatch",
		"DelegationsServedForFlush", "CreationReferencesForFlush", "UsedTokensForFlush"} {
		if sent[name] != 1 {
			t.Errorf("sent %d %s, want 1", sent[name], name)
		}
	}
	// The pre-read answers what the operations read (served.go): none
	// sends a statement of its own, so the flush makes three round trips
	// (the pre-read; the buffers and the budgets' lock; their movement
	// and the COMMIT).
	for _, name := range []string{"DelegationGetByIDForUpdateWithDispatch", "GatePolicy", "EvidenceFactsGet",
		"DelegationListByRemoteTaskForUpdate", "OrgGetByID", "UsedTokenGet", "CreationReferences"} {
		if sent[name] != 0 {
			t.Errorf("sent %d %s, want none", sent[name], name)
		}
	}
	trips := slices.DeleteFunc(names.roundTrips(), func(trip string) bool { return trip == "FeedNotify" }) // the wake-ups, sent apart
	if len(trips) != 3 {
		t.Errorf("the flush made %d round trips, want 3:\n%s", len(trips), strings.Join(trips, "\n"))
	}
	checkInvariants(t, b)
}
