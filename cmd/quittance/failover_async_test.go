//go:build unix

package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/ledger/access"
	"github.com/quittance/quittance/sql/pgstore"
	"github.com/quittance/quittance/sql/pgtest"
)

// TestFailoverAsynchronousLoss shows what asynchronous replication can
// lose (deploy/OPERATIONS.md, "What asynchronous replication loses"): with
// four clients running lifecycles, the primary's WAL sender stalls (as a
// congested link leaves the standby behind) while the primary goes on
// acknowledging writes; an auditor exports the signed checkpoints (one is
// signed during the stall); the primary is killed and the standby
// promoted. Writes resume on the new primary, and it lacks every
// operation acknowledged during the stall, and nothing acknowledged
// before it. The ledger on the new primary is a consistent, earlier
// ledger: the invariant checks find nothing and verify-chain against the
// checkpoints it serves passes, so neither can see the loss; what sees it
// is a checkpoint exported before the failover: verify-chain --checkpoint
// with it reports the streams it signed as broken, and checkpoints export
// into the same directory reports that it differs or is missing.
func TestFailoverAsynchronousLoss(t *testing.T) {
	t.Parallel()
	pair := pgtest.ReplicatedAsync(t)
	dbURL := pair.URL()
	bootstrap := access.NewTokenSecret()
	api := newTestClient(inProcessService(t, dbURL, bootstrap, "QUITTANCE_CHECKPOINT_INTERVAL=1s"))
	signer := compensationtest.NewEd25519Signer(t, "supplier-key-1")
	orch, oncall, _ := fixtures(t, api, bootstrap, signer, nil)

	l := newLoad(t, api, orch, signer, "async")
	stop := make(chan struct{})
	wait := l.run(4, stop)
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
			wait()
		}
	}()
	time.Sleep(2 * time.Second)
	drop, err := pair.StallReplication(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	stalled := time.Now()
	// A checkpoint is signed during the stall, and the auditor exports it.
	cpAtStall := latestCheckpointID(t, api, oncall)
	deadline := time.Now().Add(20 * time.Second)
	for latestCheckpointID(t, api, oncall) <= cpAtStall {
		if time.Now().After(deadline) {
			drop()
			t.Fatal("no checkpoint signed during the stall")
		}
		time.Sleep(100 * time.Millisecond)
	}
	exported := t.TempDir()
	if out, errOut, code := runCLI(api.base, oncall, "checkpoints", "export", "--dir", exported); code != 0 {
		drop()
		t.Fatalf("checkpoints export before the failover: exit %d\n%s\n%s", code, out, errOut)
	}
	lagBytes := replicationLag(t, pair.Primary.URL(pair.Database))
	killed, err := pair.FailoverThen(t.Context(), drop)
	if err != nil {
		t.Fatalf("failover: %v", err)
	}
	l.waitRecovered(t, killed, 20*time.Second)
	close(stop)
	wait()

	after := testPool(t, dbURL)
	w := lostWindow(t, l, after, stalled)
	t.Logf("asynchronous replication: replication stalled %s before the kill, %d bytes of WAL behind; "+
		"the failover lost %d acknowledged answers of %d operations (%d of them wholly: their creation); "+
		"%d answers acknowledged before the stall kept, %d lost",
		killed.Sub(stalled).Round(time.Millisecond), lagBytes, w.lostAnswers, w.lostOps, w.lostCreations, w.keptBefore, w.lostBeforeStall)
	if w.lostAnswers == 0 {
		t.Error("no acknowledged answer was lost: the stall did not hold back an acknowledged write")
	}
	if w.lostBeforeStall > 0 {
		t.Errorf("%d answers acknowledged before the standby stalled were lost", w.lostBeforeStall)
	}

	// What the checks report on the new primary.
	rep, err := pgstore.CheckInvariants(t.Context(), after)
	if err != nil || len(rep.Violations) > 0 {
		t.Errorf("invariants on the new primary: %v %v; want none violated (an earlier ledger is a consistent one)", rep.Violations, err)
	}
	if out, errOut, code := runCLI(api.base, oncall, "verify-chain"); code != 0 {
		t.Errorf("verify-chain against the new primary's own checkpoints: exit %d\n%s\n%s", code, out, errOut)
	}
	files, _ := filepath.Glob(filepath.Join(exported, "checkpoint-*.jws"))
	last := newestFile(files)
	out, errOut, code := runCLI(api.base, oncall, "verify-chain", "--checkpoint", last)
	broken := strings.Count(out, "BROKEN")
	if code == 0 || broken == 0 {
		t.Errorf("verify-chain --checkpoint %s (signed during the stall): exit %d, %d BROKEN lines; want a break\n%s\n%s",
			filepath.Base(last), code, broken, out, errOut)
	}
	t.Logf("verify-chain --checkpoint %s, exported before the failover: exit %d, %d streams BROKEN, e.g.\n%s\n%s",
		filepath.Base(last), code, broken, firstLines(grepLines(out, "BROKEN"), 3), lastLine(errOut))
	out, errOut, code = runCLI(api.base, oncall, "checkpoints", "export", "--dir", exported)
	if code == 0 {
		t.Errorf("checkpoints export into the directory exported before the failover: exit 0, want a difference reported\n%s", out)
	}
	t.Logf("checkpoints export after the failover into the same directory: exit %d\n%s%s", code, firstLines(out+errOut, 4), "")
}

