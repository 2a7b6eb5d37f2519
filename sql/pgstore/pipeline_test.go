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
	"github.com/quittance/quittance/sql/pgstore"
)

// TestPipelinedFlushRoundTripsDoNotGrow: a flush runs its operations side
// by side and sends the reads they wait for together, so a flush of twelve
// task statuses on twelve delegations makes no more round trips than a
// flush of two (run one after the other, each status costs three reads of
// its own), and each is applied.
func TestPipelinedFlushRoundTripsDoNotGrow(t *testing.T) {
	t.Parallel()
	b, names := tracedStore(t)
	ctx := context.Background()
	var ds []ledger.Delegation
	for i := range 14 {
		d, _, err := b.svc.CreateDelegation(ctx, orch, creation(fmt.Sprintf("rt-%02d", i), "globex", 100))
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	flush := func(ds []ledger.Delegation) []string {
		ops := make([]func() error, len(ds))
		for i, d := range ds {
			ops[i] = func() error {
				_, err := b.comp().ReportTaskStatus(ctx, orch, d.ID, compObservation(ledger.StatusCanceled, epoch.Add(time.Second)))
				return err
			}
		}
		names.roundTrips()
		errs := together(t, b.store, ops...)
		// FeedNotify, after a commit, is no round trip of the flush.
		sent := slices.DeleteFunc(names.roundTrips(), func(s string) bool { return strings.Contains(s, "FeedNotify") })
		for i, err := range errs {
			if err != nil {
				t.Fatalf("status %d of %d: %v", i, len(ds), err)
			}
		}
		if commits := len(slices.DeleteFunc(slices.Clone(sent), func(s string) bool { return !strings.Contains(s, "COMMIT") })); commits != 1 {
			t.Fatalf("%d commits: the %d statuses were not flushed together", commits, len(ds))
		}
		return sent
	}
	two, twelve := flush(ds[:2]), flush(ds[2:])
	if len(twelve) > len(two) {
		t.Errorf("a flush of 12 made %d round trips, one of 2 made %d:\n%s", len(twelve), len(two), strings.Join(twelve, "\n"))
	}
	t.Logf("a flush of 12 task statuses: %d round trips\n%s", len(twelve), strings.Join(twelve, "\n"))
	for _, d := range ds {
		got, err := b.store.Delegation(ctx, d.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.TaskStatus != ledger.StatusCanceled {
			t.Errorf("delegation %s: task status %s, want canceled", d.ID, got.TaskStatus)
		}
	}
	checkInvariants(t, b)
}

// TestPipelinedStatusThenEvidenceOfOneDelegation: a task status naming a
// delegation by its id and evidence naming its remote task share no
// partition key, yet touch the same row; in one flush the evidence,
// queued second, runs after the status and sees the obligation it opened,
// as if they had run one after the other: it is applied, not held as
// early evidence of a running task.
func TestPipelinedStatusThenEvidenceOfOneDelegation(t *testing.T) {
	t.Parallel()
	b, log := setupCoalesced(t, pgstore.Coalescing{MaxBatch: 16, Flushers: 1})
	d := b.delegation(t, "op-1")
	signer := compensationtest.NewEd25519Signer(t, "globex-1")
	b.setGlobexKey(t, signer)
	ctx := context.Background()
	comp := compensation.NewService(compensation.Config{Store: b.store.Compensation(), Clock: fixedClock{epoch}, LedgerID: modelLedgerID})
	ack := signer.Sign(t, string(compensation.KindAck),
		compensationtest.AckClaims("globex", modelLedgerID, d.Remote.TaskID, ledger.CompensationKey(d), epoch))
	var res compensation.EvidenceResult
	errs := together(t, b.store,
		func() error {
			_, err := b.comp().ReportTaskStatus(ctx, orch, d.ID, compObservation(ledger.StatusCanceled, epoch.Add(time.Second)))
			return err
		},
		func() (err error) {
			res, err = comp.Submit(ctx, compensation.KindAck, []byte(ack), "127.0.0.1")
			return err
		},
	)
	if sizes, _ := log.snapshot(); !slices.Contains(sizes, 2) {
		t.Fatalf("flush sizes %v: the status and the evidence were not flushed together", sizes)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("operation %d: %v", i, err)
		}
	}
	if res.Outcome != compensation.OutcomeApplied {
		t.Errorf("the acknowledgement was answered %s, want %s", res.Outcome, compensation.OutcomeApplied)
	}
	got, err := b.store.Delegation(ctx, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ObligationState != ledger.ObligationCompensated {
		t.Errorf("obligation %s, want %s", got.ObligationState, ledger.ObligationCompensated)
	}
	checkInvariants(t, b)
}
