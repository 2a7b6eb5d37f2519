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
// change the other on-call approves; `principals list` then shows the
// identity. Usage errors exit 2, an identity linked to another principal
// exits 3 with one line. The service's database role may add and relink
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
	e.approvePending(t, []byte(out))
	out, _, _ = e.cli(t, e.oncall, "principals", "list")
	list.Principals = nil
	_ = json.Unmarshal([]byte(out), &list)
	linked := false
	for _, p := range list.Principals {
		linked = linked || (p.ID == me.ID && len(p.OIDCIdentities) == 1 && p.OIDCIdentities[0].Issuer == issuer && p.OIDCIdentities[0].Subject == "alice-1")
	}
	if !linked {
		t.Fatalf("principals list after the link:\n%s", out)
	}
	_, errOut, code = e.cli(t, e.oncall, "principals", "link-oidc", bob, "--issuer", issuer, "--subject", "alice-1")
	if code != exitConflict || !strings.HasPrefix(errOut, "quittance: oidc_identity_linked: ") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("linking an identity linked to another principal: exit %d, stderr %q", code, errOut)
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
