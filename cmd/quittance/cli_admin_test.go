package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quittance/quittance/cmd/quittance/internal/errkind"
	"github.com/quittance/quittance/compensation/compensationtest"
)

// TestCLITaskClasses: list, show and set task classes; set keeps what it
// is not told to change, and bad input is a usage error before any request.
func TestCLITaskClasses(t *testing.T) {
	t.Parallel()
	e := startService(t)
	finance := e.newToken(t, "--role", "finance", "--name", "fin")

	out, errOut, code := e.cli(t, finance, "task-classes", "list")
	if code != 0 || !strings.HasPrefix(out, "NAME") || !strings.Contains(out, "procurement") ||
		!strings.Contains(out, "read_only") || !strings.Contains(out, "72h0m0s") {
		t.Fatalf("list: exit %d %s\n%s", code, errOut, out)
	}

	// Every change of a class waits for a second on-call approver.
	set := func(args ...string) {
		t.Helper()
		out, errOut, code := e.cli(t, e.oncall, append([]string{"task-classes", "set"}, args...)...)
		var pending struct {
			PendingChange struct{ ID string } `json:"pending_change"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &pending) != nil || pending.PendingChange.ID == "" {
			t.Fatalf("set %v: exit %d %s, want a pending change: %q", args, code, errOut, out)
		}
		if _, errOut, code := e.cli(t, e.oncall2, "changes", "approve", pending.PendingChange.ID); code != 0 {
			t.Fatalf("approve set %v: exit %d %s", args, code, errOut)
		}
	}
	show := func() taskClass {
		t.Helper()
		out, _, code := e.cli(t, finance, "task-classes", "show", "quick_procurement")
		var tc taskClass
		if err := json.Unmarshal([]byte(out), &tc); code != 0 || err != nil {
			t.Fatalf("show: exit %d %q (%v)", code, out, err)
		}
		return tc
	}
	// A new class starts from the defaults of an unregistered one.
	set("quick_procurement", "--compensation-timeout", "90s")
	if tc := show(); !tc.EffectCapable || tc.CompensationTimeout != "1m30s" || strings.Join(tc.GateOn, ",") != "canceled,failed" {
		t.Fatalf("new class: %+v", tc)
	}
	// Changing one setting keeps the others.
	set("quick_procurement", "--gate-on", "canceled")
	if tc := show(); tc.CompensationTimeout != "1m30s" || strings.Join(tc.GateOn, ",") != "canceled" || !tc.EffectCapable {
		t.Fatalf("after set gate: %+v", tc)
	}
	set("quick_procurement", "--effect-capable=false")
	out, _, _ = e.cli(t, finance, "task-classes", "list", "-o", "json")
	var all []taskClass
	if err := json.Unmarshal([]byte(out), &all); err != nil || len(all) != 6 {
		t.Fatalf("list json: %q (%v)", out, err)
	}
	for _, c := range all {
		if c.Name == "quick_procurement" && (c.EffectCapable || c.CompensationTimeout != "1m30s") {
			t.Errorf("after three sets: %+v", c)
		}
	}

	for _, args := range [][]string{
		{"task-classes", "set", "x"},
		{"task-classes", "set", "x", "--compensation-timeout", "soon"},
		{"task-classes", "set", "x", "--compensation-timeout", "-1h"},
		{"task-classes", "set", "x", "--gate-on", "completed"},
		{"task-classes", "list", "-o", "csv"},
		{"task-classes", "show"},
	} {
		_, errOut, code := e.cli(t, e.oncall, args...)
		if code != exitUsage || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want 2 and one line", args, code, errOut)
		}
	}
	// The service's own checks come back as its problem, on one line.
	if _, errOut, code := e.cli(t, e.oncall, "task-classes", "set", "Bad-Name", "--compensation-timeout", "1h"); code != exitFailure ||
		!strings.HasPrefix(errOut, "quittance: ") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("set with an invalid name: exit %d %q", code, errOut)
	}
	if _, errOut, code := e.cli(t, finance, "task-classes", "set", "quick_procurement", "--compensation-timeout", "1h"); code != errkind.ExitAuth {
		t.Errorf("finance changing a class: exit %d %q", code, errOut)
	}
	if _, errOut, code := e.cli(t, finance, "task-classes", "show", "nope"); code != exitFailure || !strings.Contains(errOut, "not_found") {
		t.Errorf("show missing: exit %d %q", code, errOut)
	}
}

// TestCLIOrgKeys: keys set replaces an org's JWK Set and keeps the rest of
// its registration; keys show prints it; a file that is not a public JWK
// Set is refused before any request.
func TestCLIOrgKeys(t *testing.T) {
	t.Parallel()
	e := startService(t)
	old := compensationtest.NewEd25519Signer(t, "old-key")
	next := compensationtest.NewES256Signer(t, "new-key")
	var registered json.RawMessage
	if s := e.api(t, http.MethodPut, "/admin/v1/orgs/supplier", e.oncall, map[string]any{
		"name": "Supplier", "shared_coordinator": true, "require_signed_receipts": true,
		"jwks": json.RawMessage(old.JWKS()),
	}, &registered); s != http.StatusAccepted {
		t.Fatalf("put org: %d", s)
	}
	e.approvePending(t, registered)
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	both := write("both.json", compensationtest.JWKS(old.PublicJWK(), next.PublicJWK()))

	// A key change waits for the second on-call principal.
	out, errOut, code := e.cli(t, e.oncall, "orgs", "keys", "set", "supplier", "--jwks", both)
	if code != 0 {
		t.Fatalf("keys set: exit %d %s", code, errOut)
	}
	e.approvePending(t, []byte(out))
	out, errOut, code = e.cli(t, e.oncall, "orgs", "keys", "show", "supplier")
	if code != 0 || !strings.Contains(out, `"old-key"`) || !strings.Contains(out, `"new-key"`) {
		t.Fatalf("keys show: exit %d %s\n%s", code, errOut, out)
	}
	out, _, code = e.cli(t, e.oncall, "orgs", "show", "supplier")
	var org orgRegistration
	if err := json.Unmarshal([]byte(out), &org); code != 0 || err != nil || org.Name != "Supplier" || !org.SharedCoordinator || !org.RequireSignedReceipts {
		t.Fatalf("the rest of the registration changed: %q", out)
	}

	for name, content := range map[string][]byte{
		"not-json.json": []byte("kid: new-key"),
		"no-keys.json":  []byte(`{"keys": []}`),
		"private.json":  compensationtest.JWKS(next.PrivateJWK()),
	} {
		_, errOut, code := e.cli(t, e.oncall, "orgs", "keys", "set", "supplier", "--jwks", write(name, content))
		if code != exitUsage || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%s: exit %d %q, want 2 and one line", name, code, errOut)
		}
	}
	if _, errOut, code := e.cli(t, e.oncall, "orgs", "keys", "set", "supplier"); code != exitUsage {
		t.Errorf("without --jwks: exit %d %q", code, errOut)
	}
	// A key the service cannot use (an HMAC secret) is its 422, on one line.
	oct := write("oct.json", []byte(`{"keys":[{"kty":"oct","kid":"s","k":"c2VjcmV0c2VjcmV0c2VjcmV0"}]}`))
	if _, errOut, code := e.cli(t, e.oncall, "orgs", "keys", "set", "supplier", "--jwks", oct); code != exitFailure ||
		!strings.HasPrefix(errOut, "quittance: ") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("symmetric key: exit %d %q", code, errOut)
	}
	if _, errOut, code := e.cli(t, e.oncall, "orgs", "keys", "set", "nobody", "--jwks", both); code != exitFailure || !strings.Contains(errOut, "not_found") {
		t.Errorf("unknown org: exit %d %q", code, errOut)
	}
	out, _, _ = e.cli(t, e.oncall, "orgs", "keys", "show", "supplier")
	if strings.Contains(out, `"s"`) {
		t.Errorf("a refused set was registered:\n%s", out)
	}
}
