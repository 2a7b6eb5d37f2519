package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quittance/quittance/cmd/quittance/internal/errkind"
	"github.com/quittance/quittance/internal/jose"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/audit"
	"github.com/quittance/quittance/sql/pgtest"
)

// signingKeyFile writes a fresh ledger signing key and returns its path.
func signingKeyFile(t *testing.T) string {
	t.Helper()
	raw, err := jose.NewIdentityFile("test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ledger-key.jwks.json")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// lastEvent returns a stream's last event as the API serves it.
func (e *cliEnv) lastEvent(t *testing.T, token, stream string) ledger.Event {
	t.Helper()
	var last *ledger.Event
	after := ""
	for {
		var page struct {
			Events    []ledger.EventRecord `json:"events"`
			NextAfter string               `json:"next_after"`
		}
		path := "/v1/events?limit=500"
		if after != "" {
			path += "&after=" + after
		}
		if s := e.api(t, http.MethodGet, path, token, nil, &page); s != http.StatusOK {
			t.Fatalf("read events: %d", s)
		}
		if len(page.Events) == 0 {
			break
		}
		for _, r := range page.Events {
			if r.Stream == stream {
				ev, err := r.Event()
				if err != nil {
					t.Fatal(err)
				}
				last = &ev
			}
		}
		after = page.NextAfter
	}
	if last == nil {
		t.Fatalf("no events in %s", stream)
	}
	return *last
}

// TestVerifyChainAgainstCheckpoints: the owner of the database, who can
// disable the append-only trigger, deletes the last event of a delegation
// and of a budget that a signed checkpoint covers, and rewrites an org's
// last event with a hash that chains: each valid prefix still verifies on
// its own, but verify-chain reports every stream and exits 1. An untouched
// ledger verifies, events after the checkpoint included; with the
// checkpoints deleted too, the exported file still catches it.
func TestVerifyChainAgainstCheckpoints(t *testing.T) {
	t.Parallel()
	e := startCheckpointingService(t, "QUITTANCE_CHECKPOINT_INTERVAL=1h")
	ctx := context.Background()
	e.putBudget(t, "ops", 1_000_000, "acme")
	if s := e.api(t, http.MethodPut, "/admin/v1/orgs/supplier", e.oncall, map[string]any{"name": "Supplier"}, nil); s >= 300 {
		t.Fatalf("put org: %d", s)
	}
	if s := e.api(t, http.MethodPut, "/admin/v1/orgs/supplier", e.oncall, map[string]any{"name": "Supplier Ltd"}, nil); s >= 300 {
		t.Fatalf("rename org: %d", s)
	}
	orch := e.newToken(t, "--role", "orchestrator", "--tenant", "acme", "--name", "orch")
	finance := e.newToken(t, "--role", "finance", "--name", "fin")
	id := e.pendingDelegation(t, orch, "cp-1")
	id2 := e.pendingDelegation(t, orch, "cp-2")

	// Before any checkpoint, verify-chain says nothing anchors the tails;
	// once events are older than --max-unanchored-age (default 10m, here
	// shortened to stand for a ledger that signs none), that is a break.
	out, errOut, code := e.cli(t, finance, "verify-chain")
	if code != 0 || !strings.Contains(errOut, "no checkpoint yet") {
		t.Fatalf("verify-chain before a checkpoint: exit %d\n%s\n%s", code, out, errOut)
	}
	time.Sleep(20 * time.Millisecond)
	out, errOut, code = e.cli(t, finance, "verify-chain", "--max-unanchored-age", "10ms")
	if code != exitFailure || !strings.Contains(out, "BROKEN\tbudget:ops\t2 event(s) older than 10ms are covered by no checkpoint: the ledger serves none") ||
		!strings.Contains(out, "BROKEN\torg:supplier\t") {
		t.Fatalf("verify-chain with old events and no checkpoint: exit %d, want %d\n%s\n%s", code, exitFailure, out, errOut)
	}
	if _, errOut, code := e.cli(t, finance, "verify-chain", "--max-unanchored-age", "-1s"); code != exitUsage {
		t.Errorf("verify-chain --max-unanchored-age -1s: exit %d, want %d %s", code, exitUsage, errOut)
	}
	// Finance may read checkpoints, not sign them.
	if _, _, code := e.cli(t, finance, "checkpoints", "create"); code != errkind.ExitAuth {
		t.Errorf("finance creating a checkpoint: exit %d, want %d", code, errkind.ExitAuth)
	}
	out, errOut, code = e.cli(t, e.oncall, "checkpoints", "create")
	var cp struct {
		ID      int64                   `json:"id"`
		Streams int                     `json:"streams"`
		Payload audit.CheckpointPayload `json:"payload"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &cp) != nil || cp.ID != 1 || cp.Streams == 0 || len(cp.Payload.Streams) != cp.Streams {
		t.Fatalf("checkpoints create: exit %d %s\n%s", code, errOut, out)
	}
	dir := t.TempDir()
	if out, errOut, code := e.cli(t, finance, "checkpoints", "export", "--dir", dir); code != 0 || !strings.Contains(out, "exported 1 new") {
		t.Fatalf("checkpoints export: exit %d %s\n%s", code, errOut, out)
	}
	exported := filepath.Join(dir, checkpointFile(1))

	// Untouched, and with events after the checkpoint: ok.
	e.putBudget(t, "ops", 2_000_000)
	out, errOut, code = e.cli(t, finance, "verify-chain")
	if code != 0 || !strings.Contains(out, "ok\t"+id) || !strings.Contains(out, "ok\tbudget:ops\t3 events") ||
		!strings.Contains(out, "ok\torg:supplier\t2 events") || !strings.Contains(errOut, "checked against checkpoints 1..1") {
		t.Fatalf("verify-chain of an untouched ledger: exit %d\n%s\n%s", code, out, errOut)
	}
	if _, errOut, code := e.cli(t, finance, "verify-chain", "--delegation", id, "--checkpoint", exported); code != 0 {
		t.Fatalf("verify-chain --delegation --checkpoint of an untouched ledger: exit %d\n%s", code, errOut)
	}
	// An event the latest checkpoint does not cover, older than the bound:
	// checkpoints stopped (or the newer ones were removed).
	time.Sleep(20 * time.Millisecond)
	out, errOut, code = e.cli(t, finance, "verify-chain", "--max-unanchored-age", "10ms")
	if code != exitFailure || !strings.Contains(out, "BROKEN\tbudget:ops\t1 event(s) older than 10ms are covered by the latest checkpoint (1, signed ") ||
		strings.Contains(out, "BROKEN\torg:supplier") {
		t.Fatalf("verify-chain with an old event after the checkpoint: exit %d, want %d\n%s\n%s", code, exitFailure, out, errOut)
	}

	// The owner removes tails and rewrites an org's last event so that it
	// chains: its hash recomputed over the new content.
	org := e.lastEvent(t, finance, "org:supplier")
	org.Actor = "principal:mallory"
	hash, err := org.ComputeHash()
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		"ALTER TABLE events DISABLE TRIGGER events_append_only",
		// From the signed head on: background workers may have appended to
		// the delegation after the checkpoint.
		"DELETE FROM events WHERE stream = 'delegation:" + id + "' AND stream_seq >= " + strconv.Itoa(int(signedHead(t, cp.Payload, "delegation:"+id))),
		"DELETE FROM events WHERE stream = 'budget:ops' AND stream_seq = 3",
		"DELETE FROM events WHERE stream = 'budget:ops' AND stream_seq = 2",
		"DELETE FROM events WHERE stream = 'budget:ops' AND stream_seq = 1",
		"UPDATE events SET actor = 'principal:mallory', hash = '\\x" + hex.EncodeToString(hash) + "' WHERE stream = 'org:supplier' AND stream_seq = " + strconv.Itoa(int(org.StreamSeq)),
		"ALTER TABLE events ENABLE TRIGGER events_append_only",
	} {
		if err := e.exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	out, errOut, code = e.cli(t, finance, "verify-chain")
	if code != exitFailure {
		t.Fatalf("verify-chain after the owner's edits: exit %d, want %d\n%s\n%s", code, exitFailure, out, errOut)
	}
	for _, want := range []string{
		"BROKEN\tdelegation:" + id + "\tcheckpoint 1 signed",
		"(its tail was removed)",
		"BROKEN\tbudget:ops\tcheckpoint 1 signed 2 event(s) in this stream; none is left",
		"BROKEN\torg:supplier\tcheckpoint 1 signed event " + strconv.Itoa(int(org.StreamSeq)),
		"(rewritten)",
		"ok\t" + id2,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("verify-chain output lacks %q:\n%s", want, out)
		}
	}
	// The delegation's remaining prefix verifies as a chain on its own:
	// only the checkpoint catches it.
	if !strings.Contains(out, "ok\t"+id+"\t") {
		t.Errorf("the delegation's prefix should still verify as a chain:\n%s", out)
	}
	if _, _, code := e.cli(t, finance, "verify-chain", "--delegation", id); code != exitFailure {
		t.Errorf("verify-chain --delegation %s: exit %d, want %d", id, code, exitFailure)
	}
	if _, _, code := e.cli(t, finance, "verify-chain", "--delegation", id2); code != 0 {
		t.Errorf("verify-chain --delegation of an untouched delegation: exit %d", code)
	}

	// A checkpoint checked with another ledger's keys does not verify.
	other := filepath.Join(t.TempDir(), "other.jwks.json")
	otherID, err := jose.LoadOrCreateIdentityFile("other", signingKeyFile(t), false, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(other, otherID.JWKS(), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, _, code := e.cli(t, finance, "verify-chain", "--delegation", id2, "--ledger-jwks", other); code != exitFailure || !strings.Contains(out, "BROKEN\tcheckpoint\tcheckpoint 1 does not verify") {
		t.Errorf("verify-chain with another ledger's keys: exit %d\n%s", code, out)
	}

	// Checkpoints are incremental: the next ones sign only what moved. The
	// owner deleting one from the middle breaks their chain there.
	if s := e.api(t, http.MethodPut, "/admin/v1/orgs/supplier", e.oncall, map[string]any{"name": "Supplier Limited"}, nil); s >= 300 {
		t.Fatalf("rename org again: %d", s)
	}
	out, errOut, code = e.cli(t, e.oncall, "checkpoints", "create")
	var second struct {
		ID      int64                   `json:"id"`
		Payload audit.CheckpointPayload `json:"payload"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &second) != nil || second.ID != 2 {
		t.Fatalf("the second checkpoint: exit %d %s\n%s", code, errOut, out)
	}
	for _, h := range second.Payload.Streams {
		if h.Stream != "org:supplier" && h.Stream != "budget:ops" && !strings.HasPrefix(h.Stream, "delegation:") {
			t.Errorf("the second checkpoint signs %s, which did not move", h.Stream)
		}
	}
	if _, errOut, code := e.cli(t, e.oncall, "checkpoints", "create"); code != 0 {
		t.Fatalf("the third checkpoint: exit %d %s", code, errOut)
	}
	for _, stmt := range []string{
		"ALTER TABLE checkpoints DISABLE TRIGGER checkpoints_append_only",
		"DELETE FROM checkpoints WHERE id = 2",
		"ALTER TABLE checkpoints ENABLE TRIGGER checkpoints_append_only",
	} {
		if err := e.exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	if out, _, code := e.cli(t, finance, "verify-chain", "--delegation", id2); code != exitFailure ||
		!strings.Contains(out, "BROKEN\tcheckpoint\tcheckpoint 3 follows checkpoint 1: checkpoints 2..2 are missing") {
		t.Errorf("verify-chain with a checkpoint deleted from the middle: exit %d\n%s", code, out)
	}

	// The owner deletes the checkpoints too: the served log now has no
	// anchor, but the exported checkpoint still has one.
	for _, stmt := range []string{
		"ALTER TABLE checkpoints DISABLE TRIGGER checkpoints_append_only",
		"DELETE FROM checkpoints",
		"ALTER TABLE checkpoints ENABLE TRIGGER checkpoints_append_only",
	} {
		if err := e.exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	out, _, code = e.cli(t, finance, "verify-chain", "--checkpoint", exported)
	if code != exitFailure || !strings.Contains(out, "checkpoints were removed") || !strings.Contains(out, "BROKEN\tbudget:ops") {
		t.Errorf("verify-chain --checkpoint after the checkpoints were deleted: exit %d\n%s", code, out)
	}
	if out, _, code := e.cli(t, finance, "checkpoints", "export", "--dir", dir); code != exitFailure || !strings.Contains(out, "MISSING\t"+exported) {
		t.Errorf("checkpoints export after the checkpoints were deleted: exit %d\n%s", code, out)
	}
}

// TestServeRequiresASigningKey: serve, as a user runs it, refuses to start
// without QUITTANCE_SIGNING_KEY_FILE (exit 2, one reason, the database
// untouched) unless checkpoints are explicitly off; off, it serves but
// signs none, and verify-chain reports the old events nothing anchors.
func TestServeRequiresASigningKey(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dbURL := pgtest.EmptyURL(t)
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"no key", map[string]string{}, "QUITTANCE_SIGNING_KEY_FILE is required"},
		{"checkpoints on, no key", map[string]string{"QUITTANCE_CHECKPOINTS": "on"}, "QUITTANCE_SIGNING_KEY_FILE is required"},
		{"checkpoints neither on nor off", map[string]string{"QUITTANCE_CHECKPOINTS": "maybe", "QUITTANCE_SIGNING_KEY_FILE": signingKeyFile(t)}, "QUITTANCE_CHECKPOINTS must be on or off"},
	} {
		env := map[string]string{"DATABASE_URL": dbURL, "QUITTANCE_ADDR": "127.0.0.1:0", "QUITTANCE_LOG_LEVEL": "error"}
		for k, v := range tc.env {
			env[k] = v
		}
		err := run(ctx, []string{"serve"}, func(k string) string { return env[k] }, io.Discard, io.Discard)
		if err == nil || exitCode(err) != exitUsage || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: serve: %v (exit %d), want exit %d and %q", tc.name, err, exitCode(err), exitUsage, tc.want)
		}
	}
	// Refused before migrating: the empty database is still empty.
	pool := testPool(t, dbURL)
	var tables int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").Scan(&tables); err != nil || tables != 0 {
		t.Errorf("the database after the refused starts: %d tables (%v), want 0", tables, err)
	}

	e := startService(t, "QUITTANCE_SIGNING_KEY_FILE=", "QUITTANCE_CHECKPOINTS=off")
	e.putBudget(t, "ops", 1_000)
	if out, errOut, code := e.cli(t, e.oncall, "checkpoints", "create"); code == 0 || !strings.Contains(errOut, "checkpoints_unavailable") {
		t.Errorf("checkpoints create without a key: exit %d, want a refusal naming checkpoints_unavailable\n%s%s", code, out, errOut)
	}
	time.Sleep(20 * time.Millisecond)
	if out, errOut, code := e.cli(t, e.oncall, "verify-chain", "--max-unanchored-age", "10ms"); code != exitFailure || !strings.Contains(out, "BROKEN\tbudget:ops\t") {
		t.Errorf("verify-chain of a ledger run with checkpoints off: exit %d, want %d\n%s\n%s", code, exitFailure, out, errOut)
	}
}

// signedHead is the position a checkpoint signed for stream.
func signedHead(t *testing.T, p audit.CheckpointPayload, stream string) int32 {
	t.Helper()
	for _, h := range p.Streams {
		if h.Stream == stream {
			return h.Seq
		}
	}
	t.Fatalf("checkpoint %d does not cover %s", p.ID, stream)
	return 0
}
