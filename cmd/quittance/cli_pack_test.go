package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quittance/quittance/cmd/quittance/internal/errkind"
	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/internal/jose"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/audit"
)

// offlineCLI runs a command with no API address and no token: whatever it
// does, it does without the service.
func offlineCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	env := map[string]string{"QUITTANCE_URL": "http://127.0.0.1:1"}
	err := run(context.Background(), args, func(k string) string { return env[k] }, &stdout, &stderr)
	code := 0
	if err != nil {
		code = exitCode(err)
		stderr.WriteString("quittance: " + err.Error() + "\n")
	}
	return stdout.String(), stderr.String(), code
}

// TestEvidencePackVerifiesOffline: the evidence pack of a delegation
// compensated by a signed ack, downloaded after the org rotated its keys,
// verifies with no database and no network, naming the key in force at
// acceptance; changing any one value in it — an event field, a token byte,
// a key or its validity (earlier or later), the org stream that records the
// keys, the delegation it describes — or removing an event or the
// checkpoint makes verify-pack exit 1.
func TestEvidencePackVerifiesOffline(t *testing.T) {
	t.Parallel()
	e := startCheckpointingService(t)
	old := compensationtest.NewEd25519Signer(t, "old-key")
	next := compensationtest.NewES256Signer(t, "new-key")
	orch, finance := e.supplierLedger(t, old)
	id := e.compensatedBySignedAck(t, orch, "pack-1", old)
	e.setOrgKeys(t, compensationtest.JWKS(old.PublicJWK(), next.PublicJWK()))
	e.setOrgKeys(t, compensationtest.JWKS(next.PublicJWK()))
	if _, errOut, code := e.cli(t, e.oncall, "checkpoints", "create"); code != 0 {
		t.Fatalf("checkpoints create: exit %d %s", code, errOut)
	}

	dir := t.TempDir()
	file := filepath.Join(dir, "pack.json")
	if _, errOut, code := e.cli(t, finance, "evidence-pack", id, "-o", file); code != 0 {
		t.Fatalf("evidence-pack: exit %d %s", code, errOut)
	}
	if _, errOut, code := e.cli(t, orch, "evidence-pack", id, "-o", filepath.Join(dir, "orch.json")); code != errkind.ExitAuth {
		t.Errorf("an orchestrator's evidence pack: exit %d %s, want 4", code, errOut)
	}
	if _, errOut, code := e.cli(t, finance, "evidence-pack", "not-a-uuid"); code != exitUsage {
		t.Errorf("evidence-pack of a non-UUID: exit %d %s, want 2", code, errOut)
	}
	out, errOut, code := offlineCLI(t, "verify-pack", file)
	if code != 0 || !strings.Contains(out, "ok\t"+id) || !strings.Contains(out, "kid old-key\tthumbprint "+thumbprintOf(t, old)) {
		t.Fatalf("verify-pack: exit %d %s\n%s", code, errOut, out)
	}

	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	// decode gives the pack as generic JSON, numbers kept as written.
	decode := func() map[string]any {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var v map[string]any
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	obj := func(v any) map[string]any { return v.(map[string]any) }
	list := func(v any) []any { return v.([]any) }
	flip := func(s string, at int) string { // change one character
		b := []byte(s)
		if b[at] == 'A' {
			b[at] = 'B'
		} else {
			b[at] = 'A'
		}
		return string(b)
	}
	ackEvent := func(p map[string]any) map[string]any {
		for _, ev := range list(p["events"]) {
			if obj(ev)["evidence"] != nil {
				return obj(ev)
			}
		}
		t.Fatal("no event stores a token")
		return nil
	}
	cases := map[string]func(p map[string]any){
		"unchanged": func(map[string]any) {},
		"an event's actor": func(p map[string]any) {
			obj(list(p["events"])[1])["actor"] = "principal:mallory"
		},
		"an event's data": func(p map[string]any) {
			obj(obj(list(p["events"])[0])["data"])["amount_minor"] = json.Number("1")
		},
		"a token byte on its event": func(p map[string]any) {
			ev := ackEvent(p)
			tok := ev["evidence"].(string)
			ev["evidence"] = flip(tok, len(tok)-5)
		},
		"a token byte in the token list": func(p map[string]any) {
			tk := obj(list(p["tokens"])[0])
			tok := tk["token"].(string)
			tk["token"] = flip(tok, len(tok)-5)
		},
		"a key's material": func(p map[string]any) {
			jwk := obj(obj(list(p["org_keys"])[0])["jwk"])
			jwk["x"] = flip(jwk["x"].(string), 3)
		},
		"a key's thumbprint": func(p map[string]any) {
			k := obj(list(p["org_keys"])[0])
			k["thumbprint"] = flip(k["thumbprint"].(string), 3)
		},
		"a key's validity": func(p map[string]any) {
			k := obj(list(p["org_keys"])[0])
			k["valid_from"] = obj(list(p["tokens"])[0])["accepted_at"].(string)[:4] + "-12-31T23:59:59Z"
		},
		"a key's validity moved earlier": func(p map[string]any) {
			obj(list(p["org_keys"])[0])["valid_from"] = "2000-01-01T00:00:00Z"
		},
		"a key's end removed": func(p map[string]any) {
			delete(obj(list(p["org_keys"])[0]), "valid_until")
		},
		"a key's end moved later": func(p map[string]any) {
			obj(list(p["org_keys"])[0])["valid_until"] = "2999-01-01T00:00:00Z"
		},
		"a key added to the org's stream": func(p map[string]any) {
			ev := list(p["org_events"])
			data := obj(obj(ev[0])["data"])
			data["keys_added"] = append(list(data["keys_added"]), map[string]any{"kid": "new-key", "thumbprint": thumbprintOf(t, next)})
		},
		"the org's last event removed": func(p map[string]any) {
			ev := list(p["org_events"])
			p["org_events"] = ev[:len(ev)-1]
		},
		"the org's stream removed": func(p map[string]any) {
			p["org_events"] = []any{}
		},
		"a key swapped for the later one": func(p map[string]any) {
			k := obj(list(p["org_keys"])[0])
			k["kid"] = "new-key"
			k["jwk"] = next.PublicJWK()
			k["thumbprint"] = thumbprintOf(t, next)
		},
		"the delegation's amount": func(p map[string]any) {
			obj(p["delegation"])["amount_minor"] = json.Number("999")
		},
		"the delegation's obligation state": func(p map[string]any) {
			obj(p["delegation"])["obligation_state"] = "written_off"
		},
		"the delegation's remote task": func(p map[string]any) {
			obj(p["delegation"])["remote_task_id"] = "task-other"
		},
		"the ledger id": func(p map[string]any) {
			p["ledger_id"] = "another-ledger"
		},
		"the last event removed": func(p map[string]any) {
			ev := list(p["events"])
			p["events"] = ev[:len(ev)-1]
		},
		"a middle event removed": func(p map[string]any) {
			ev := list(p["events"])
			p["events"] = append(append([]any{}, ev[:1]...), ev[2:]...)
		},
		"a member added": func(p map[string]any) {
			p["verified"] = true
		},
		"the checkpoints removed": func(p map[string]any) {
			delete(p, "checkpoints")
		},
		"a checkpoint member in the current format": func(p map[string]any) {
			p["checkpoint"] = list(p["checkpoints"])[0]
		},
	}
	for name, change := range cases {
		p := decode()
		change(p)
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".json")
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := offlineCLI(t, "verify-pack", f)
		t.Logf("%s: exit %d\n%s%s", name, code, out, errOut)
		want := exitFailure
		if name == "unchanged" {
			want = 0
		}
		if code != want {
			t.Errorf("%s: verify-pack exit %d, want %d\n%s%s", name, code, want, out, errOut)
		}
		if want != 0 && !strings.Contains(out, "BROKEN") && strings.Count(errOut, "\n") != 1 {
			t.Errorf("%s: no reason given\n%s%s", name, out, errOut)
		}
	}
	if _, errOut, code := offlineCLI(t, "verify-pack", filepath.Join(dir, "missing.json")); code != exitFailure || strings.Count(errOut, "\n") != 1 {
		t.Errorf("a missing file: exit %d %q", code, errOut)
	}
}