// replicationLag is how many bytes of WAL the primary has that its
// standby has not flushed.
func replicationLag(t *testing.T, primaryURL string) int64 {
	t.Helper()
	pool := testPool(t, primaryURL)
	var lag int64
	if err := pool.QueryRow(t.Context(), `SELECT coalesce(max(pg_wal_lsn_diff(pg_current_wal_lsn(), flush_lsn)), 0)::bigint
		FROM pg_stat_replication`).Scan(&lag); err != nil {
		t.Fatalf("read the replication lag: %v", err)
	}
	pool.Close()
	return lag
}

// window is what a failover lost of the load's acknowledged answers.
type window struct {
	lostAnswers, lostOps, lostCreations int
	lostBeforeStall, keptBefore         int
}

// lostWindow compares every answer 2xx the load's clients got with the
// new primary's database: an answer is lost when the delegation is not
// as far as it said. Answers given before since are counted apart.
func lostWindow(t *testing.T, l *load, pool *pgxpool.Pool, since time.Time) window {
	t.Helper()
	steps := map[string]step{}
	rows, err := pool.Query(t.Context(), `SELECT business_operation_id, task_status, obligation_state FROM delegations
		WHERE tenant = $1 AND business_operation_id LIKE $2`, faultTenant, l.prefix+"-%")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var op, task, obl string
		if err := rows.Scan(&op, &task, &obl); err != nil {
			t.Fatal(err)
		}
		s := stepCreated
		switch {
		case obl == "compensated":
			s = stepAcked
		case obl == "revocation_pending_compensation":
			s = stepCanceled
		case obl == "settled":
			s = stepCompleted
		case task == "working":
			s = stepWorking
		}
		steps[op] = s
	}
	rows.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	var w window
	for op, rec := range l.ops {
		if rec.confirmed == stepNone {
			continue
		}
		path := []step{stepCreated, stepWorking, stepCompleted}
		if rec.canceled {
			path = []step{stepCreated, stepWorking, stepCanceled, stepAcked}
		}
		have := steps[op]
		lost := 0
		for _, s := range path {
			if s <= rec.confirmed {
				switch {
				case s > have && rec.at[s].Before(since):
					w.lostBeforeStall++
				case s > have:
					lost++
				case rec.at[s].Before(since):
					w.keptBefore++
				}
			}
		}
		if lost > 0 {
			w.lostAnswers += lost
			w.lostOps++
			if have == stepNone {
				w.lostCreations++
			}
		}
	}
	return w
}

// newestFile is the exported checkpoint with the highest id.
func newestFile(files []string) string {
	newest, id := "", -1
	for _, f := range files {
		var n int
		if _, err := fmt.Sscanf(filepath.Base(f), "checkpoint-%d.jws", &n); err == nil && n > id {
			newest, id = f, n
		}
	}
	return newest
}

func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append(lines[:n], fmt.Sprintf("… (%d lines in all)", len(lines)))
	}
	return strings.Join(lines, "\n")
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}
