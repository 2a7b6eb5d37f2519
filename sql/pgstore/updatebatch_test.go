package pgstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/pgstore"
	"github.com/quittance/quittance/sql/pgtest"
)

// setupUpdateBatches is setupCoalesced (one flusher) on a pool whose
// statements are counted by name, with the budget, the org and n
// delegations created.
func setupUpdateBatches(t *testing.T, n int) (bundle, *statementNames, []ledger.Delegation) {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	names := &statementNames{}
	cfg.ConnConfig.Tracer = names
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := pgstore.New(pool, pgstore.WithCoalescing(pgstore.Coalescing{MaxBatch: 16, Flushers: 1}))
	b := bundle{pool: pool, store: store, svc: ledger.NewService(ledger.Config{Store: store, Clock: fixedClock{epoch}})}
	fixtures(t, b, 10_000)
	ds := make([]ledger.Delegation, n)
	for i := range ds {
		d, _, err := b.svc.CreateDelegation(ctx, orch, creation(string(rune('a'+i)), "globex", 100))
		if err != nil {
			t.Fatal(err)
		}
		ds[i] = d
	}
	names.sent()
	return b, names, ds
}

// change locks id, lets edit (if any) see and change what it read, changes
// its status message to message and writes it back as version read+1+skip
// (skip 0: the version it read; more: a version that moved).
func change(b bundle, id ledger.Delegation, message string, skip int64, edit func(*ledger.Delegation)) func() error {
	return func() error {
		ctx := context.Background()
		return b.store.InTx(ctx, func(tx ledger.Tx) error {
			d, err := tx.DelegationForUpdate(ctx, id.ID)
			if err != nil {
				return err
			}
			if edit != nil {
				edit(&d)
			}
			d.TaskStatusMessage, d.Version = message, d.Version+1+skip
			return tx.UpdateDelegation(ctx, d)
		})
	}
}

