package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// TestCLIPrincipalsLinkOIDC: `quittance principals link-oidc` asks for an
// OpenID Connect identity to sign in as a person principal, a pending
// change that no approval applies (exit 3, oidc_link_needs_identity: the
// identity confirms it in the console). Usage errors exit 2, an identity
// linked to another principal exits 3 with one line. `principals
// no-identity-provider-account` asks for a mark the other on-call
// approves, shown on the principal. The service's database role may add and relink
// identities but never remove or rewrite one.
func TestCLIPrincipalsLinkOIDC(t *testing.T) {
	t.Parallel()
	e := startService(t)
	const issuer = "https://idp.example.com"
	if _, _, code := e.cli(t, e.oncall, "principals", "link-oidc", "not-a-uuid", "--issuer", issuer, "--subject", "s"); code != exitUsage {
		t.Errorf("link-oidc of a non-UUID: exit %d, want 2", code)
	}
	if _, _, code := e.cli(t, e.oncall, "principals", "link-oidc", uuid.NewString(), "--subject", "s"); code != exitUsage {
		t.Errorf("link-oidc without --issuer: exit %d, want 2", code)
	}
	if _, _, code := e.cli(t, e.oncall, "principals", "link-oidc", uuid.NewString(), "--issuer", issuer); code != exitUsage {
		t.Errorf("link-oidc without --subject: exit %d, want 2", code)
	}

	var me struct {
		ID string `json:"id"`
	}
	out, errOut, code := e.cli(t, e.oncall, "principals", "list")
	if code != 0 {
		t.Fatalf("principals list: exit %d %s", code, errOut)
	}
	var list struct {
		Principals []struct {
			ID             string `json:"id"`
			Name           string `json:"name"`
			OIDCIdentities []struct {
				Issuer  string `json:"issuer"`
				Subject string `json:"subject"`
			} `json:"oidc_identities"`
		} `json:"principals"`
	}
	_ = json.Unmarshal([]byte(out), &list)
	var bob string
	for _, p := range list.Principals {
		switch p.Name {
		case "alice":
			me.ID = p.ID
		case "bob":
			bob = p.ID
		}
	}
	if me.ID == "" || bob == "" {
		t.Fatalf("principals list: %s", out)
	}

	out, errOut, code = e.cli(t, e.oncall, "principals", "link-oidc", me.ID, "--issuer", issuer, "--subject", "alice-1")
	if code != 0 || !strings.Contains(out, `"kind": "oidc_link"`) {
		t.Fatalf("link-oidc: exit %d %s\n%s", code, errOut, out)
	}
	// No approval applies a link: the identity's holder confirms it in
	// the console.
	var asked struct {
		PendingChange struct{ ID string } `json:"pending_change"`
	}
	_ = json.Unmarshal([]byte(out), &asked)
	_, errOut, code = e.cli(t, e.oncall2, "changes", "approve", asked.PendingChange.ID)
	if code != exitConflict || !strings.HasPrefix(errOut, "quittance: oidc_link_needs_identity: ") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("approving a link: exit %d, stderr %q", code, errOut)
	}
	// An identity linked to alice (as its confirmation would leave it)
	// cannot be linked to bob.
	if err := e.exec(t.Context(), `INSERT INTO oidc_identities (issuer, subject, principal_id, linked_by, linked_at) VALUES ($1, 'alice-2', $2, $2, now())`, issuer, me.ID); err != nil {
		t.Fatal(err)
	}
	_, errOut, code = e.cli(t, e.oncall, "principals", "link-oidc", bob, "--issuer", issuer, "--subject", "alice-2")
	if code != exitConflict || !strings.HasPrefix(errOut, "quittance: oidc_identity_linked: ") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("linking an identity linked to another principal: exit %d, stderr %q", code, errOut)
	}

	// Bob has no account at the identity provider: alice asks, bob
	// approves; asked again, it exits 3.
	out, errOut, code = e.cli(t, e.oncall, "principals", "no-identity-provider-account", bob)
	if code != 0 || !strings.Contains(out, `"kind": "no_identity_provider_account"`) {
		t.Fatalf("no-identity-provider-account: exit %d %s\n%s", code, errOut, out)
	}
	e.approvePending(t, []byte(out))
	out, _, _ = e.cli(t, e.oncall, "principals", "show", bob)
	if !strings.Contains(out, `"no_identity_provider_account_at"`) {
		t.Errorf("bob after the mark:\n%s", out)
	}
	if _, errOut, code = e.cli(t, e.oncall, "principals", "no-identity-provider-account", bob); code != exitConflict || !strings.HasPrefix(errOut, "quittance: principal_marked: ") {
		t.Errorf("marking bob again: exit %d, stderr %q", code, errOut)
	}
	if _, _, code = e.cli(t, e.oncall, "principals", "no-identity-provider-account", "nope"); code != exitUsage {
		t.Errorf("no-identity-provider-account of a non-UUID: exit %d, want 2", code)
	}

	conn, err := pgx.Connect(t.Context(), e.serviceURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	for _, sql := range []string{
		`DELETE FROM oidc_identities`,
		`UPDATE oidc_identities SET subject = 'mallory'`,
		`UPDATE oidc_identities SET recorded_principal_id = principal_id`,
		`TRUNCATE oidc_identities`,
	} {
		if _, err := conn.Exec(t.Context(), sql); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("%s as the service's role: %v, want permission denied", sql, err)
		}
	}
	if _, err := conn.Exec(t.Context(), `UPDATE oidc_identities SET linked_at = linked_at WHERE false`); err != nil {
		t.Errorf("the service's role relinking: %v", err)
	}
}
