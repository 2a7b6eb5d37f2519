package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/ledger"
)

// appendRaw appends ev to the stream whose last event is last, over conn
// (the service's role or the owner), as the ledger would: its position,
// its link and its hash computed, so that the chain alone cannot tell it
// from an event the ledger wrote. It returns the event as appended.
func appendRaw(t *testing.T, conn *pgx.Conn, last, ev ledger.Event) ledger.Event {
	t.Helper()
	ev.Stream, ev.StreamSeq, ev.PrevHash, ev.DelegationID = last.Stream, last.StreamSeq+1, last.Hash, last.DelegationID
	ev, err := ledger.StorableEvent(ev)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Hash, err = ev.ComputeHash(); err != nil {
		t.Fatal(err)
	}
	var delegation *uuid.UUID
	if ev.DelegationID != uuid.Nil {
		delegation = &ev.DelegationID
	}
	if _, err := conn.Exec(context.Background(), `INSERT INTO events (stream, stream_seq, delegation_id, type, at, actor, obligation_from, obligation_to,
		data, hashed_data, evidence, prev_hash, hash) VALUES ($1, $2, $3, $4, $5, $6, NULLIF($7, ''), NULLIF($8, ''), $9::text::jsonb, $9::text::json, NULLIF($10, ''), $11, $12)`,
		ev.Stream, ev.StreamSeq, delegation, string(ev.Type), ev.At, ev.Actor, string(ev.ObligationFrom), string(ev.ObligationTo),
		string(ev.Data), ev.Evidence, ev.PrevHash, ev.Hash); err != nil {
		t.Fatalf("append %s to %s: %v", ev.Type, ev.Stream, err)
	}
	return ev
}

// connect opens a connection to url, closed when the test ends.
func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// tokenEvent returns the first event of the delegation's stream that
// stores a token, as the API serves it.
func (e *cliEnv) tokenEvent(t *testing.T, token, id string) ledger.Event {
	t.Helper()
	var ch chain
	if s := e.api(t, http.MethodGet, "/v1/delegations/"+id+"/evidence", token, nil, &ch); s != http.StatusOK {
		t.Fatalf("evidence: %d", s)
	}
	for _, r := range ch.Events {
		if r.Evidence != "" {
			ev, err := r.Event()
			if err != nil {
				t.Fatal(err)
			}
			return ev
		}
	}
	t.Fatalf("no event of %s stores a token", id)
	return ledger.Event{}
}

