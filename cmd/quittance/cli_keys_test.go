package main

import (
	"context"
	"crypto"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quittance/quittance/cmd/quittance/internal/errkind"
	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/ledger"
)

// postEvidence posts a signed token to a public evidence endpoint, as a
// remote org does, and returns the status.
func (e *cliEnv) postEvidence(t *testing.T, path, token string) int {
	t.Helper()
	resp, err := http.Post(e.url+path, "application/jose", strings.NewReader(token))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// compensatedBySignedAck creates a delegation of op whose obligation the
// org discharges with an ack signed by signer; it returns its id.
func (e *cliEnv) compensatedBySignedAck(t *testing.T, orch, op string, signer *compensationtest.Signer) string {
	t.Helper()
	id := e.pendingDelegation(t, orch, op)
	var d struct {
		Compensation struct {
			IdempotencyKey string `json:"idempotency_key"`
		} `json:"compensation"`
	}
	if s := e.api(t, http.MethodGet, "/v1/delegations/"+id, orch, nil, &d); s != http.StatusOK {
		t.Fatalf("get delegation: %d", s)
	}
	ack := signer.Sign(t, "compensation-ack+jwt", compensationtest.AckClaims("supplier", "ledger-cli", "task-"+op, d.Compensation.IdempotencyKey, time.Now()))
	if s := e.postEvidence(t, "/v1/compensation/acks", ack); s != http.StatusOK {
		t.Fatalf("post ack: %d", s)
	}
	return id
}

// setOrgKeys registers keys as the org's JWK Set through the CLI, approved
// by the second on-call principal.
func (e *cliEnv) setOrgKeys(t *testing.T, jwks []byte) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(file, jwks, 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := e.cli(t, e.oncall, "orgs", "keys", "set", "supplier", "--jwks", file)
	if code != 0 {
		t.Fatalf("keys set: exit %d %s", code, errOut)
	}
	e.approvePending(t, []byte(out))
}

func thumbprintOf(t *testing.T, s *compensationtest.Signer) string {
	t.Helper()
	k := s.PublicJWK()
	sum, err := k.Thumbprint(crypto.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(sum)
}

// TestVerifyChainChecksKeysInForceAtAcceptance: after the key rotation
// SIGNING.md documents (register old+new, then new alone), verify-chain
// still verifies a token signed with the old key, and names it; a token
// signed by a key registered only later does not verify, even when its
// event's hash chain was rewritten to match. The key history shows both
// keys with their RFC 7638 thumbprints and validity, and the org's events
// record each key added and removed.
func TestVerifyChainChecksKeysInForceAtAcceptance(t *testing.T) {
	t.Parallel()
	e := startService(t)
	old := compensationtest.NewEd25519Signer(t, "old-key")
	next := compensationtest.NewES256Signer(t, "new-key")
	orch, finance := e.supplierLedger(t, old)

	honest := e.compensatedBySignedAck(t, orch, "keys-1", old)
	forged := e.compensatedBySignedAck(t, orch, "keys-2", old)

	// The documented rotation.
	e.setOrgKeys(t, compensationtest.JWKS(old.PublicJWK(), next.PublicJWK()))
	e.setOrgKeys(t, compensationtest.JWKS(next.PublicJWK()))

	out, errOut, code := e.cli(t, finance, "verify-chain", "--delegation", honest)
	if code != 0 || !strings.Contains(out, "ok\t"+honest) ||
		!strings.Contains(out, "kid old-key\tthumbprint "+thumbprintOf(t, old)) {
		t.Fatalf("verify-chain after rotation: exit %d %s\n%s", code, errOut, out)
	}

	// The history: old closed, new in force, both thumbprints RFC 7638's.
	out, errOut, code = e.cli(t, finance, "orgs", "keys", "history", "supplier")
	var history struct {
		Keys []struct {
			KeyID      string     `json:"kid"`
			Thumbprint string     `json:"thumbprint"`
			ValidFrom  time.Time  `json:"valid_from"`
			ValidUntil *time.Time `json:"valid_until"`
			InForce    bool       `json:"in_force"`
		} `json:"keys"`
	}
	if err := json.Unmarshal([]byte(out), &history); code != 0 || err != nil || len(history.Keys) != 2 {
		t.Fatalf("keys history: exit %d %s %v\n%s", code, errOut, err, out)
	}
	k0, k1 := history.Keys[0], history.Keys[1]
	if k0.KeyID != "old-key" || k0.Thumbprint != thumbprintOf(t, old) || k0.InForce || k0.ValidUntil == nil ||
		k1.KeyID != "new-key" || k1.Thumbprint != thumbprintOf(t, next) || !k1.InForce || k1.ValidUntil != nil ||
		!k1.ValidFrom.Before(*k0.ValidUntil) {
		t.Fatalf("keys history:\n%s", out)
	}
	if _, errOut, code := e.cli(t, orch, "orgs", "keys", "history", "supplier"); code != errkind.ExitAuth {
		t.Errorf("an orchestrator reading key history: exit %d %s, want 4", code, errOut)
	}
	if _, errOut, code := e.cli(t, finance, "orgs", "keys", "history", "nobody"); code != exitFailure || !strings.Contains(errOut, "not_found") {
		t.Errorf("history of an unknown org: exit %d %s", code, errOut)
	}

	// Every key added and removed is an event on the org's stream.
	ctx := context.Background()
	var keyEvents []string
	rows, err := e.query(ctx, "SELECT data::text FROM events WHERE stream = 'org:supplier' ORDER BY stream_seq")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		var data struct {
			Added   []ledger.KeyRef `json:"keys_added"`
			Removed []ledger.KeyRef `json:"keys_removed"`
		}
		_ = json.Unmarshal([]byte(r), &data)
		for _, k := range data.Added {
			keyEvents = append(keyEvents, "+"+k.KeyID+" "+k.Thumbprint)
		}
		for _, k := range data.Removed {
			keyEvents = append(keyEvents, "-"+k.KeyID+" "+k.Thumbprint)
		}
	}
	want := []string{"+old-key " + thumbprintOf(t, old), "+new-key " + thumbprintOf(t, next), "-old-key " + thumbprintOf(t, old)}
	if strings.Join(keyEvents, "|") != strings.Join(want, "|") {
		t.Errorf("org events record keys %v, want %v", keyEvents, want)
	}

	// An attacker with the database rewrites the stored ack of the second
	// delegation with one signed by the key added later, and recomputes the
	// hash chain from there: the chain verifies, the token does not.
	var ev struct {
		Events []ledger.EventRecord `json:"events"`
	}
	if s := e.api(t, http.MethodGet, "/v1/delegations/"+forged+"/evidence", finance, nil, &ev); s != http.StatusOK {
		t.Fatalf("evidence: %d", s)
	}
	var d struct {
		Compensation struct {
			IdempotencyKey string `json:"idempotency_key"`
		} `json:"compensation"`
	}
	e.api(t, http.MethodGet, "/v1/delegations/"+forged, orch, nil, &d)
	rewritten := false
	prev := ledger.GenesisHash
	for _, rec := range ev.Events {
		le, err := rec.Event()
		if err != nil {
			t.Fatal(err)
		}
		if le.Evidence != "" {
			claims := compensationtest.AckClaims("supplier", "ledger-cli", "task-keys-2", d.Compensation.IdempotencyKey, le.At)
			le.Evidence = next.Sign(t, "compensation-ack+jwt", claims)
			rewritten = true
		}
		le.PrevHash = prev
		if le.Hash, err = le.ComputeHash(); err != nil {
			t.Fatal(err)
		}
		prev = le.Hash
		if err := e.exec(ctx, "ALTER TABLE events DISABLE TRIGGER events_append_only"); err != nil {
			t.Fatal(err)
		}
		if err := e.exec(ctx, "UPDATE events SET evidence = NULLIF($1, ''), prev_hash = decode($2, 'hex'), hash = decode($3, 'hex') WHERE stream = $4 AND stream_seq = $5",
			le.Evidence, hex.EncodeToString(le.PrevHash), hex.EncodeToString(le.Hash), le.Stream, le.StreamSeq); err != nil {
			t.Fatal(err)
		}
		if err := e.exec(ctx, "ALTER TABLE events ENABLE TRIGGER events_append_only"); err != nil {
			t.Fatal(err)
		}
	}
	if !rewritten {
		t.Fatal("the delegation stores no token")
	}
	out, _, code = e.cli(t, finance, "verify-chain", "--delegation", forged)
	if code != exitFailure || !strings.Contains(out, "BROKEN\t"+forged) || strings.Contains(out, "hash does not match") ||
		!strings.Contains(out, "token does not verify") {
		t.Fatalf("verify-chain of a token signed by a later key: exit %d\n%s", code, out)
	}
	if _, _, code := e.cli(t, finance, "verify-chain", "--delegation", honest); code != 0 {
		t.Errorf("the honest delegation still verifies: exit %d", code)
	}
}