// stored is the delegation as committed.
func stored(t *testing.T, b bundle, id ledger.Delegation) ledger.Delegation {
	t.Helper()
	d, err := b.store.Delegation(context.Background(), id.ID)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestCoalescedRefusedUpdateBatchIsAttributed: a flush's updates of
// delegations are written in one statement (updatebatch.go). A version
// that moved refuses exactly the operation whose update it was, though
// the statement carried its neighbours' too; they run again and commit. A
// statement PostgreSQL refuses (a CHECK constraint) is no one operation's:
// the flush's operations run again one at a time, and the one whose
// update was refused is answered with the constraint's refusal.
func TestCoalescedRefusedUpdateBatchIsAttributed(t *testing.T) {
	t.Parallel()
	b, names, ds := setupUpdateBatches(t, 3)
	errs := together(t, b.store,
		change(b, ds[0], "first", 0, nil),
		change(b, ds[1], "moved", 1, nil),
		change(b, ds[2], "third", 0, nil))
	if sent := names.sent(); sent["DelegationUpdateBatch"] < 1 || sent["DelegationUpdate"] != 0 {
		t.Errorf("the flush sent %d DelegationUpdateBatch and %d DelegationUpdate, want its updates batched", sent["DelegationUpdateBatch"], sent["DelegationUpdate"])
	}
	if !errors.Is(errs[1], ledger.ErrConcurrentUpdate) {
		t.Errorf("the update of a version that moved: %v, want ErrConcurrentUpdate", errs[1])
	}
	for _, i := range []int{0, 2} {
		if errs[i] != nil {
			t.Errorf("neighbour %d: %v", i, errs[i])
		}
		if d := stored(t, b, ds[i]); d.Version != ds[i].Version+1 || d.TaskStatusMessage == "" {
			t.Errorf("neighbour %d: version %d, message %q; want %d, its change", i, d.Version, d.TaskStatusMessage, ds[i].Version+1)
		}
	}
	if d := stored(t, b, ds[1]); d.Version != ds[1].Version || d.TaskStatusMessage != "" {
		t.Errorf("the refused one: version %d, message %q; want it unchanged", d.Version, d.TaskStatusMessage)
	}

	errs = together(t, b.store,
		change(b, ds[0], "again", 0, nil),
		change(b, ds[1], "negative", 0, func(d *ledger.Delegation) { d.Hold.AmountMinor = -1 }),
		change(b, ds[2], "again", 0, nil))
	var pgErr *pgconn.PgError
	if !errors.As(errs[1], &pgErr) || pgErr.Code != "23514" {
		t.Errorf("the update a CHECK constraint refuses: %v, want its check violation", errs[1])
	}
	for _, i := range []int{0, 2} {
		if errs[i] != nil {
			t.Errorf("neighbour %d: %v", i, errs[i])
		}
		if d := stored(t, b, ds[i]); d.Version != ds[i].Version+2 || d.TaskStatusMessage != "again" {
			t.Errorf("neighbour %d: version %d, message %q; want %d, again", i, d.Version, d.TaskStatusMessage, ds[i].Version+2)
		}
	}
	checkInvariants(t, b)
}

// TestCoalescedLaterOperationReadsEarlierUpdate: an operation reads the
// update of a delegation an operation before it in its flush buffered,
// though the flush writes its updates together: a read of that delegation,
// by id or by its remote task, writes the buffer first. A read of another
// delegation does not, so updates of different delegations share one
// statement.
func TestCoalescedLaterOperationReadsEarlierUpdate(t *testing.T) {
	t.Parallel()
	b, names, ds := setupUpdateBatches(t, 2)
	ctx := context.Background()
	var (
		byTask []ledger.Delegation
		read   ledger.Delegation
	)
	errs := together(t, b.store,
		change(b, ds[0], "first", 0, nil),
		change(b, ds[1], "other", 0, nil),
		change(b, ds[0], "second", 0, func(d *ledger.Delegation) { read = *d }),
		func() error {
			return b.store.InTx(ctx, func(tx ledger.Tx) error {
				var err error
				r := tx.(interface {
					DelegationsByRemoteTaskForUpdate(context.Context, string, string) ([]ledger.Delegation, error)
				})
				byTask, err = r.DelegationsByRemoteTaskForUpdate(ctx, "globex", ds[0].Remote.TaskID)
				return err
			})
		})
	for i, err := range errs {
		if err != nil {
			t.Errorf("operation %d: %v", i, err)
		}
	}
	if read.TaskStatusMessage != "first" || read.Version != ds[0].Version+1 {
		t.Errorf("the second change read message %q, version %d; want first, %d", read.TaskStatusMessage, read.Version, ds[0].Version+1)
	}
	if d := stored(t, b, ds[0]); d.TaskStatusMessage != "second" || d.Version != ds[0].Version+2 {
		t.Errorf("the twice-changed delegation: message %q, version %d; want second, %d", d.TaskStatusMessage, d.Version, ds[0].Version+2)
	}
	if len(byTask) != 1 || byTask[0].TaskStatusMessage != "second" || byTask[0].Version != ds[0].Version+2 {
		t.Errorf("the read by remote task saw %+v, want the second change", byTask)
	}
	if sent := names.sent(); sent["DelegationUpdateBatch"] != 2 || sent["DelegationUpdate"] != 0 {
		t.Errorf("the flush sent %d DelegationUpdateBatch and %d DelegationUpdate, want 2 and 0: the first two changes in one, the third written before the read by its task",
			sent["DelegationUpdateBatch"], sent["DelegationUpdate"])
	}
	checkInvariants(t, b)
}

// evidenceTx is the evidence part of a transaction.
type evidenceTx interface {
	CompensationEvidence(ctx context.Context, delegationID uuid.UUID) (ledger.StoredEvidence, error)
	PutCompensationEvidence(ctx context.Context, e ledger.StoredEvidence) error
}

// putEvidence stores an ack of d with idempotency key key, received and
// not decided yet, as an operation of its own.
func putEvidence(b bundle, d ledger.Delegation, key string) func() error {
	return func() error {
		ctx := context.Background()
		return b.store.InTx(ctx, func(tx ledger.Tx) error {
			return tx.(evidenceTx).PutCompensationEvidence(ctx, ledger.StoredEvidence{
				DelegationID: d.ID, IdempotencyKey: key, Kind: ledger.EventCompensationAck, Channel: ledger.ChannelHTTP,
				PayloadSHA256: []byte{1}, Status: ledger.EvidenceReceived, Receipt: []byte(`{}`), Data: []byte(`{"key":"` + key + `"}`),
				ReceivedAt: epoch,
			})
		})
	}
}

// TestCoalescedEvidenceBatch: a flush's compensation evidence is written in
// one statement (evidencebatch.go). A later operation reads an earlier
// one's buffered evidence; a refusal of the statement carrying several
// operations' rows (an idempotency key taken) replays them one at a time,
// and the one whose row was refused is answered with it.
func TestCoalescedEvidenceBatch(t *testing.T) {
	t.Parallel()
	b, names, ds := setupUpdateBatches(t, 3)
	ctx := context.Background()
	var read ledger.StoredEvidence
	errs := together(t, b.store,
		putEvidence(b, ds[0], "key-0"),
		putEvidence(b, ds[1], "key-1"),
		func() error {
			return b.store.InTx(ctx, func(tx ledger.Tx) error {
				var err error
				read, err = tx.(evidenceTx).CompensationEvidence(ctx, ds[0].ID)
				return err
			})
		})
	for i, err := range errs {
		if err != nil {
			t.Errorf("operation %d: %v", i, err)
		}
	}
	if read.IdempotencyKey != "key-0" || !read.ReceivedAt.Equal(epoch) || !read.DecidedAt.IsZero() || string(read.Data) != `{"key":"key-0"}` {
		t.Errorf("the later operation read %+v, want the evidence buffered before it", read)
	}
	if sent := names.sent(); sent["CompensationEvidencePutBatch"] != 1 {
		t.Errorf("the flush sent %d CompensationEvidencePutBatch, want 1", sent["CompensationEvidencePutBatch"])
	}

	errs = together(t, b.store, putEvidence(b, ds[2], "key-0"), putEvidence(b, ds[0], "key-0"))
	var pgErr *pgconn.PgError
	if !errors.As(errs[0], &pgErr) || pgErr.Code != "23505" {
		t.Errorf("evidence with a taken idempotency key: %v, want its unique violation", errs[0])
	}
	if errs[1] != nil {
		t.Errorf("its neighbour: %v", errs[1])
	}
	var n int
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM compensation_evidence`).Scan(&n); err != nil || n != 2 {
		t.Errorf("%d evidence rows (%v), want 2", n, err)
	}
	checkInvariants(t, b)
}