// TestEvidencePackCheckpointAnchorsTheTail: with the ledger signing
// checkpoints, the pack carries the ones that signed its streams' heads,
// and verify-pack checks them against the ledger's keys: a pack whose last
// event was cut off together with its head — a chain that still verifies
// on its own — is a break, as is a forged checkpoint or one checked
// against keys that did not sign it. Events appended after the checkpoint
// are reported as not covered, and verify; the next checkpoint covers
// them. A pack cut back to an earlier head and shipped with that head's
// checkpoint passes on its own, and is a break against the checkpoints
// the auditor exported (--checkpoints DIR). A pack of the first format,
// whose one checkpoint listed every stream, still verifies.
func TestEvidencePackCheckpointAnchorsTheTail(t *testing.T) {
	t.Parallel()
	e := startCheckpointingService(t, "QUITTANCE_CHECKPOINT_INTERVAL=1h")
	signer := compensationtest.NewEd25519Signer(t, "sup-key")
	orch, finance := e.supplierLedger(t, signer)
	id := e.compensatedBySignedAck(t, orch, "pack-cp", signer)
	dir := t.TempDir()
	download := func(name string) (string, map[string]any) {
		t.Helper()
		file := filepath.Join(dir, name)
		if _, errOut, code := e.cli(t, finance, "evidence-pack", id, "-o", file); code != 0 {
			t.Fatalf("evidence-pack: exit %d %s", code, errOut)
		}
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var p map[string]any
		if err := json.Unmarshal(raw, &p); err != nil {
			t.Fatal(err)
		}
		return file, p
	}
	write := func(name string, p map[string]any) string {
		t.Helper()
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}

	// Before any checkpoint the pack is anchored by nothing: a break,
	// unless the auditor explicitly accepts the chain as a prefix.
	file, _ := download("before.json")
	if out, _, code := offlineCLI(t, "verify-pack", file); code != exitFailure || !strings.Contains(out, "checkpoint\t"+id+"\tnone in the pack") ||
		!strings.Contains(out, "BROKEN\t"+id+"\tnothing signed says where the stream ended") {
		t.Fatalf("verify-pack without a checkpoint: exit %d, want %d\n%s", code, exitFailure, out)
	}
	if out, _, code := offlineCLI(t, "verify-pack", "--allow-unanchored", file); code != 0 || !strings.Contains(out, "none in the pack") {
		t.Fatalf("verify-pack --allow-unanchored without a checkpoint: exit %d\n%s", code, out)
	}
	if _, errOut, code := e.cli(t, e.oncall, "checkpoints", "create"); code != 0 {
		t.Fatalf("checkpoints create: exit %d %s", code, errOut)
	}
	file, pack := download("pack.json")
	events := pack["events"].([]any)
	n := len(events)
	out, errOut, code := offlineCLI(t, "verify-pack", file)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("covers events 1..%d of %d", n, n)) {
		t.Fatalf("verify-pack with a checkpoint: exit %d %s\n%s", code, errOut, out)
	}
	var ledgerKeys json.RawMessage
	if s := e.api(t, http.MethodGet, "/.well-known/jwks.json", "", nil, &ledgerKeys); s != http.StatusOK {
		t.Fatalf("ledger jwks: %d", s)
	}
	trusted := filepath.Join(dir, "ledger-jwks.json")
	if err := os.WriteFile(trusted, ledgerKeys, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := offlineCLI(t, "verify-pack", "--ledger-jwks", trusted, file); code != 0 {
		t.Fatalf("verify-pack against the ledger's published keys: exit %d %s\n%s", code, errOut, out)
	}

	// The tail cut off with its head: the chain and the head agree, the
	// checkpoint does not.
	last := events[n-2].(map[string]any)
	pack["events"] = events[:n-1]
	pack["head"] = map[string]any{"stream_seq": last["stream_seq"], "hash": last["hash"]}
	if out, _, code := offlineCLI(t, "verify-pack", write("cut.json", pack)); code != exitFailure || !strings.Contains(out, "tail was removed") {
		t.Errorf("a tail cut with its head: exit %d\n%s", code, out)
	}
	// The same, with the checkpoints stripped too: still a break.
	delete(pack, "checkpoints")
	if out, _, code := offlineCLI(t, "verify-pack", write("cut-stripped.json", pack)); code != exitFailure || !strings.Contains(out, "nothing signed says where the stream ended") {
		t.Errorf("a tail cut with its head and the checkpoint stripped: exit %d\n%s", code, out)
	}
	_, pack = download("pack.json")
	anchored := pack["checkpoints"].([]any)
	cp := anchored[0].(string)
	pack["checkpoints"] = []any{cp[:len(cp)-4] + map[bool]string{true: "AAAA", false: "BBBB"}[!strings.HasSuffix(cp, "AAAA")]}
	if out, _, code := offlineCLI(t, "verify-pack", write("forged.json", pack)); code != exitFailure || !strings.Contains(out, "checkpoint 1 does not verify") {
		t.Errorf("a forged checkpoint: exit %d\n%s", code, out)
	}
	other := filepath.Join(dir, "other-jwks.json")
	if err := os.WriteFile(other, compensationtest.NewEd25519Signer(t, "k1").JWKS(), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, _, code := offlineCLI(t, "verify-pack", "--ledger-jwks", other, file); code != exitFailure {
		t.Errorf("a checkpoint checked against keys that did not sign it: exit %d\n%s", code, out)
	}

	// An event after the checkpoint is not covered, and breaks nothing.
	if s := e.api(t, http.MethodPost, "/v1/delegations/"+id+"/notes", e.oncall, map[string]any{"note": "checked with Supplier"}, nil); s >= 300 {
		t.Fatalf("add a note: %d", s)
	}
	file, _ = download("later.json")
	if out, _, code := offlineCLI(t, "verify-pack", file); code != 0 || !strings.Contains(out, fmt.Sprintf("covers events 1..%d of %d", n, n+1)) {
		t.Errorf("verify-pack after a later event: exit %d\n%s", code, out)
	}

	// The next checkpoint signs the new head. A pack cut back to the old
	// head, with the old head's checkpoint, is consistent on its own; the
	// exported checkpoints show the stream went further.
	if _, errOut, code := e.cli(t, e.oncall, "checkpoints", "create"); code != 0 {
		t.Fatalf("checkpoints create: exit %d %s", code, errOut)
	}
	exported := filepath.Join(dir, "exported")
	if _, errOut, code := e.cli(t, finance, "checkpoints", "export", "--dir", exported); code != 0 {
		t.Fatalf("checkpoints export: exit %d %s", code, errOut)
	}
	file, pack = download("newest.json")
	if out, _, code := offlineCLI(t, "verify-pack", "--checkpoints", exported, "--ledger-jwks", trusted, file); code != 0 ||
		!strings.Contains(out, fmt.Sprintf("covers events 1..%d of %d", n+1, n+1)) {
		t.Errorf("verify-pack --checkpoints after the next checkpoint: exit %d\n%s", code, out)
	}
	pack["events"] = pack["events"].([]any)[:n]
	pack["head"] = map[string]any{"stream_seq": events[n-1].(map[string]any)["stream_seq"], "hash": events[n-1].(map[string]any)["hash"]}
	pack["checkpoints"] = anchored
	cutBack := write("cut-back.json", pack)
	if out, _, code := offlineCLI(t, "verify-pack", cutBack); code != 0 {
		t.Errorf("a pack cut back to an earlier signed head, on its own: exit %d (it cannot be told apart without the export)\n%s", code, out)
	}
	if out, _, code := offlineCLI(t, "verify-pack", "--checkpoints", exported, "--ledger-jwks", trusted, cutBack); code != exitFailure || !strings.Contains(out, "tail was removed") {
		t.Errorf("a pack cut back to an earlier signed head, against the export: exit %d\n%s", code, out)
	}
	if _, errOut, code := offlineCLI(t, "verify-pack", "--checkpoints", filepath.Join(dir, "none"), file); code != exitUsage || strings.Count(errOut, "\n") != 1 {
		t.Errorf("--checkpoints naming no directory: exit %d %q", code, errOut)
	}

	// A pack of the first format: one checkpoint, signed with the ledger's
	// key, listing every stream's head.
	_, pack = download("v1.json")
	raw, err := os.ReadFile(e.env["QUITTANCE_SIGNING_KEY_FILE"])
	if err != nil {
		t.Fatal(err)
	}
	identity, err := jose.LoadIdentity("ledger-cli", raw)
	if err != nil {
		t.Fatal(err)
	}
	headOf := func(stream string, records []any) audit.StreamHead {
		last := records[len(records)-1].(map[string]any)
		return audit.StreamHead{Stream: stream, Seq: int32(last["stream_seq"].(float64)), Hash: last["hash"].(string)}
	}
	whole, err := json.Marshal(audit.CheckpointPayload{LedgerID: "ledger-cli", ID: 1, At: time.Now().UTC(), Streams: []audit.StreamHead{
		headOf("budget:ops", []any{map[string]any{"stream_seq": 1.0, "hash": "00"}}),
		headOf(pack["delegation"].(map[string]any)["stream"].(string), pack["events"].([]any)),
		headOf("org:supplier", pack["org_events"].([]any)),
	}})
	if err != nil {
		t.Fatal(err)
	}
	jws, _, err := identity.Sign(audit.CheckpointType, whole)
	if err != nil {
		t.Fatal(err)
	}
	delete(pack, "checkpoints")
	pack["format"], pack["checkpoint"] = audit.EvidencePackFormatV1, jws
	if out, _, code := offlineCLI(t, "verify-pack", write("v1.json", pack)); code != 0 || !strings.Contains(out, fmt.Sprintf("covers events 1..%d of %d", n+1, n+1)) {
		t.Errorf("a pack of format %s: exit %d\n%s", audit.EvidencePackFormatV1, code, out)
	}
	pack["events"] = pack["events"].([]any)[:n]
	pack["head"] = map[string]any{"stream_seq": events[n-1].(map[string]any)["stream_seq"], "hash": events[n-1].(map[string]any)["hash"]}
	if out, _, code := offlineCLI(t, "verify-pack", write("v1-cut.json", pack)); code != exitFailure || !strings.Contains(out, "tail was removed") {
		t.Errorf("a pack of format %s cut with its head: exit %d\n%s", audit.EvidencePackFormatV1, code, out)
	}
}

// TestForgedPackNamesItsLedgerKey: a pack made up wholesale — a
// delegation's amount changed, every hash recomputed, its checkpoints
// signed again by a fresh key under the ledger's own kid, and that key
// shipped as the pack's ledger_jwks — is consistent on its own. Unpinned,
// verify-pack still accepts it but says so and names the fresh key's
// thumbprint, not the ledger's; pinned to the ledger's thumbprint (as
// quittance ledger-keys prints it), or to its published keys, it is a
// break. The genuine pack verifies pinned.
func TestForgedPackNamesItsLedgerKey(t *testing.T) {
	t.Parallel()
	e := startCheckpointingService(t, "QUITTANCE_CHECKPOINT_INTERVAL=1h")
	signer := compensationtest.NewEd25519Signer(t, "sup-key")
	orch, finance := e.supplierLedger(t, signer)
	id := e.compensatedBySignedAck(t, orch, "pack-forged", signer)
	if _, errOut, code := e.cli(t, e.oncall, "checkpoints", "create"); code != 0 {
		t.Fatalf("checkpoints create: exit %d %s", code, errOut)
	}
	dir := t.TempDir()
	genuine := filepath.Join(dir, "pack.json")
	if _, errOut, code := e.cli(t, finance, "evidence-pack", id, "-o", genuine); code != 0 {
		t.Fatalf("evidence-pack: exit %d %s", code, errOut)
	}

	// The ledger's thumbprint, out of band: ledger-keys needs no token.
	out, errOut, code := e.cli(t, "", "ledger-keys")
	if code != 0 || strings.Count(out, "\n") != 1 {
		t.Fatalf("ledger-keys: exit %d %s\n%s", code, errOut, out)
	}
	kid, tp, ok := strings.Cut(strings.TrimSpace(out), "\tthumbprint ")
	kid = strings.TrimPrefix(kid, "kid ")
	if !ok || !isThumbprint(tp) {
		t.Fatalf("ledger-keys printed %q", out)
	}
	published := filepath.Join(dir, "ledger-jwks.json")
	var ledgerKeys json.RawMessage
	if s := e.api(t, http.MethodGet, "/.well-known/jwks.json", "", nil, &ledgerKeys); s != http.StatusOK {
		t.Fatalf("ledger jwks: %d", s)
	}
	if err := os.WriteFile(published, ledgerKeys, 0o600); err != nil {
		t.Fatal(err)
	}
	if offline, _, code := offlineCLI(t, "ledger-keys", "--jwks", published); code != 0 || offline != out {
		t.Errorf("ledger-keys --jwks: exit %d %q, want %q", code, offline, out)
	}

	out, errOut, code = offlineCLI(t, "verify-pack", genuine)
	if code != 0 || !strings.Contains(out, "thumbprint "+tp+"\tUNPINNED") {
		t.Fatalf("verify-pack unpinned: exit %d %s\n%s", code, errOut, out)
	}
	out, errOut, code = offlineCLI(t, "verify-pack", "--ledger-key-thumbprint", tp, genuine)
	if code != 0 || !strings.Contains(out, "thumbprint "+tp+"\tpinned (--ledger-key-thumbprint)") || strings.Contains(out, "UNPINNED") {
		t.Fatalf("verify-pack pinned: exit %d %s\n%s", code, errOut, out)
	}

	// The forgery.
	raw, err := os.ReadFile(genuine)
	if err != nil {
		t.Fatal(err)
	}
	var pack map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&pack); err != nil {
		t.Fatal(err)
	}
	pack["delegation"].(map[string]any)["amount_minor"] = json.Number("1")
	events := pack["events"].([]any)
	events[0].(map[string]any)["data"].(map[string]any)["amount_minor"] = json.Number("1")
	prev := ledger.GenesisHash
	for _, ev := range events {
		m := ev.(map[string]any)
		b, _ := json.Marshal(m)
		var r ledger.EventRecord
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		le, err := r.Event()
		if err != nil {
			t.Fatal(err)
		}
		le.PrevHash = prev
		if le.Hash, err = le.ComputeHash(); err != nil {
			t.Fatal(err)
		}
		m["prev_hash"], m["hash"] = hex.EncodeToString(prev), hex.EncodeToString(le.Hash)
		prev = le.Hash
	}
	last := events[len(events)-1].(map[string]any)
	pack["head"] = map[string]any{"stream_seq": last["stream_seq"], "hash": last["hash"]}
	keyFile, err := jose.NewIdentityFile("forger", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var set map[string]any
	if err := json.Unmarshal(keyFile, &set); err != nil {
		t.Fatal(err)
	}
	set["keys"].([]any)[0].(map[string]any)["kid"] = kid // a kid is the signer's to choose
	keyFile, _ = json.Marshal(set)
	forger, err := jose.LoadIdentity(pack["ledger_id"].(string), keyFile)
	if err != nil {
		t.Fatal(err)
	}
	stream := pack["delegation"].(map[string]any)["stream"].(string)
	for i, cp := range pack["checkpoints"].([]any) {
		payload, err := base64.RawURLEncoding.DecodeString(strings.Split(cp.(string), ".")[1])
		if err != nil {
			t.Fatal(err)
		}
		var p audit.CheckpointPayload
		if err := json.Unmarshal(payload, &p); err != nil {
			t.Fatal(err)
		}
		for j, h := range p.Streams {
			if h.Stream == stream {
				p.Streams[j].Hash = last["hash"].(string)
			}
		}
		payload, _ = json.Marshal(p)
		jws, _, err := forger.Sign(audit.CheckpointType, payload)
		if err != nil {
			t.Fatal(err)
		}
		pack["checkpoints"].([]any)[i] = jws
	}
	pack["ledger_jwks"] = json.RawMessage(forger.JWKS())
	forgedJSON, _ := json.Marshal(pack)
	forged := filepath.Join(dir, "forged.json")
	if err := os.WriteFile(forged, forgedJSON, 0o600); err != nil {
		t.Fatal(err)
	}
	forgedTP, err := ledgerKeyThumbprint(forger.JWKS(), kid)
	if err != nil {
		t.Fatal(err)
	}

	// Unpinned, it passes, and says what it rests on.
	out, errOut, code = offlineCLI(t, "verify-pack", forged)
	if code != 0 || !strings.Contains(out, "kid "+kid+"\tthumbprint "+forgedTP+"\tUNPINNED") || strings.Contains(out, tp) {
		t.Errorf("the forged pack unpinned: exit %d %s, want 0 naming thumbprint %s as unpinned\n%s", code, errOut, forgedTP, out)
	}
	// Pinned, it is a break.
	out, errOut, code = offlineCLI(t, "verify-pack", "--ledger-key-thumbprint", tp, forged)
	if code != exitFailure || !strings.Contains(out, "BROKEN\t"+id+"\tthe pack's checkpoint 1 (checkpoint 1) is signed by ledger key "+kid+" with thumbprint "+forgedTP+", not by the pinned key") {
		t.Errorf("the forged pack pinned by thumbprint: exit %d %s, want %d\n%s", code, errOut, exitFailure, out)
	}
	if out, _, code := offlineCLI(t, "verify-pack", "--ledger-jwks", published, forged); code != exitFailure || !strings.Contains(out, "does not verify") {
		t.Errorf("the forged pack pinned by --ledger-jwks: exit %d, want %d\n%s", code, exitFailure, out)
	}
	if _, errOut, code := offlineCLI(t, "verify-pack", "--ledger-key-thumbprint", "not-a-thumbprint", genuine); code != exitUsage || strings.Count(errOut, "\n") != 1 {
		t.Errorf("a malformed thumbprint: exit %d %q, want %d", code, errOut, exitUsage)
	}
}
