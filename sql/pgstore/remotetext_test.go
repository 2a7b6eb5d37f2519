package pgstore_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/migrations"
	"github.com/quittance/quittance/sql/pgstore"
)

// TestEventDataJSONBRewritesStillVerify: data that jsonb stores differently
// from how it was written — exponents, negative zero, trailing zeros,
// integers beyond 2^53, \u escapes, duplicate keys — and text it refuses
// (NUL, unpaired surrogates, a number too long for numeric) is appended,
// its chain verifies from what is stored, CheckInvariants agrees, and the
// jsonb copy queries read holds the same values.
func TestEventDataJSONBRewritesStillVerify(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	stream := "test:jsonb"
	bodies := []string{
		`{"n":1e2,"z":-0,"f":1.0,"g":1.50E+1,"small":1e-3}`,
		`{"big":9007199254740993,"huge":123456789012345678901234567890,"neg":-9007199254740993}`,
		`{"u":"caf\u00e9 \u003c\u2028 \ud83d\ude00","dup":1,"dup":2,"b":"z","a":"y"}`,
		`{"nul":"a\u0000b","key\u0000":true,"lone":"\ud800x","overflow":1e200000,"tiny":1e-20000}`,
		`[1e2,{"x":-0.0}]`,
	}
	err := b.store.InTx(ctx, func(tx ledger.Tx) error {
		for _, body := range bodies {
			if _, err := tx.AppendEvent(ctx, ledger.Event{Stream: stream, Type: "test", At: epoch, Actor: "remote\x00", Data: json.RawMessage(body)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	events, err := b.store.StreamEvents(ctx, stream)
	if err != nil || len(events) != len(bodies) {
		t.Fatalf("%d events (%v), want %d", len(events), err, len(bodies))
	}
	if err := ledger.VerifyChain(events); err != nil {
		t.Fatalf("chain: %v", err)
	}
	// Published (EventRecord) and read back, the chain verifies as
	// quittance verify-chain checks it.
	records := make([]ledger.Event, len(events))
	for i, e := range events {
		raw, _ := json.Marshal(ledger.NewEventRecord(e))
		var r ledger.EventRecord
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatal(err)
		}
		if records[i], err = r.Event(); err != nil {
			t.Fatal(err)
		}
	}
	if err := ledger.VerifyChain(records); err != nil {
		t.Fatalf("chain of the published records: %v", err)
	}
	for _, lit := range []string{`"n":1e2`, `"z":-0`, `"f":1.0`, `"g":1.50E+1`} {
		if !strings.Contains(string(events[0].Data), lit) {
			t.Errorf("stored data %s lost the literal %s", events[0].Data, lit)
		}
	}
	if s := string(events[2].Data); !strings.Contains(s, `"dup":2`) || strings.Contains(s, `"dup":1`) || !strings.HasPrefix(s, `{"a":`) {
		t.Errorf("duplicate keys or key order: %s", s)
	}
	if e := events[3]; e.Actor != "remote\uFFFD" {
		t.Errorf("actor %q", e.Actor)
	}
	var cleaned map[string]any
	if err := json.Unmarshal(events[3].Data, &cleaned); err != nil {
		t.Fatal(err)
	}
	if cleaned["nul"] != "a\uFFFDb" || cleaned["key\uFFFD"] != true || cleaned["lone"] != "\uFFFDx" ||
		cleaned["overflow"] != "1e200000" || cleaned["tiny"] != "1e-20000" {
		t.Errorf("cleaned data %s", events[3].Data)
	}
	if raw, err := base64.StdEncoding.DecodeString(cleaned[ledger.RawDataKey].(string)); err != nil || string(raw) != bodies[3] {
		t.Errorf("raw data kept %q (%v), want %q", raw, err, bodies[3])
	}
	// The jsonb copy has the same values.
	var n, z, big, dup string
	if err := b.pool.QueryRow(ctx, `SELECT (SELECT data->>'n' FROM events WHERE stream = $1 AND stream_seq = 1),
		(SELECT data->>'z' FROM events WHERE stream = $1 AND stream_seq = 1),
		(SELECT data->>'big' FROM events WHERE stream = $1 AND stream_seq = 2),
		(SELECT data->>'dup' FROM events WHERE stream = $1 AND stream_seq = 3)`, stream).Scan(&n, &z, &big, &dup); err != nil {
		t.Fatal(err)
	}
	if n != "100" || z != "0" || big != "9007199254740993" || dup != "2" {
		t.Errorf("jsonb copy: n=%s z=%s big=%s dup=%s", n, z, big, dup)
	}
	rep, err := pgstore.CheckInvariants(ctx, b.pool)
	if err != nil || len(rep.Violations) > 0 {
		t.Fatalf("invariants: %v %v", rep.Violations, err)
	}

	// Editing the jsonb copy around the trigger breaks the chain where it
	// is read, and CheckInvariants names it.
	tamper(t, b.pool, `UPDATE events SET data = jsonb_set(data, '{n}', '101') WHERE stream = '`+stream+`' AND stream_seq = 1`)
	events, err = b.store.StreamEvents(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	if err := ledger.VerifyChain(events); err == nil || !strings.Contains(err.Error(), "broken at 1") {
		t.Fatalf("chain after editing the jsonb copy: %v", err)
	}
	rep, err = pgstore.CheckInvariants(ctx, b.pool)
	if err != nil || !strings.Contains(strings.Join(rep.Violations, "\n"), "broken at 1: data does not equal the data its hash covers") {
		t.Fatalf("invariants after editing the jsonb copy: %v %v", rep.Violations, err)
	}
}

// TestRemoteTextInEveryColumn: text and JSON the database refuses, written
// through the store into plain columns (the org backoff's error, a task
// snapshot, a delegation's status message), is stored cleaned instead of
// failing the write.
func TestRemoteTextInEveryColumn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	d := b.delegation(t, "op-text")
	got, err := b.comp().ReportTaskStatus(ctx, orch, d.ID, compensation.Observation{Status: ledger.StatusWorking, Timestamp: epoch, Message: "half \xff and \x00"})
	if err != nil {
		t.Fatalf("report with a NUL: %v", err)
	}
	if want := "half \uFFFD and \uFFFD"; got.TaskStatusMessage != want {
		t.Fatalf("message %q, want %q", got.TaskStatusMessage, want)
	}
	err = b.store.A2A().InTx(ctx, func(tx delegate.Tx) error {
		if err := tx.Outbox().FailOrg(ctx, "globex", epoch.Add(time.Minute), "remote said \x00\xfe", epoch); err != nil {
			return err
		}
		return tx.PutTaskSnapshot(ctx, d.ID, delegate.TaskSnapshot{TaskID: "task-\x00", State: ledger.StatusWorking}, epoch)
	})
	if err != nil {
		t.Fatalf("write remote text: %v", err)
	}
	var lastError, taskID string
	if err := b.pool.QueryRow(ctx, `SELECT (SELECT last_error FROM a2a_org_backoff WHERE org_id = 'globex'),
		(SELECT snapshot->>'task_id' FROM task_snapshots WHERE delegation_id = $1)`, d.ID).Scan(&lastError, &taskID); err != nil {
		t.Fatal(err)
	}
	if lastError != "remote said \uFFFD\uFFFD" || taskID != "task-\uFFFD" {
		t.Fatalf("stored %q and %q", lastError, taskID)
	}
}

// TestMigrationKeepsOldChainsAndBackfillsLastObserved: events appended
// before 00010 (no hashed_data: the migration is undone and redone under
// them) still verify, and last_observed_at is filled from the last status
// event.
func TestMigrationKeepsOldChainsAndBackfillsLastObserved(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	d := b.delegation(t, "op-old")
	b.report(t, d.ID, ledger.StatusWorking, epoch)
	b.report(t, d.ID, ledger.StatusCompleted, epoch.Add(time.Second))

	db := stdlib.OpenDBFromPool(b.pool)
	defer db.Close()
	migrate, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrate.DownTo(ctx, 6); err != nil {
		t.Fatalf("down to 00006: %v", err)
	}
	if _, err := migrate.Up(ctx); err != nil {
		t.Fatalf("up: %v", err)
	}
	b.pool.Reset() // statements prepared before the columns were re-added

	var missing int
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE hashed_data IS NULL`).Scan(&missing); err != nil || missing == 0 {
		t.Fatalf("%d events without hashed_data (%v), want the old ones", missing, err)
	}
	events, err := b.store.StreamEvents(ctx, d.Stream())
	if err != nil || len(events) != 3 {
		t.Fatalf("%d events (%v)", len(events), err)
	}
	if err := ledger.VerifyChain(events); err != nil {
		t.Fatalf("an old chain after the migration: %v", err)
	}
	got, err := b.store.Delegation(ctx, d.ID)
	if err != nil || !got.LastObservedAt.Equal(events[2].At) {
		t.Fatalf("last_observed_at %v (%v), want the last status event's %v", got.LastObservedAt, err, events[2].At)
	}
	// New events chain onto the old ones.
	b.report(t, d.ID, ledger.StatusCanceled, epoch.Add(2*time.Second)) // a status_conflict
	rep, err := pgstore.CheckInvariants(ctx, b.pool)
	if err != nil || len(rep.Violations) > 0 {
		t.Fatalf("invariants after the migration: %v %v", rep.Violations, err)
	}
}
