package pgstore_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/pgstore"
	"github.com/quittance/quittance/sql/pgtest"
)

// TestCheckpointsFromReplicasAtOnce: replicas, each on its own pool, sign
// checkpoints at once while events are appended. They take turns: the ids
// run 1..n with no gap or duplicate, each checkpoint chains to the one
// before, verifies with the ledger's keys, and never signs a head older
// than the checkpoint before it. The periodic loop signs nothing while no
// stream moves, and one checkpoint once one does, however many replicas
// run it.
func TestCheckpointsFromReplicasAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.URL(t)
	raw, err := compensation.NewIdentityFile("test", epoch)
	if err != nil {
		t.Fatal(err)
	}
	identity, err := compensation.LoadIdentity("quittance", raw)
	if err != nil {
		t.Fatal(err)
	}
	const replicas, perReplica = 4, 8
	stores := make([]*pgstore.Store, replicas)
	cps := make([]*ledger.Checkpoints, replicas)
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
		cps[i] = ledger.NewCheckpoints(stores[i], identity, "quittance", nil, nil)
	}
	svc := ledger.NewService(ledger.Config{Store: stores[0], Clock: fixedClock{epoch}})
	if _, _, err := svc.PutBudget(ctx, oncall, "ops", "EUR", 1); err != nil {
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
			if _, _, err := svc.PutBudget(ctx, oncall, "ops", "EUR", int64(n+2)); err != nil {
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
		t.Fatalf("%d checkpoints, want %d", len(list), replicas*perReplica)
	}
	var prev *ledger.CheckpointPayload
	var prevJWS string
	for i, c := range list {
		p, kid, err := compensation.VerifyCheckpoint(c.JWS, identity.JWKS(), "quittance")
		if err != nil || kid != identity.ActiveKeyID() {
			t.Fatalf("checkpoint %d does not verify: %v (kid %s)", c.ID, err, kid)
		}
		if p.ID != int64(i+1) || c.ID != p.ID {
			t.Fatalf("checkpoint %d at position %d (payload id %d)", c.ID, i, p.ID)
		}
		if prev != nil {
			sum := sha256.Sum256([]byte(prevJWS))
			if p.Previous != hex.EncodeToString(sum[:]) || !p.At.After(prev.At) {
				t.Errorf("checkpoint %d does not follow %d", p.ID, prev.ID)
			}
			seqs := map[string]int32{}
			for _, h := range p.Streams {
				seqs[h.Stream] = h.Seq
			}
			for _, h := range prev.Streams {
				if seqs[h.Stream] < h.Seq {
					t.Errorf("checkpoint %d signs %s at %d, older than checkpoint %d's %d", p.ID, h.Stream, seqs[h.Stream], prev.ID, h.Seq)
				}
			}
		}
		prev, prevJWS = &p, c.JWS
	}
	// Signed after the last funding, a checkpoint covers the budget's head.
	after, err := cps[2].Create(ctx, oncall)
	if err != nil {
		t.Fatal(err)
	}
	final, _ := stores[0].StreamEvents(ctx, "budget:ops")
	var signed ledger.CheckpointPayload
	if err := json.Unmarshal(after.Payload, &signed); err != nil {
		t.Fatal(err)
	}
	if last := signed.Streams[len(signed.Streams)-1]; last.Stream != "budget:ops" || int(last.Seq) != len(final) {
		t.Errorf("the checkpoint after the last funding signs %+v; the budget has %d events", last, len(final))
	}
	const signedBefore = replicas*perReplica + 1

	// The periodic loop, on every replica: nothing moved, nothing signed.
	runFor := func() {
		runCtx, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
		defer cancel()
		var wg sync.WaitGroup
		for _, c := range cps {
			wg.Go(func() { _ = c.Run(runCtx, 20*time.Millisecond) })
		}
		wg.Wait()
	}
	count := func() int {
		l, err := cps[0].List(ctx, oncall, 0, 500)
		if err != nil {
			t.Fatal(err)
		}
		return len(l)
	}
	runFor()
	if n := count(); n != signedBefore {
		t.Errorf("the periodic loop signed %d checkpoints over unchanged heads", n-signedBefore)
	}
	if _, _, err := svc.PutBudget(ctx, oncall, "ops", "EUR", 100); err != nil {
		t.Fatal(err)
	}
	runFor()
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
	if _, err := ledger.NewCheckpoints(stores[0], nil, "quittance", nil, nil).Create(ctx, oncall); err == nil {
		t.Error("a checkpoint without a signing key")
	}
}
