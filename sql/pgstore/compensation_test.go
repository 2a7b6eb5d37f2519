package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/migrations"
	"github.com/quittance/quittance/sql/pgstore"
	"github.com/quittance/quittance/sql/pgtest"
)

// canceledDelegations creates n procurement delegations whose tasks were
// canceled at epoch, so each is revocation_pending_compensation with a
// deadline 72h later.
func canceledDelegations(t *testing.T, store *pgstore.Store, n int) []ledger.Delegation {
	t.Helper()
	ctx := context.Background()
	svc := ledger.NewService(ledger.Config{Store: store, Clock: fixedClock{epoch}})
	comp := compensation.NewService(compensation.Config{Store: store.Compensation(), Clock: fixedClock{epoch}})
	if _, _, err := svc.PutBudget(ctx, oncall, "comp", ledger.BudgetInput{Currency: "EUR", FundedMinor: 1_000_000}); err != nil {
		t.Fatal(err)
	}
	holdsFor(t, store, "comp", orch.Tenant)
	if _, _, err := svc.PutOrg(ctx, oncall, "initech", ledger.OrgInput{Name: "Initech"}); err != nil {
		t.Fatal(err)
	}
	out := make([]ledger.Delegation, n)
	for i := range out {
		d, _, err := svc.CreateDelegation(ctx, orch, ledger.CreateInput{
			BusinessOperationID: fmt.Sprintf("comp-%d", i), OrgID: "initech", TaskClass: "procurement", BudgetID: "comp",
			Hold: ledger.Money{AmountMinor: 10, Currency: "EUR"}, Remote: ledger.RemoteTask{TaskID: fmt.Sprintf("task-comp-%d", i)},
		})
		if err != nil {
			t.Fatal(err)
		}
		if out[i], err = comp.ReportTaskStatus(ctx, orch, d.ID, compensation.Observation{Status: ledger.StatusCanceled}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestClaimPastDeadlineSkipsLocked: a delegation locked by one transaction
// is invisible to another's claim, and only delegations past their deadline
// are claimed.
func TestClaimPastDeadlineSkipsLocked(t *testing.T) {
	t.Parallel()
	store := pgstore.New(pgtest.Pool(t))
	ds := canceledDelegations(t, store, 3)
	cs := store.Compensation()
	ctx := context.Background()
	due := epoch.Add(ledger.DefaultCompensationTimeout)

	if err := cs.InTx(ctx, func(tx compensation.Tx) error {
		got, err := tx.ClaimPastDeadline(ctx, due.Add(-time.Microsecond), 10)
		if err != nil || len(got) != 0 {
			t.Errorf("before the deadline: claimed %d, %v", len(got), err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	locked := make(chan uuid.UUID)
	release := make(chan struct{})
	holder := make(chan error)
	go func() {
		holder <- cs.InTx(ctx, func(tx compensation.Tx) error {
			got, err := tx.ClaimPastDeadline(ctx, due, 1)
			if err != nil {
				return err
			}
			if len(got) != 1 {
				return fmt.Errorf("first claim got %d rows", len(got))
			}
			locked <- got[0].ID
			<-release
			return nil
		})
	}()
	first := <-locked
	err := cs.InTx(ctx, func(tx compensation.Tx) error {
		got, err := tx.ClaimPastDeadline(ctx, due, 10)
		if err != nil {
			return err
		}
		if len(got) != len(ds)-1 {
			return fmt.Errorf("second claim got %d rows, want %d", len(got), len(ds)-1)
		}
		for _, d := range got {
			if d.ID == first {
				return errors.New("second claim took the row the first one holds")
			}
		}
		return nil
	})
	close(release)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-holder; err != nil {
		t.Fatal(err)
	}
}

// TestUsedTokensAndWriteOffs: a jti is recorded once per org, and write-offs
// round-trip, with at most one pending per delegation.
func TestUsedTokensAndWriteOffs(t *testing.T) {
	t.Parallel()
	store := pgstore.New(pgtest.Pool(t))
	d := canceledDelegations(t, store, 1)[0]
	cs := store.Compensation()
	ctx := context.Background()
	requester := uuid.New()

	u := compensation.UsedToken{OrgID: "initech", JTI: "j-1", DelegationID: d.ID, TokenSHA256: []byte{1, 2, 3}, UsedAt: epoch}
	w := compensation.WriteOff{
		ID: uuid.New(), DelegationID: d.ID, Amount: d.Hold, Reason: "lost", Reference: "INC-1",
		Status: compensation.WriteOffPendingApproval, RequestedBy: "alice", RequestedByID: requester, CreatedAt: epoch,
	}
	err := cs.InTx(ctx, func(tx compensation.Tx) error {
		if _, err := tx.UsedToken(ctx, "initech", "j-1"); !errors.Is(err, ledger.ErrNotFound) {
			return fmt.Errorf("unused jti: %v, want ErrNotFound", err)
		}
		for i, want := range []bool{true, false} {
			ok, err := tx.InsertUsedToken(ctx, u)
			if err != nil || ok != want {
				return fmt.Errorf("insert %d: inserted %v, %v; want %v", i, ok, err, want)
			}
		}
		got, err := tx.UsedToken(ctx, "initech", "j-1")
		if err != nil || got.DelegationID != d.ID || string(got.TokenSHA256) != string(u.TokenSHA256) {
			return fmt.Errorf("used token %+v, %v", got, err)
		}
		if _, err := tx.WriteOffForUpdate(ctx, w.ID); !errors.Is(err, ledger.ErrNotFound) {
			return fmt.Errorf("write-off before it is inserted: %v", err)
		}
		if err := tx.InsertWriteOff(ctx, w); err != nil {
			return err
		}
		p, err := tx.WriteOffForUpdate(ctx, w.ID)
		if err != nil || p.Status != compensation.WriteOffPendingApproval || p.RequestedBy != "alice" || p.Amount != d.Hold {
			return fmt.Errorf("pending write-off %+v, %v", p, err)
		}
		w.Status, w.ApprovedBy, w.ApprovedByID, w.ExecutedAt = compensation.WriteOffExecuted, "bob", uuid.New(), epoch
		return tx.UpdateWriteOff(ctx, w)
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := cs.WriteOff(ctx, w.ID)
	if err != nil || got.Status != compensation.WriteOffExecuted || got.ApprovedBy != "bob" || !got.ExecutedAt.Equal(epoch) {
		t.Fatalf("write-off %+v, %v", got, err)
	}
	if _, err := cs.WriteOff(ctx, uuid.New()); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("missing write-off: %v", err)
	}
	// The schema refuses an approver who is the requester.
	err = cs.InTx(ctx, func(tx compensation.Tx) error {
		w2 := w
		w2.ID, w2.Status, w2.ApprovedBy, w2.ApprovedByID, w2.ExecutedAt = uuid.New(), compensation.WriteOffPendingApproval, "", uuid.Nil, time.Time{}
		if err := tx.InsertWriteOff(ctx, w2); err != nil {
			return err
		}
		w2.Status, w2.ApprovedBy, w2.ApprovedByID = compensation.WriteOffExecuted, "alice", requester
		return tx.UpdateWriteOff(ctx, w2)
	})
	if err == nil {
		t.Fatal("a write-off approved by its requester was stored")
	}
}

// TestPendingWriteOffBackfill: migrating to 00006 names, on each
// delegation, the write-off that was already awaiting approval, so the
// database passes CheckInvariants right after the upgrade.
func TestPendingWriteOffBackfill(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := pgstore.New(pool)
	ctx := context.Background()
	ds := canceledDelegations(t, store, 2)
	comp := compensation.NewService(compensation.Config{
		Store: store.Compensation(), Clock: fixedClock{epoch}, WriteOffApprovalThresholdMinor: 1,
	})
	requested, err := comp.RequestWriteOff(ctx, oncall, ds[0].ID, compensation.WriteOffInput{Reason: "supplier gone"})
	if err != nil || requested.WriteOff.Status != compensation.WriteOffPendingApproval {
		t.Fatalf("request write-off: %+v, %v", requested.WriteOff, err)
	}

	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	migrate, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrate.DownTo(ctx, 5); err != nil {
		t.Fatalf("down to 00005: %v", err)
	}
	if _, err := migrate.UpTo(ctx, 6); err != nil {
		t.Fatalf("up to 00006: %v", err)
	}
	if _, err := migrate.Up(ctx); err != nil { // the later migrations the store reads
		t.Fatalf("up: %v", err)
	}
	pool.Reset() // statements prepared before the column was re-added

	for i, want := range []uuid.UUID{requested.WriteOff.ID, uuid.Nil} {
		d, err := store.Delegation(ctx, ds[i].ID)
		if err != nil || d.PendingWriteOffID != want {
			t.Fatalf("delegation %d: pending write-off %s (%v), want %s", i, d.PendingWriteOffID, err, want)
		}
	}
	rep, err := pgstore.CheckInvariants(ctx, pool)
	if err != nil || len(rep.Violations) > 0 {
		t.Fatalf("invariants after the upgrade: %v %v", rep.Violations, err)
	}
}

// TestCompensationEvidenceRoundTrip: the evidence kept under a
// delegation's compensation idempotency key reads back as written — its
// receipt byte for byte, numbers like 1e2 included, so the status event
// that later applies early evidence hashes exactly what the remote sent —
// and a second put changes only its status and decision time.
func TestCompensationEvidenceRoundTrip(t *testing.T) {
	t.Parallel()
	store := pgstore.New(pgtest.Pool(t))
	d := canceledDelegations(t, store, 1)[0]
	cs := store.Compensation()
	ctx := context.Background()
	receipt := `{"outcome":"compensated","reversedMinor":1e2,"fee":-0,"taskId":"task-comp-0"}`
	e := ledger.StoredEvidence{
		DelegationID: d.ID, IdempotencyKey: ledger.CompensationKey(d), Kind: ledger.EventCompensationAck,
		Channel: ledger.ChannelAtomicCancel, PayloadSHA256: []byte{9, 8, 7}, Status: ledger.EvidenceReceived,
		Receipt: []byte(receipt), Data: []byte(`{"channel":"atomic_cancel"}`), Token: "a.b.c", ReceivedAt: epoch,
	}
	err := cs.InTx(ctx, func(tx compensation.Tx) error {
		if _, err := tx.CompensationEvidence(ctx, d.ID); !errors.Is(err, ledger.ErrNotFound) {
			return fmt.Errorf("evidence before any: %v, want ErrNotFound", err)
		}
		if err := tx.PutCompensationEvidence(ctx, e); err != nil {
			return err
		}
		got, err := tx.CompensationEvidence(ctx, d.ID)
		if err != nil {
			return err
		}
		if string(got.Receipt) != receipt || got.Status != ledger.EvidenceReceived || got.Token != "a.b.c" ||
			got.Kind != ledger.EventCompensationAck || !got.ReceivedAt.Equal(epoch) || !got.DecidedAt.IsZero() {
			return fmt.Errorf("read back %+v (receipt %s)", got, got.Receipt)
		}
		changed := e
		changed.Status, changed.DecidedAt = ledger.EvidenceApplied, epoch.Add(time.Hour)
		changed.Kind, changed.PayloadSHA256, changed.Token = ledger.EventDeclarationVerified, []byte{1}, "other"
		if err := tx.PutCompensationEvidence(ctx, changed); err != nil {
			return err
		}
		got, err = tx.CompensationEvidence(ctx, d.ID)
		if err != nil {
			return err
		}
		if got.Status != ledger.EvidenceApplied || !got.DecidedAt.Equal(epoch.Add(time.Hour)) ||
			got.Kind != ledger.EventCompensationAck || got.Token != "a.b.c" || string(got.PayloadSHA256) != string(e.PayloadSHA256) {
			return fmt.Errorf("after the second put %+v: only status and decided_at may change", got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
