package pgstore_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/internal/jose"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/audit"
	"github.com/quittance/quittance/sql/pgstore"
	"github.com/quittance/quittance/sql/pgtest"
)

// TestCheckpointsFromReplicasAtOnce: replicas, each on its own pool, sign
// checkpoints at once while events are appended. They take turns: the ids
// run 1..n with no gap or duplicate, each checkpoint chains to the one
// before, verifies with the ledger's keys, and never signs a head older
// than the one signed before it. The periodic loop signs nothing while no
// stream moves, and one checkpoint once one does, however many replicas
// run it.
func TestCheckpointsFromReplicasAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, dbURL := pgtest.Cluster(t) // the feed's cut waits for other tests' transactions
	identity := newIdentity(t)
	const replicas, perReplica = 4, 8
	stores := make([]*pgstore.Store, replicas)
	cps := make([]*audit.Checkpoints, replicas)
	for i := range stores {
		cfg, err := pgxpool.ParseConfig(dbURL)
		if err != nil {
			t.Fatal(err)
		}
		cfg.MaxConns = 2
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		stores[i] = pgstore.New(pool)
		cps[i] = audit.NewCheckpoints(stores[i], compensation.CheckpointSigner{Identity: identity}, "quittance", nil, nil)
	}
	svc := ledger.NewService(ledger.Config{Store: stores[0], Clock: fixedClock{epoch}})
	if _, _, err := svc.PutBudget(ctx, oncall, "ops", ledger.BudgetInput{Currency: "EUR", FundedMinor: 1}); err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	for i := range cps {
		wg.Go(func() {
			for range perReplica {
				if _, err := cps[i].Create(ctx, oncall); err != nil {
					t.Errorf("replica %d: %v", i, err)
				}
			}
		})
	}
	wg.Go(func() {
		for n := range 20 {
			if _, _, err := svc.PutBudget(ctx, oncall, "ops", ledger.BudgetInput{Currency: "EUR", FundedMinor: int64(n + 2)}); err != nil {
				t.Errorf("fund: %v", err)
			}
		}
	})
	wg.Wait()

	list, err := cps[0].List(ctx, oncall, 0, 500)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != replicas*perReplica {
		// Each Create signs one checkpoint: the events before it are all
		// final by then, so one span covers them.
		t.Fatalf("%d checkpoints, want %d", len(list), replicas*perReplica)
	}
	var prev *audit.CheckpointPayload
	var prevJWS string
	signed := audit.SignedHeads{}
	for i, c := range list {
		p, kid, err := compensation.VerifyCheckpoint(c.JWS, identity.JWKS(), "quittance")
		if err != nil || kid != identity.ActiveKeyID() {
			t.Fatalf("checkpoint %d does not verify: %v (kid %s)", c.ID, err, kid)
		}
		if p.ID != int64(i+1) || c.ID != p.ID {
			t.Fatalf("checkpoint %d at position %d (payload id %d)", c.ID, i, p.ID)
		}
		if prev != nil {
			if err := audit.CheckpointFollows(*prev, prevJWS, p); err != nil {
				t.Error(err)
			}
		}
		for _, h := range p.Streams {
			if old, ok := signed[h.Stream]; ok && h.Seq <= old.Seq {
				t.Errorf("checkpoint %d signs %s at %d, not past checkpoint %d's %d", p.ID, h.Stream, h.Seq, old.Checkpoint, old.Seq)
			}
		}
		signed.Add(p)
		prev, prevJWS = &p, c.JWS
	}
	// Signed after the last funding, the checkpoints cover the budget's head.
	after, err := cps[2].Create(ctx, oncall)
	if err != nil {
		t.Fatal(err)
	}
	var last audit.CheckpointPayload
	if err := json.Unmarshal(after.Payload, &last); err != nil {
		t.Fatal(err)
	}
	signed.Add(last)
	final, _ := stores[0].StreamEvents(ctx, "budget:ops")
	if h := signed["budget:ops"]; int(h.Seq) != len(final) || h.Hash != hex.EncodeToString(final[len(final)-1].Hash) {
		t.Errorf("after the last funding the checkpoints sign %+v; the budget has %d events", h, len(final))
	}
	const signedBefore = replicas*perReplica + 1

	// The periodic loop, on every replica: nothing moved, nothing signed.
	// An event is signed once it is final, which a transaction held open
	// elsewhere in the cluster (another test) can delay, so the loops run
	// until want checkpoints exist, or for window when none should appear.
	count := func() int {
		l, err := cps[0].List(ctx, oncall, 0, 500)
		if err != nil {
			t.Fatal(err)
		}
		return len(l)
	}
	runUntil := func(want int, window time.Duration) {
		runCtx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for _, c := range cps {
			wg.Go(func() { _ = c.Run(runCtx, 20*time.Millisecond) })
		}
		deadline := time.Now().Add(window)
		for time.Now().Before(deadline) && count() < want {
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(200 * time.Millisecond) // a late duplicate would show here
		cancel()
		wg.Wait()
	}
	runUntil(signedBefore+1, 400*time.Millisecond)
	if n := count(); n != signedBefore {
		t.Errorf("the periodic loop signed %d checkpoints over unchanged heads", n-signedBefore)
	}
	if _, _, err := svc.PutBudget(ctx, oncall, "ops", ledger.BudgetInput{Currency: "EUR", FundedMinor: 100}); err != nil {
		t.Fatal(err)
	}
	runUntil(signedBefore+1, 30*time.Second)
	if n := count(); n != signedBefore+1 {
		t.Errorf("after one event the periodic loops signed %d checkpoints, want 1", n-signedBefore)
	}
	latest, err := cps[1].Latest(ctx, oncall)
	if err != nil || latest.ID != int64(signedBefore+1) || latest.CreatedBy != "system:checkpoints" {
		t.Errorf("latest: %+v, %v", latest, err)
	}
	// Orchestrators read no checkpoints; without a key there are none to sign.
	if _, err := cps[0].Latest(ctx, orch); err == nil {
		t.Error("an orchestrator read the latest checkpoint")
	}
	if _, err := audit.NewCheckpoints(stores[0], nil, "quittance", nil, nil).Create(ctx, oncall); err == nil {
		t.Error("a checkpoint without a signing key")
	}
}