// TestVerifyChainTakesTheDelegationFromItsEvents: verify-chain judges a
// delegation by what its own events record, with the same token rules as
// verify-pack. A genuine ack of delegation A, appended by the owner to
// delegation B of the same org with B's row made to name A's task, is a
// break (its sub is not B's task, its idempotency key not B's, and the
// row disagrees with B's events); so is a compensation appended without
// its token, a delegation whose events were all removed, and, with
// --delegation, a key added to the org's history behind its stream's back.
func TestVerifyChainTakesTheDelegationFromItsEvents(t *testing.T) {
	t.Parallel()
	e := startCheckpointingService(t, "QUITTANCE_CHECKPOINT_INTERVAL=1h")
	ctx := context.Background()
	signer := compensationtest.NewEd25519Signer(t, "sup-key")
	orch, finance := e.supplierLedger(t, signer)
	// B is another tenant's, so that its row may name A's task.
	orchB := e.newToken(t, "--role", "orchestrator", "--tenant", "beta", "--name", "orch-b")
	e.putBudget(t, "ops", 1_000_000, "acme", "beta")
	a := e.compensatedBySignedAck(t, orch, "a", signer)
	b := e.pendingDelegation(t, orchB, "b")
	c := e.pendingDelegation(t, orch, "c")
	gone := e.createDelegation(t, orch, "gone").ID
	if _, errOut, code := e.cli(t, e.oncall, "checkpoints", "create"); code != 0 {
		t.Fatalf("checkpoints create: exit %d %s", code, errOut)
	}
	if out, errOut, code := e.cli(t, finance, "verify-chain"); code != 0 {
		t.Fatalf("verify-chain of an untouched ledger: exit %d\n%s\n%s", code, out, errOut)
	}

	// A's ack on B, and B's row made to agree with it.
	ack := e.tokenEvent(t, finance, a)
	appendRaw(t, connect(t, e.ownerURL), e.lastEvent(t, finance, "delegation:"+b), ledger.Event{
		Type: ack.Type, At: time.Now().UTC().Truncate(time.Microsecond), Actor: ack.Actor,
		ObligationFrom: ack.ObligationFrom, ObligationTo: ack.ObligationTo, Data: ack.Data, Evidence: ack.Evidence,
	})
	if err := e.exec(ctx, `UPDATE delegations SET remote_task_id = 'task-a' WHERE id = $1`, b); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := e.cli(t, finance, "verify-chain", "--delegation", b)
	t.Logf("verify-chain --delegation B:\n%s%s", out, errOut)
	if code != exitFailure || !strings.Contains(out, `BROKEN`+"\t"+b+"\t"+`the delegation's remote_task_id "task-a" is not the "task-b" its events record`) ||
		!strings.Contains(out, "token does not verify: sub \"task-a\" is not the delegation's remote task \"task-b\"") {
		t.Errorf("verify-chain --delegation B after A's ack was appended to it: exit %d, want %d\n%s%s", code, exitFailure, out, errOut)
	}

	// A compensation without its token: a posted ack's event, stripped.
	svc := connect(t, e.serviceURL)
	stripped := appendRaw(t, svc, e.lastEvent(t, finance, "delegation:"+c), ledger.Event{
		Type: ack.Type, At: time.Now().UTC().Truncate(time.Microsecond), Actor: ack.Actor,
		ObligationFrom: ack.ObligationFrom, ObligationTo: ack.ObligationTo, Data: ack.Data,
	})
	out, errOut, code = e.cli(t, finance, "verify-chain", "--delegation", c)
	if code != exitFailure || !strings.Contains(out, "BROKEN\t"+c+"\tevent "+strconv.Itoa(int(stripped.StreamSeq))+" (compensation_acked): compensated on evidence of channel \"http\", but the event stores no signed ack") {
		t.Errorf("verify-chain --delegation C after a tokenless compensation: exit %d, want %d\n%s%s", code, exitFailure, out, errOut)
	}

	// A delegation with no events left.
	for _, stmt := range []string{
		"ALTER TABLE events DISABLE TRIGGER events_append_only",
		"DELETE FROM webhook_deliveries WHERE event_seq IN (SELECT seq FROM events WHERE delegation_id = '" + gone + "')",
		"DELETE FROM events WHERE delegation_id = '" + gone + "'",
		"ALTER TABLE events ENABLE TRIGGER events_append_only",
	} {
		if err := e.exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	out, errOut, code = e.cli(t, finance, "verify-chain", "--delegation", gone)
	if code != exitFailure || !strings.Contains(out, "BROKEN\t"+gone+"\tthe delegation has no events") {
		t.Errorf("verify-chain --delegation of a delegation with no events: exit %d, want %d\n%s%s", code, exitFailure, out, errOut)
	}

	// One delegation's check covers its org's key history too.
	if out, errOut, code := e.cli(t, finance, "verify-chain", "--delegation", a); code != 0 || !strings.Contains(out, "ok\torg:supplier\t") {
		t.Fatalf("verify-chain --delegation A: exit %d\n%s%s", code, out, errOut)
	}
	other := compensationtest.NewEd25519Signer(t, "backdated")
	otherJWK, err := json.Marshal(other.PublicJWK())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.exec(ctx, `INSERT INTO org_keys (org_id, kid, thumbprint, jwk, valid_from) VALUES ('supplier', 'backdated', $1, $2, now() - interval '30 days')`,
		thumbprintOf(t, other), string(otherJWK)); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = e.cli(t, finance, "verify-chain", "--delegation", a)
	if code != exitFailure || !strings.Contains(out, "BROKEN\torg:supplier\tkey history: key backdated") {
		t.Errorf("verify-chain --delegation A after a key was added behind the org's stream: exit %d, want %d\n%s%s", code, exitFailure, out, errOut)
	}
}

// TestBackdatedAckIsABreak: whoever holds the service's database role and
// a retired key of the org appends an ack signed by that key, dated while
// it was still in force, after the delegation moved on — and the ack is
// checkpointed. Its signature verifies against the keys in force at its
// date, and the chain links; but it is dated before the event before it,
// a break for verify-chain and verify-pack. On a delegation that did not
// move since, verify-pack still finds it: it is dated before a checkpoint
// that did not include it.
func TestBackdatedAckIsABreak(t *testing.T) {
	t.Parallel()
	e := startCheckpointingService(t, "QUITTANCE_CHECKPOINT_INTERVAL=1h")
	old := compensationtest.NewEd25519Signer(t, "old-key")
	next := compensationtest.NewEd25519Signer(t, "new-key")
	orch, finance := e.supplierLedger(t, old)
	moved := e.pendingDelegation(t, orch, "moved")
	still := e.pendingDelegation(t, orch, "still")
	e.setOrgKeys(t, compensationtest.JWKS(old.PublicJWK(), next.PublicJWK()))
	e.setOrgKeys(t, compensationtest.JWKS(next.PublicJWK()))
	var retired time.Time
	for _, k := range e.keyHistory(t, finance) {
		if k.KeyID == "old-key" && k.ValidUntil != nil {
			retired = *k.ValidUntil
		}
	}
	if retired.IsZero() {
		t.Fatal("the old key was not retired")
	}
	// Time passes: the delegation moves on, a checkpoint is signed.
	time.Sleep(1500 * time.Millisecond)
	if s := e.api(t, http.MethodPost, "/v1/delegations/"+moved+"/notes", e.oncall, map[string]any{"note": "chasing Supplier"}, nil); s >= 300 {
		t.Fatalf("add a note: %d", s)
	}
	if _, errOut, code := e.cli(t, e.oncall, "checkpoints", "create"); code != 0 {
		t.Fatalf("checkpoints create: exit %d %s", code, errOut)
	}

	// The acks, dated just before the old key was retired, and checkpointed.
	backdated := retired.Add(-time.Millisecond).UTC().Truncate(time.Microsecond)
	svc := connect(t, e.serviceURL)
	for _, d := range []struct{ id, op string }{{moved, "moved"}, {still, "still"}} {
		var got struct {
			Compensation struct {
				IdempotencyKey string `json:"idempotency_key"`
			} `json:"compensation"`
		}
		if s := e.api(t, http.MethodGet, "/v1/delegations/"+d.id, orch, nil, &got); s != http.StatusOK {
			t.Fatalf("get delegation: %d", s)
		}
		claims := compensationtest.AckClaims("supplier", "ledger-cli", "task-"+d.op, got.Compensation.IdempotencyKey, backdated)
		token := old.Sign(t, "compensation-ack+jwt", claims)
		sum := sha256.Sum256([]byte(token))
		data, _ := json.Marshal(map[string]any{
			"channel": "http", "kid": "old-key", "key_thumbprint": thumbprintOf(t, old), "jti": claims["jti"],
			"token_sha256": hex.EncodeToString(sum[:]), "obligation_event": "compensation_ack", "reason": "compensation_acknowledged",
		})
		appendRaw(t, svc, e.lastEvent(t, finance, "delegation:"+d.id), ledger.Event{
			Type: ledger.EventTypeCompensationAcked, At: backdated, Actor: "org:supplier",
			ObligationFrom: ledger.ObligationRevocationPendingCompensation, ObligationTo: ledger.ObligationCompensated, Data: data, Evidence: token,
		})
		// The row made to agree, as the service's role may.
		if _, err := svc.Exec(context.Background(), `UPDATE delegations SET obligation_state = 'compensated', reversed_amount_minor = amount_minor WHERE id = $1`, d.id); err != nil {
			t.Fatal(err)
		}
	}
	if _, errOut, code := e.cli(t, e.oncall, "checkpoints", "create"); code != 0 {
		t.Fatalf("checkpoints create: exit %d %s", code, errOut)
	}

	out, errOut, code := e.cli(t, finance, "verify-chain", "--delegation", moved, "--event-time-slack", "1s")
	t.Logf("verify-chain --delegation moved:\n%s%s", out, errOut)
	if code != exitFailure || !strings.Contains(out, "before the event before it") || !strings.Contains(out, "token\t"+moved+"\tevent") {
		t.Errorf("verify-chain of the backdated ack: exit %d, want %d (the token verifies, its date is a break)\n%s%s", code, exitFailure, out, errOut)
	}
	if out, errOut, code := e.cli(t, finance, "verify-chain", "--event-time-slack", "1s"); code != exitFailure || !strings.Contains(out, "BROKEN\t"+moved+"\t") {
		t.Errorf("verify-chain of the ledger: exit %d, want %d\n%s%s", code, exitFailure, out, errOut)
	}
	// The delegation that had not moved since: its chain alone cannot tell,
	// the checkpoint signed before the ack was appended does.
	out, errOut, code = e.cli(t, finance, "verify-chain", "--delegation", still, "--event-time-slack", "1s", "--checkpoint-time-slack", "1s")
	if code != exitFailure || !strings.Contains(out, "which did not include it") {
		t.Errorf("verify-chain of the backdated ack on a delegation that had not moved: exit %d, want %d\n%s%s", code, exitFailure, out, errOut)
	}

	dir := t.TempDir()
	for _, d := range []struct{ id, want string }{
		{moved, "before the event before it"},
		{still, "which did not include it"},
	} {
		file := filepath.Join(dir, d.id+".json")
		if _, errOut, code := e.cli(t, finance, "evidence-pack", d.id, "-o", file); code != 0 {
			t.Fatalf("evidence-pack: exit %d %s", code, errOut)
		}
		out, errOut, code := offlineCLI(t, "verify-pack", "--event-time-slack", "1s", "--checkpoint-time-slack", "1s", file)
		t.Logf("verify-pack %s:\n%s%s", d.id, out, errOut)
		if code != exitFailure || !strings.Contains(out, d.want) || (d.id == still && strings.Count(out, "BROKEN") != 1) {
			t.Errorf("verify-pack of the backdated ack on %s: exit %d, want %d and %q\n%s%s", d.id, code, exitFailure, d.want, out, errOut)
		}
	}
}
