package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/quittance/quittance/cmd/quittance/internal/errkind"
	"github.com/quittance/quittance/compensation/compensationtest"
)

// orgAnswer is what orgs register and orgs update print: the org, and the
// pending change when a second on-call principal must approve.
type orgAnswer struct {
	orgRegistration
	PendingChange *struct {
		ID     string `json:"id"`
		Kind   string `json:"kind"`
		Status string `json:"status"`
	} `json:"pending_change"`
}

// TestCLIOrgsRegisterAndUpdate: orgs register creates an org (a name alone
// at once, keys or an agent endpoint or a trust flag as a pending change);
// orgs update changes one setting and keeps the rest, the keys above all;
// a change of what the org is trusted with has no effect until the second
// on-call principal approves it. Bad flags exit 2 on one line, before any
// request.
func TestCLIOrgsRegisterAndUpdate(t *testing.T) {
	t.Parallel()
	e := startService(t)
	finance := e.newToken(t, "--role", "finance", "--name", "fin")
	run := func(token string, args ...string) (orgAnswer, string, int) {
		t.Helper()
		out, errOut, code := e.cli(t, token, args...)
		var a orgAnswer
		if code == 0 {
			if err := json.Unmarshal([]byte(out), &a); err != nil {
				t.Fatalf("%v printed %q (%v)", args, out, err)
			}
		}
		return a, errOut, code
	}
	show := func(id string) orgRegistration {
		t.Helper()
		a, errOut, code := run(finance, "orgs", "show", id)
		if code != 0 {
			t.Fatalf("orgs show %s: exit %d %s", id, code, errOut)
		}
		return a.orgRegistration
	}
	approve := func(a orgAnswer) {
		t.Helper()
		if a.PendingChange == nil || a.PendingChange.Kind != "org_update" || a.PendingChange.Status != "pending" {
			t.Fatalf("want a pending org_update, got %+v", a)
		}
		if _, errOut, code := e.cli(t, e.oncall, "changes", "approve", a.PendingChange.ID); code != errkind.ExitAuth {
			t.Fatalf("the requester approving: exit %d %s, want 4", code, errOut)
		}
		if _, errOut, code := e.cli(t, e.oncall2, "changes", "approve", a.PendingChange.ID); code != 0 {
			t.Fatalf("changes approve: exit %d %s", code, errOut)
		}
	}

	// A name alone applies at once.
	a, errOut, code := run(e.oncall, "orgs", "register", "plain", "--name", "Plain Ltd")
	if code != 0 || a.PendingChange != nil || a.ID != "plain" || a.Name != "Plain Ltd" {
		t.Fatalf("register by name: exit %d %s %+v", code, errOut, a)
	}
	// An org registered already is not registered again: exit 3.
	if _, errOut, code := e.cli(t, e.oncall, "orgs", "register", "plain", "--name", "Other"); code != exitConflict ||
		strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "orgs update") {
		t.Errorf("register an existing org: exit %d %q, want 3 and one line", code, errOut)
	}
	if got := show("plain"); got.Name != "Plain Ltd" {
		t.Errorf("a refused register renamed the org: %+v", got)
	}

	// Keys, an agent endpoint and a trust flag: nothing exists until bob
	// approves.
	signer := compensationtest.NewEd25519Signer(t, "sup-1")
	jwks := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(jwks, signer.JWKS(), 0o600); err != nil {
		t.Fatal(err)
	}
	a, errOut, code = run(e.oncall, "orgs", "register", "supplier", "--name", "Supplier", "--jwks", jwks,
		"--agent-card-url", "https://agent.supplier.example/.well-known/agent-card.json",
		"--allowed-hosts", "agent.supplier.example,api.supplier.example", "--shared-coordinator")
	if code != 0 {
		t.Fatalf("register with keys: exit %d %s", code, errOut)
	}
	if _, errOut, code := e.cli(t, finance, "orgs", "show", "supplier"); code != exitFailure || !strings.Contains(errOut, "not_found") {
		t.Fatalf("an unapproved registration exists: exit %d %s", code, errOut)
	}
	approve(a)
	org := show("supplier")
	if org.Name != "Supplier" || !org.SharedCoordinator || org.RequireSignedReceipts ||
		org.AgentCardURL != "https://agent.supplier.example/.well-known/agent-card.json" ||
		!slices.Equal(org.AllowedHosts, []string{"agent.supplier.example", "api.supplier.example"}) ||
		!strings.Contains(string(org.JWKS), `"sup-1"`) {
		t.Fatalf("registered: %+v", org)
	}

	// A new name applies at once and keeps everything else.
	a, errOut, code = run(e.oncall, "orgs", "update", "supplier", "--name", "Supplier Ltd")
	if code != 0 || a.PendingChange != nil || a.Name != "Supplier Ltd" {
		t.Fatalf("update name: exit %d %s %+v", code, errOut, a)
	}
	// require_signed_receipts is trust: pending, and the org unchanged
	// until bob approves.
	a, errOut, code = run(e.oncall, "orgs", "update", "supplier", "--require-signed-receipts")
	if code != 0 || a.RequireSignedReceipts {
		t.Fatalf("update require_signed_receipts: exit %d %s %+v", code, errOut, a)
	}
	if got := show("supplier"); got.RequireSignedReceipts {
		t.Fatalf("an unapproved require_signed_receipts took effect: %+v", got)
	}
	approve(a)
	got := show("supplier")
	if !got.RequireSignedReceipts || got.Name != "Supplier Ltd" || !got.SharedCoordinator || len(got.AllowedHosts) != 2 ||
		got.AgentCardURL != org.AgentCardURL || !strings.Contains(string(got.JWKS), `"sup-1"`) {
		t.Fatalf("after the approved change: %+v", got)
	}
	// The card requirements are trust too, and a later change keeps them.
	a, errOut, code = run(e.oncall, "orgs", "update", "supplier", "--require-signed-card", "--card-jku-hosts", "keys.supplier.example")
	if code != 0 || a.PendingChange == nil || a.RequireSignedCard {
		t.Fatalf("update the card requirements: exit %d %s %+v", code, errOut, a)
	}
	approve(a)
	if _, _, code := run(e.oncall, "orgs", "update", "supplier", "--name", "Supplier Ltd."); code != 0 {
		t.Fatalf("rename: exit %d", code)
	}
	if got := show("supplier"); !got.RequireSignedCard || !slices.Equal(got.CardJKUHosts, []string{"keys.supplier.example"}) {
		t.Fatalf("the card requirements after a rename: %+v", got)
	}
	// No card change awaits approval: exit 3.
	if _, errOut, code := e.cli(t, e.oncall, "orgs", "accept-card", "supplier"); code != exitConflict || !strings.Contains(errOut, "no_card_change") {
		t.Errorf("accept-card with no change: exit %d %q, want 3", code, errOut)
	}
	// Turning the flag off is a change of trust too.
	a, errOut, code = run(e.oncall, "orgs", "update", "supplier", "--shared-coordinator=false")
	if code != 0 || a.PendingChange == nil || !show("supplier").SharedCoordinator {
		t.Fatalf("update shared_coordinator=false: exit %d %s %+v", code, errOut, a)
	}
	approve(a)
	if show("supplier").SharedCoordinator {
		t.Fatal("the approved shared_coordinator=false did not apply")
	}
	// Removing the endpoint.
	a, errOut, code = run(e.oncall, "orgs", "update", "supplier", "--agent-card-url", "", "--allowed-hosts", "")
	if code != 0 {
		t.Fatalf("remove the endpoint: exit %d %s", code, errOut)
	}
	approve(a)
	if got := show("supplier"); got.AgentCardURL != "" || len(got.AllowedHosts) != 0 || !strings.Contains(string(got.JWKS), `"sup-1"`) {
		t.Fatalf("after removing the endpoint: %+v", got)
	}

	// Bad flags: exit 2, one line, before any request.
	for _, args := range [][]string{
		{"orgs", "register", "x"},
		{"orgs", "register", "x", "--name", " "},
		{"orgs", "register", "x", "--name", "X", "--jwks", jwks, "--jwks-url", "https://keys.example/jwks.json"},
		{"orgs", "register", "x", "--name", "X", "--shared-coordinator=maybe"},
		{"orgs", "register", "--name", "X"},
		{"orgs", "update", "supplier"},
		{"orgs", "update", "supplier", "--name", ""},
		{"orgs", "update", "supplier", "--require-signed-receipts=perhaps"},
		{"orgs", "update", "supplier", "--colour", "red"},
	} {
		_, errOut, code := e.cli(t, e.oncall, args...)
		if code != exitUsage || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want 2 and one line", args, code, errOut)
		}
	}
	// The service's own checks come back as its problem, on one line.
	if _, errOut, code := e.cli(t, e.oncall, "orgs", "update", "supplier", "--allowed-hosts", "agent.supplier.example"); code != exitFailure ||
		!strings.HasPrefix(errOut, "quittance: ") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("allowed hosts without an agent card: exit %d %q", code, errOut)
	}
	if _, errOut, code := e.cli(t, e.oncall, "orgs", "update", "nobody", "--name", "N"); code != exitFailure || !strings.Contains(errOut, "not_found") {
		t.Errorf("update an unknown org: exit %d %q", code, errOut)
	}
	if _, errOut, code := e.cli(t, finance, "orgs", "update", "supplier", "--name", "Mine"); code != errkind.ExitAuth {
		t.Errorf("finance updating an org: exit %d %q, want 4", code, errOut)
	}
	if _, errOut, code := e.cli(t, finance, "orgs", "register", "fin-org", "--name", "Mine"); code != errkind.ExitAuth {
		t.Errorf("finance registering an org: exit %d %q, want 4", code, errOut)
	}
}