// TestCheckpointsAreIncremental: a checkpoint signs only the streams that
// moved since the one before it, and no more events than its span limit,
// so a database with more takes several checkpoints in a row. Folded, they
// sign every stream's head; the store finds, for a stream, the checkpoint
// that signed its latest signed head.
func TestCheckpointsAreIncremental(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := pgstore.New(pgtest.PrivatePool(t)) // the feed's cut waits for other tests' transactions
	identity := newIdentity(t)
	cps := audit.NewCheckpoints(store, compensation.CheckpointSigner{Identity: identity}, "quittance", nil, nil)
	const spanLimit = 3
	cps.SetSpanLimit(spanLimit)
	svc := ledger.NewService(ledger.Config{Store: store, Clock: fixedClock{epoch}})
	budgets := []string{"a", "b", "c", "d", "e"}
	for round := range 2 {
		for _, b := range budgets {
			if _, _, err := svc.PutBudget(ctx, oncall, b, ledger.BudgetInput{Currency: "EUR", FundedMinor: int64(round + 1)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	readAll := func(after int64) []audit.CheckpointPayload {
		list, err := cps.List(ctx, oncall, after, 500)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]audit.CheckpointPayload, len(list))
		for i, c := range list {
			if out[i], _, err = compensation.VerifyCheckpoint(c.JWS, identity.JWKS(), "quittance"); err != nil {
				t.Fatal(err)
			}
			if c.Through != out[i].Through || c.Streams != len(out[i].Streams) {
				t.Errorf("checkpoint %d is stored with through %d and %d streams; it signs %d and %d", c.ID, c.Through, c.Streams, out[i].Through, len(out[i].Streams))
			}
		}
		return out
	}
	headOf := func(stream string) audit.StreamHead {
		events, err := store.StreamEvents(ctx, stream)
		if err != nil || len(events) == 0 {
			t.Fatalf("%s: %d events, %v", stream, len(events), err)
		}
		e := events[len(events)-1]
		return audit.StreamHead{Stream: stream, Seq: e.StreamSeq, Hash: hex.EncodeToString(e.Hash)}
	}

	// Ten events (and the principals' own): several checkpoints, one Create.
	last, err := cps.Create(ctx, oncall)
	if err != nil {
		t.Fatal(err)
	}
	all := readAll(0)
	if len(all) < 4 || all[len(all)-1].ID != last.ID {
		t.Fatalf("%d checkpoints over ten events or more with spans of %d, ending at %d; want at least 4, ending at the one Create returned (%d)",
			len(all), spanLimit, all[len(all)-1].ID, last.ID)
	}
	heads := audit.SignedHeads{}
	for _, p := range all {
		if len(p.Streams) > spanLimit || len(p.Streams) == 0 {
			t.Errorf("checkpoint %d signs %d heads; a span holds 1..%d events", p.ID, len(p.Streams), spanLimit)
		}
		heads.Add(p)
	}
	for _, b := range budgets {
		if got, want := heads["budget:"+b].StreamHead, headOf("budget:"+b); got != want {
			t.Errorf("signed head of budget:%s is %+v, want %+v", b, got, want)
		}
	}

	// One stream moves: the next checkpoint signs it alone.
	if _, _, err := svc.PutBudget(ctx, oncall, "c", ledger.BudgetInput{Currency: "EUR", FundedMinor: 9}); err != nil {
		t.Fatal(err)
	}
	if _, err := cps.Create(ctx, oncall); err != nil {
		t.Fatal(err)
	}
	next := readAll(last.ID)
	if len(next) != 1 || len(next[0].Streams) != 1 || next[0].Streams[0] != headOf("budget:c") {
		t.Fatalf("after one event on budget:c the next checkpoints are %+v, want one signing budget:c's head", next)
	}
	// Nothing moved: on demand, an empty checkpoint, through where it was.
	empty, err := cps.Create(ctx, oncall)
	if err != nil {
		t.Fatal(err)
	}
	if empty.Streams != 0 || empty.Through != next[0].Through {
		t.Errorf("an on-demand checkpoint with nothing moved: %d streams, through %d; want 0, %d", empty.Streams, empty.Through, next[0].Through)
	}

	// The checkpoint that signed each stream's latest signed head.
	signing := func(stream string) int64 {
		c, err := store.CheckpointSigning(ctx, stream)
		if err != nil {
			t.Fatalf("%s: %v", stream, err)
		}
		return c.ID
	}
	if got := signing("budget:c"); got != next[0].ID {
		t.Errorf("budget:c was last signed by checkpoint %d; the store names %d", next[0].ID, got)
	}
	if got, want := signing("budget:a"), heads["budget:a"].Checkpoint; got != want {
		t.Errorf("budget:a was last signed by checkpoint %d; the store names %d", want, got)
	}
	// An event no checkpoint covers yet leaves the signing checkpoint as it was.
	if _, _, err := svc.PutBudget(ctx, oncall, "a", ledger.BudgetInput{Currency: "EUR", FundedMinor: 9}); err != nil {
		t.Fatal(err)
	}
	if got, want := signing("budget:a"), heads["budget:a"].Checkpoint; got != want {
		t.Errorf("after an uncovered event budget:a is still signed by checkpoint %d; the store names %d", want, got)
	}
	if _, err := store.CheckpointSigning(ctx, "budget:none"); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("a stream with no events: %v, want ErrNotFound", err)
	}
	// Read back through the service, for an evidence pack.
	list, err := cps.Signing(ctx, oncall, "budget:c", "budget:a", "budget:c")
	if err != nil || len(list) != 2 || list[0].ID != heads["budget:a"].Checkpoint || list[1].ID != next[0].ID {
		t.Errorf("Signing(budget:c, budget:a, budget:c) = %v, %v; want checkpoints %d and %d", list, err, heads["budget:a"].Checkpoint, next[0].ID)
	}
}

// newIdentity is a fresh signing identity of ledger "quittance", as the
// service loads one from QUITTANCE_SIGNING_KEY_FILE.
func newIdentity(t *testing.T) *jose.Identity {
	t.Helper()
	raw, err := jose.NewIdentityFile("test", epoch)
	if err != nil {
		t.Fatal(err)
	}
	identity, err := jose.LoadIdentity("quittance", raw)
	if err != nil {
		t.Fatal(err)
	}
	return identity
}
