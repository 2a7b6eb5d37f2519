package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quittance/quittance/internal/jose"
	"github.com/quittance/quittance/ledger/audit"
	"github.com/quittance/quittance/sql/pgstore"
)

// signedCheckpoint is a checkpoint as `checkpoints create` prints it.
type signedCheckpoint struct {
	ID      int64                   `json:"id"`
	JWS     string                  `json:"jws"`
	Payload audit.CheckpointPayload `json:"payload"`
}

// TestServiceRoleCannotMoveAnchors: as the service's role, the feed
// positions that decide which checkpoint signs an event, the heads signed
// so far and the releases on revoked identities cannot be rewritten or
// removed, and a commit order outside its own transaction is refused; a
// release it acknowledges behind the ledger's back (the one change it may
// make, once) is a failed invariant.
func TestServiceRoleCannotMoveAnchors(t *testing.T) {
	t.Parallel()
	e := startCheckpointingService(t, "QUITTANCE_CHECKPOINT_INTERVAL=1h")
	ctx := context.Background()
	e.putBudget(t, "ops", 1_000_000, "acme")
	if s := e.api(t, http.MethodPut, "/admin/v1/orgs/supplier", e.oncall, map[string]any{"name": "Supplier"}, nil); s >= 300 {
		t.Fatalf("put org: %d", s)
	}
	orch := e.newToken(t, "--role", "orchestrator", "--tenant", "acme", "--name", "orch")
	id := e.pendingDelegation(t, orch, "anchor-1")
	if s := e.api(t, http.MethodPost, "/admin/v1/checkpoints", e.oncall, nil, nil); s != http.StatusCreated {
		t.Fatalf("create checkpoint: %d", s)
	}
	// A release on a revoked identity, as the revocation records it.
	if err := e.exec(ctx, `INSERT INTO revoked_identity_releases (delegation_id, org_id, amount_minor, currency, released_at, identity_revoked_at)
		SELECT id, org_id, amount_minor, currency, now(), now() FROM delegations WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}

	conn, err := pgx.Connect(ctx, e.serviceURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	positions := func() string {
		var s string
		if err := conn.QueryRow(ctx, `SELECT string_agg(format('%s %s %s %s', pos, seq, order_xid, tx_pos), ';' ORDER BY pos) FROM event_positions`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := positions()
	for _, stmt := range []string{
		`UPDATE event_positions SET order_xid = order_xid, tx_pos = tx_pos + 1000000`,
		`UPDATE event_positions SET order_xid = '999999999999'`,
		`DELETE FROM event_positions`,
		`TRUNCATE event_positions`,
		`INSERT INTO event_positions (seq, order_xid, tx_pos) VALUES (999999999, '999999999999', 1)`,
		`UPDATE checkpoint_heads SET stream_seq = 1`,
		`DELETE FROM checkpoint_heads`,
		`INSERT INTO checkpoint_heads (stream, checkpoint_id, stream_seq, hash) VALUES ('budget:mallory', 1, 1, '00')`,
		`DELETE FROM revoked_identity_releases`,
		`TRUNCATE revoked_identity_releases`,
		`UPDATE revoked_identity_releases SET amount_minor = 0`,
	} {
		_, err := conn.Exec(ctx, stmt)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" || !strings.Contains(pgErr.Message, "permission denied") {
			t.Errorf("%s as the service role: %v, want a privilege check's refusal (42501)", stmt, err)
		}
	}
	if got := positions(); got != before {
		t.Fatalf("the service role changed the feed positions:\n%s\n->\n%s", before, got)
	}
	// An event appended with a commit order far ahead of any transaction
	// would never become final: never in a span, and holding the feed
	// back. The events trigger refuses the order it did not choose.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT set_config('quittance.event_feed_tx', pg_current_xact_id()::text || ' 999999999999 1', true)`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO events (stream, stream_seq, type, at, actor, data, hashed_data, prev_hash, hash)
		SELECT 'budget:mallory', 1, type, at, actor, data, hashed_data, prev_hash, hash FROM events WHERE stream = 'budget:ops' AND stream_seq = 1`); err != nil {
		t.Fatal(err)
	}
	var pgErr *pgconn.PgError
	if err := tx.Commit(ctx); !errors.As(err, &pgErr) || pgErr.Code != "42501" || !strings.Contains(pgErr.Message, "quittance.event_feed_tx") {
		t.Errorf("committing an event with a commit order outside its transaction: %v, want the events trigger's refusal", err)
	}

	// The acknowledgement: set once, never changed or taken back; one made
	// without its event is found.
	var principal string
	if err := conn.QueryRow(ctx, `SELECT id::text FROM principals ORDER BY id LIMIT 1`).Scan(&principal); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `UPDATE revoked_identity_releases SET acknowledged_at = now(), acknowledged_by = $1, acknowledge_note = 'hidden' WHERE delegation_id = $2`, principal, id); err != nil {
		t.Fatalf("acknowledging a release once, as the service role: %v", err)
	}
	for _, stmt := range []string{
		`UPDATE revoked_identity_releases SET acknowledged_at = NULL, acknowledged_by = NULL`,
		`UPDATE revoked_identity_releases SET acknowledged_at = acknowledged_at + interval '1 day'`,
		`UPDATE revoked_identity_releases SET acknowledge_note = 'rewritten'`,
	} {
		if _, err := conn.Exec(ctx, stmt); err == nil || !strings.Contains(err.Error(), "revoked_identity_releases is append-only") {
			t.Errorf("%s as the service role, once acknowledged: %v, want the trigger's refusal", stmt, err)
		}
	}
	pool, err := pgxpool.New(ctx, e.ownerURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	rep, err := pgstore.CheckInvariants(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(rep.Violations, "\n"), "delegation "+id+": its release on a revoked identity is acknowledged") {
		t.Errorf("CheckInvariants after an acknowledgement with no event: %q", rep.Violations)
	}

	// The owner re-running the grants gives none of it back.
	if err := e.exec(ctx, `SELECT quittance_grant_service_role()`); err != nil {
		t.Fatal(err)
	}
	var writable bool
	if err := conn.QueryRow(ctx, `SELECT has_table_privilege('event_positions', 'INSERT') OR has_table_privilege('event_positions', 'UPDATE')
		OR has_table_privilege('event_positions', 'DELETE') OR has_table_privilege('event_positions', 'TRUNCATE')
		OR has_table_privilege('checkpoint_heads', 'INSERT') OR has_table_privilege('checkpoint_heads', 'UPDATE')
		OR has_table_privilege('revoked_identity_releases', 'DELETE') OR has_table_privilege('revoked_identity_releases', 'TRUNCATE')
		OR has_column_privilege('revoked_identity_releases', 'amount_minor', 'UPDATE')`).Scan(&writable); err != nil {
		t.Fatal(err)
	}
	if writable {
		t.Error("after quittance_grant_service_role(), the service role may rewrite the feed positions, the signed heads or the releases")
	}
	// Appending still works, its positions written by the trigger.
	e.putBudget(t, "ops", 2_000_000)
	if got := positions(); got == before {
		t.Error("funding the budget wrote no feed position")
	}

	// The owner, whom nothing stops, removes the feed position of the
	// delegation's last event, appended after the checkpoint: no
	// checkpoint's span will hold it, and the feed no longer serves it.
	// verify-chain reads the stream itself too.
	if s := e.api(t, http.MethodPost, "/v1/delegations/"+id+"/notes", e.oncall, map[string]any{"note": "checked with Supplier"}, nil); s >= 300 {
		t.Fatalf("add a note: %d", s)
	}
	finance := e.newToken(t, "--role", "finance", "--name", "fin")
	if out, errOut, code := e.cli(t, finance, "verify-chain"); code != 0 {
		t.Fatalf("verify-chain before the owner's edit: exit %d\n%s\n%s", code, out, errOut)
	}
	if err := e.exec(ctx, `DELETE FROM event_positions WHERE seq = (SELECT max(seq) FROM events WHERE delegation_id = $1)`, id); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := e.cli(t, finance, "verify-chain")
	if code != exitFailure || !strings.Contains(out, "BROKEN\tdelegation:"+id+"\tthe stream has ") || !strings.Contains(out, "an event missing from the feed is in no checkpoint's span") {
		t.Errorf("verify-chain after the owner removed a feed position: exit %d, want %d\n%s\n%s", code, exitFailure, out, errOut)
	}

	// The service's role may append to checkpoints, but holds no key: a
	// row it inserts at the next id is not chained onto, and verify-chain
	// names it.
	if _, err := conn.Exec(ctx, `INSERT INTO checkpoints (id, created_at, created_by, kid, streams, heads_sha256, payload, jws)
		VALUES (2, now(), 'mallory', 'mallory', 0, '\x00', '{"streams":[]}', 'junk')`); err != nil {
		t.Fatalf("inserting a checkpoint as the service role: %v", err)
	}
	if out, errOut, code := e.cli(t, e.oncall, "checkpoints", "create"); code == 0 || !strings.Contains(errOut, "checkpoint_previous_invalid") ||
		!strings.Contains(errOut, "checkpoint 2 does not verify with the ledger's keys") {
		t.Errorf("a checkpoint after a junk row: exit %d, want a refusal\n%s\n%s", code, out, errOut)
	}
	if stored, err := e.query(ctx, `SELECT id::text FROM checkpoints ORDER BY id`); err != nil || len(stored) != 2 {
		t.Errorf("checkpoints stored after the refusal: %v %v, want 1 and the junk 2", stored, err)
	}
	if out, errOut, code := e.cli(t, finance, "verify-chain"); code != exitFailure || !strings.Contains(out, "BROKEN\tcheckpoint\tcheckpoint 2 does not verify") {
		t.Errorf("verify-chain after a junk checkpoint: exit %d, want %d\n%s\n%s", code, exitFailure, out, errOut)
	}
}

// TestCheckpointHeadNeverMovesBack: the owner moves a budget's first
// event to after the latest checkpoint's span in the feed, so that the
// next checkpoint would sign the budget back at its first event, and then
// deletes the second, which the latest checkpoint signed. The ledger
// refuses to sign the older head, and verify-chain reports the deleted
// tail; a checkpoint that does sign it back (signed here with the ledger's
// key, as whoever holds it could) is a break of its own.
func TestCheckpointHeadNeverMovesBack(t *testing.T) {
	t.Parallel()
	e := startCheckpointingService(t, "QUITTANCE_CHECKPOINT_INTERVAL=1h")
	ctx := context.Background()
	for _, funded := range []int64{1000, 2000} {
		e.putBudget(t, "ops", funded)
	}
	out, errOut, code := e.cli(t, e.oncall, "checkpoints", "create")
	var first signedCheckpoint
	if code != 0 || json.Unmarshal([]byte(out), &first) != nil || first.ID != 1 || signedHead(t, first.Payload, "budget:ops") != 2 {
		t.Fatalf("checkpoints create: exit %d %s\n%s", code, errOut, out)
	}
	for _, stmt := range []string{
		`UPDATE event_positions SET order_xid = m.order_xid, tx_pos = m.tx_pos + 1
		 FROM (SELECT max(order_xid) AS order_xid, max(tx_pos) AS tx_pos FROM event_positions) m
		 WHERE seq = (SELECT seq FROM events WHERE stream = 'budget:ops' AND stream_seq = 1)`,
	} {
		if err := e.exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	out, errOut, code = e.cli(t, e.oncall, "checkpoints", "create")
	if code == 0 || !strings.Contains(errOut, "checkpoint_head_moved_back") || !strings.Contains(errOut, "checkpoint 2 signs this stream at event 1, behind event 2 that checkpoint 1 signed") {
		t.Fatalf("a checkpoint over a span that moves budget:ops back: exit %d, want a refusal\n%s\n%s", code, out, errOut)
	}
	var stored []string
	stored, err := e.query(ctx, `SELECT id::text FROM checkpoints ORDER BY id`)
	if err != nil || len(stored) != 1 {
		t.Fatalf("checkpoints stored after the refusal: %v %v, want only 1", stored, err)
	}

	for _, stmt := range []string{
		"ALTER TABLE events DISABLE TRIGGER events_append_only",
		"DELETE FROM events WHERE stream = 'budget:ops' AND stream_seq = 2",
		"ALTER TABLE events ENABLE TRIGGER events_append_only",
	} {
		if err := e.exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	finance := e.newToken(t, "--role", "finance", "--name", "fin")
	out, errOut, code = e.cli(t, finance, "verify-chain")
	if code != exitFailure || !strings.Contains(out, "BROKEN\tbudget:ops\tcheckpoint 1 signed 2 event(s) in this stream; only 1 are left") {
		t.Fatalf("verify-chain after the tail was deleted: exit %d, want %d\n%s\n%s", code, exitFailure, out, errOut)
	}

	// Whoever holds the ledger's key signs checkpoint 2 anyway, at the
	// older head, and the owner stores it.
	identity, err := jose.LoadOrCreateIdentityFile("ledger-cli", e.env["QUITTANCE_SIGNING_KEY_FILE"], false, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	events, err := e.query(ctx, `SELECT encode(hash, 'hex') FROM events WHERE stream = 'budget:ops' AND stream_seq = 1`)
	if err != nil || len(events) != 1 {
		t.Fatalf("budget:ops's first event: %v %v", events, err)
	}
	prev := sha256.Sum256([]byte(first.JWS))
	back := audit.CheckpointPayload{LedgerID: "ledger-cli", ID: 2, At: first.Payload.At.Add(time.Second), Previous: hex.EncodeToString(prev[:]),
		Through: first.Payload.Through + 1, Streams: []audit.StreamHead{{Stream: "budget:ops", Seq: 1, Hash: events[0]}}}
	raw, err := json.Marshal(back)
	if err != nil {
		t.Fatal(err)
	}
	jws, kid, err := identity.Sign(audit.CheckpointType, raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.exec(ctx, `INSERT INTO checkpoints (id, created_at, created_by, kid, streams, heads_sha256, payload, jws) VALUES (2, $1, 'mallory', $2, 1, '\x00', $3, $4)`,
		back.At, kid, string(raw), jws); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = e.cli(t, finance, "verify-chain")
	if code != exitFailure || !strings.Contains(out, "BROKEN\tbudget:ops\tcheckpoint 2 signs this stream at event 1, behind event 2 that checkpoint 1 signed") ||
		!strings.Contains(out, "BROKEN\tbudget:ops\tcheckpoint 1 signed 2 event(s) in this stream; only 1 are left") {
		t.Fatalf("verify-chain with a checkpoint signing budget:ops back: exit %d, want %d\n%s\n%s", code, exitFailure, out, errOut)
	}
}
