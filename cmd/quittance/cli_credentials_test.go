package main

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/cmd/quittance/internal/errkind"
	"github.com/quittance/quittance/ledger/access"
)

// issuedCLI is what token create and credentials rotate print.
type issuedCLI struct {
	ID            string     `json:"id"`
	PrincipalID   string     `json:"principal_id"`
	Token         string     `json:"token"`
	TokenPart     string     `json:"token_part"`
	ExpiresAt     *time.Time `json:"expires_at"`
	PendingChange *struct {
		ID     string `json:"id"`
		Kind   string `json:"kind"`
		Status string `json:"status"`
	} `json:"pending_change"`
}

// credentialCLI is a credential as credentials list prints it.
type credentialCLI struct {
	ID          string     `json:"id"`
	PrincipalID string     `json:"principal_id"`
	Name        string     `json:"name"`
	CreatedAt   time.Time  `json:"created_at"`
	ExpiresAt   *time.Time `json:"expires_at"`
	LastUsedAt  *time.Time `json:"last_used_at"`
	RevokedAt   *time.Time `json:"revoked_at"`
}

// changeCLI is a pending change as changes show prints it.
type changeCLI struct {
	ID             string          `json:"id"`
	Kind           string          `json:"kind"`
	Status         string          `json:"status"`
	Summary        string          `json:"summary"`
	Change         json.RawMessage `json:"change"`
	DecisionReason string          `json:"decision_reason"`
}

// issue runs token create (or credentials rotate, args saying which) as
// token and decodes what it printed.
func (e *cliEnv) issue(t *testing.T, token string, args ...string) issuedCLI {
	t.Helper()
	out, errOut, code := e.cli(t, token, args...)
	var is issuedCLI
	if err := json.Unmarshal([]byte(out), &is); code != 0 || err != nil || (is.Token == "") == (is.TokenPart == "") || is.ID == "" {
		t.Fatalf("%v: exit %d %s (%v)\n%s", args, code, errOut, err, out)
	}
	return is
}

// approvePerson has the second on-call approve the new person is, and
// joins the person's token from the two parts of its split credential.
func (e *cliEnv) approvePerson(t *testing.T, is *issuedCLI) {
	t.Helper()
	out, errOut, code := e.cli(t, e.oncall2, "changes", "approve", is.PendingChange.ID)
	var approved struct {
		TokenPart string `json:"token_part"`
	}
	if err := json.Unmarshal([]byte(out), &approved); code != 0 || err != nil || approved.TokenPart == "" || is.TokenPart == "" {
		t.Fatalf("approve %s: exit %d %s (%v)\n%s", is.PrincipalID, code, errOut, err, out)
	}
	is.Token = is.TokenPart + approved.TokenPart
}

// credentials runs credentials list as token and returns them by id, and
// the raw output.
func (e *cliEnv) credentials(t *testing.T, token string, args ...string) (map[string]credentialCLI, string) {
	t.Helper()
	out, errOut, code := e.cli(t, token, append([]string{"credentials", "list"}, args...)...)
	var list struct {
		Credentials []credentialCLI `json:"credentials"`
	}
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil {
		t.Fatalf("credentials list: exit %d %s (%v)", code, errOut, err)
	}
	byID := map[string]credentialCLI{}
	for _, c := range list.Credentials {
		byID[c.ID] = c
	}
	return byID, out
}

// showChange runs changes show as token.
func (e *cliEnv) showChange(t *testing.T, token, id string) changeCLI {
	t.Helper()
	out, errOut, code := e.cli(t, token, "changes", "show", id)
	var c changeCLI
	if err := json.Unmarshal([]byte(out), &c); code != 0 || err != nil || c.ID != id {
		t.Fatalf("changes show %s: exit %d %s (%v)\n%s", id, code, errOut, err, out)
	}
	return c
}

// usable reports whether token is accepted (credentials list, which any
// principal may run) or refused (exit 4).
func (e *cliEnv) usable(t *testing.T, token string) bool {
	t.Helper()
	_, errOut, code := e.cli(t, token, "credentials", "list")
	if code != 0 && code != errkind.ExitAuth {
		t.Fatalf("credentials list: exit %d %s", code, errOut)
	}
	return code == 0
}

// TestCLICredentialLifetimeLabelAndLastUse: a person's credential issued
// without --expires-in expires QUITTANCE_PERSON_CREDENTIAL_TTL after its
// issue, a machine's never, one with --expires-in then; --label names the
// credential in credentials list; last_used_at is empty until the
// credential is used and set by its use; the listing never holds a
// secret or its hash.
func TestCLICredentialLifetimeLabelAndLastUse(t *testing.T) {
	t.Parallel()
	const ttl = 5 * time.Hour
	e := startService(t, "QUITTANCE_PERSON_CREDENTIAL_TTL="+ttl.String())

	fin := e.issue(t, e.oncall, "token", "create", "--role", "finance", "--name", "fin", "--label", "fin-laptop")
	if fin.PendingChange == nil {
		t.Fatalf("a new person was created at once: %+v", fin)
	}
	e.approvePerson(t, &fin)
	orch := e.issue(t, e.oncall, "token", "create", "--role", "orchestrator", "--tenant", "acme", "--name", "orch", "--label", "ci-runner")
	issued := time.Now()
	spare := e.issue(t, e.oncall, "token", "create", "--role", "oncall", "--name", "alice", "--expires-in", "1h", "--label", "alice-spare")

	creds, out := e.credentials(t, e.oncall)
	f, o, s := creds[fin.ID], creds[orch.ID], creds[spare.ID]
	if f.Name != "fin-laptop" || o.Name != "ci-runner" || s.Name != "alice-spare" {
		t.Errorf("labels: %q %q %q, want fin-laptop ci-runner alice-spare", f.Name, o.Name, s.Name)
	}
	if f.ExpiresAt == nil || f.ExpiresAt.Sub(f.CreatedAt) < ttl-time.Second || f.ExpiresAt.Sub(f.CreatedAt) > ttl+time.Second {
		t.Errorf("a person's default expiry: created %s, expires %v; want %s later", f.CreatedAt, f.ExpiresAt, ttl)
	}
	if fin.ExpiresAt == nil || !fin.ExpiresAt.Equal(*f.ExpiresAt) {
		t.Errorf("token create printed expires_at %v, the listing %v", fin.ExpiresAt, f.ExpiresAt)
	}
	if o.ExpiresAt != nil {
		t.Errorf("a machine's credential expires: %v", o.ExpiresAt)
	}
	if s.ExpiresAt == nil || s.ExpiresAt.Sub(issued) < time.Hour-time.Minute || s.ExpiresAt.Sub(issued) > time.Hour+time.Minute {
		t.Errorf("--expires-in 1h: expires %v, issued about %s", s.ExpiresAt, issued)
	}

	// Unused: no last_used_at. Used: set, at the use.
	if f.LastUsedAt != nil || o.LastUsedAt != nil {
		t.Fatalf("unused credentials have last_used_at: %v %v", f.LastUsedAt, o.LastUsedAt)
	}
	before := time.Now().Add(-time.Second)
	if _, errOut, code := e.cli(t, fin.Token, "obligations", "list"); code != 0 {
		t.Fatalf("fin's token: exit %d %s", code, errOut)
	}
	after := time.Now().Add(time.Second)
	creds, out2 := e.credentials(t, e.oncall)
	if u := creds[fin.ID].LastUsedAt; u == nil || u.Before(before) || u.After(after) {
		t.Errorf("fin's last_used_at after its use at %s: %v", before, u)
	}
	if creds[orch.ID].LastUsedAt != nil {
		t.Errorf("an unused credential got last_used_at %v", creds[orch.ID].LastUsedAt)
	}
	// A person sees their own, with its use.
	own, out3 := e.credentials(t, fin.Token)
	if len(own) != 1 || own[fin.ID].LastUsedAt == nil {
		t.Errorf("fin's own listing: %+v", own)
	}
	for _, listing := range []string{out, out2, out3} {
		for _, secret := range []string{fin.Token, orch.Token, spare.Token, e.oncall, e.oncall2} {
			h := access.HashToken(secret)
			if strings.Contains(listing, secret) || strings.Contains(listing, hex.EncodeToString(h)) ||
				strings.Contains(listing, base64.StdEncoding.EncodeToString(h)) || strings.Contains(listing, base64.RawURLEncoding.EncodeToString(h)) {
				t.Fatalf("credentials list shows a secret or its hash:\n%s", listing)
			}
		}
	}
}

// TestCLIRotateGrantRoleAndChanges: credentials rotate replaces your own
// credential at once (label kept) and, for on-call rotating a machine's, as
// a pending change the old credential outlives until a second on-call
// approves; principals grant-role asks for a role that applies only when
// approved; changes refuse ends a change for good; changes show prints
// what a change applies. Bad arguments exit 2 before any request.
func TestCLIRotateGrantRoleAndChanges(t *testing.T) {
	t.Parallel()
	e := startService(t)
	fin := e.issue(t, e.oncall, "token", "create", "--role", "finance", "--name", "fin", "--label", "fin-laptop")
	e.approvePerson(t, &fin)
	orch := e.issue(t, e.oncall, "token", "create", "--role", "orchestrator", "--tenant", "acme", "--name", "orch")

	// Your own: at once; the old one stops working, the new one works.
	issued := time.Now()
	rotated := e.issue(t, fin.Token, "credentials", "rotate", fin.ID, "--expires-in", "2h")
	if rotated.PendingChange != nil || rotated.ID == fin.ID || rotated.PrincipalID != fin.PrincipalID {
		t.Fatalf("rotate own: %+v", rotated)
	}
	if e.usable(t, fin.Token) || !e.usable(t, rotated.Token) {
		t.Fatal("after rotating: the old credential works or the new one does not")
	}
	creds, _ := e.credentials(t, e.oncall, "--principal", fin.PrincipalID)
	if c := creds[rotated.ID]; c.Name != "fin-laptop" || c.ExpiresAt == nil || c.ExpiresAt.Sub(issued) > 2*time.Hour+time.Minute ||
		c.ExpiresAt.Sub(issued) < 2*time.Hour-time.Minute || creds[fin.ID].RevokedAt == nil {
		t.Errorf("after rotating: %+v", creds)
	}
	// Another person's: never.
	if _, errOut, code := e.cli(t, e.oncall, "credentials", "rotate", rotated.ID); code != exitConflict ||
		!strings.Contains(errOut, "credential_for_another_person") {
		t.Errorf("on-call rotating a person's credential: exit %d %q, want 3", code, errOut)
	}
	// A machine's, by on-call: pending; the old one works until approved.
	next := e.issue(t, e.oncall, "credentials", "rotate", orch.ID)
	if next.PendingChange == nil || next.PendingChange.Kind != "credential_create" {
		t.Fatalf("on-call rotating a machine's: %+v", next)
	}
	if !e.usable(t, orch.Token) || e.usable(t, next.Token) {
		t.Fatal("before approval: the old machine credential stopped, or the new one works")
	}
	// changes show (finance may read it) says what the change applies,
	// never the new secret.
	shown, errOut, code := e.cli(t, rotated.Token, "changes", "show", next.PendingChange.ID)
	if code != 0 || strings.Contains(shown, next.Token) {
		t.Fatalf("changes show: exit %d %s\n%s", code, errOut, shown)
	}
	if c := e.showChange(t, rotated.Token, next.PendingChange.ID); c.Kind != "credential_create" || c.Status != "pending" ||
		!strings.Contains(c.Summary, "rotate credential "+orch.ID) || !strings.Contains(string(c.Change), orch.ID) {
		t.Errorf("changes show of the rotation: %+v", c)
	}
	if _, _, code := e.cli(t, e.oncall, "changes", "approve", next.PendingChange.ID); code != errkind.ExitAuth {
		t.Errorf("the requester approving the rotation: exit %d, want 4", code)
	}
	if _, errOut, code := e.cli(t, e.oncall2, "changes", "approve", next.PendingChange.ID); code != 0 {
		t.Fatalf("approve the rotation: exit %d %s", code, errOut)
	}
	if e.usable(t, orch.Token) || !e.usable(t, next.Token) {
		t.Fatal("after approval: the old machine credential works, or the new one does not")
	}
	if c := e.showChange(t, e.oncall, next.PendingChange.ID); c.Status != "applied" {
		t.Errorf("the approved rotation is %s", c.Status)
	}

	// grant-role: pending, and fin is still finance until approved.
	grant := func() string {
		t.Helper()
		out, errOut, code := e.cli(t, e.oncall, "principals", "grant-role", fin.PrincipalID, "--role", "oncall")
		var g struct {
			Principal struct {
				Role string `json:"role"`
			} `json:"principal"`
			PendingChange *struct {
				ID   string `json:"id"`
				Kind string `json:"kind"`
			} `json:"pending_change"`
		}
		if err := json.Unmarshal([]byte(out), &g); code != 0 || err != nil || g.PendingChange == nil ||
			g.PendingChange.Kind != "role_grant" || g.Principal.Role != "finance" {
			t.Fatalf("grant-role: exit %d %s (%v)\n%s", code, errOut, err, out)
		}
		return g.PendingChange.ID
	}
	role := func() string {
		t.Helper()
		out, errOut, code := e.cli(t, e.oncall, "principals", "show", fin.PrincipalID)
		var p struct {
			Role string `json:"role"`
		}
		if err := json.Unmarshal([]byte(out), &p); code != 0 || err != nil {
			t.Fatalf("principals show: exit %d %s (%v)", code, errOut, err)
		}
		return p.Role
	}
	refused := grant()
	if c := e.showChange(t, e.oncall2, refused); c.Kind != "role_grant" || c.Status != "pending" ||
		!strings.Contains(string(c.Change), `"oncall"`) || !strings.Contains(string(c.Change), fin.PrincipalID) {
		t.Errorf("changes show of the grant: %+v", c)
	}
	if got := role(); got != "finance" {
		t.Fatalf("an unapproved grant applied: %s", got)
	}
	// changes refuse: a reason is required; refused, the change is over.
	if _, errOut, code := e.cli(t, e.oncall2, "changes", "refuse", refused); code != exitUsage || strings.Count(errOut, "\n") != 1 {
		t.Errorf("refuse without --reason: exit %d %q, want 2", code, errOut)
	}
	if _, errOut, code := e.cli(t, rotated.Token, "changes", "refuse", refused, "--reason", "not mine to decide"); code != errkind.ExitAuth {
		t.Errorf("finance refusing a change: exit %d %q, want 4", code, errOut)
	}
	if _, errOut, code := e.cli(t, e.oncall2, "changes", "refuse", refused, "--reason", "fin stays in finance"); code != 0 {
		t.Fatalf("changes refuse: exit %d %s", code, errOut)
	}
	if c := e.showChange(t, e.oncall, refused); c.Status != "refused" || c.DecisionReason != "fin stays in finance" {
		t.Errorf("the refused change: %+v", c)
	}
	if _, errOut, code := e.cli(t, e.oncall2, "changes", "approve", refused); code != exitConflict {
		t.Errorf("approving a refused change: exit %d %q, want 3", code, errOut)
	}
	if got := role(); got != "finance" {
		t.Fatalf("a refused grant applied: %s", got)
	}
	// Its requester may withdraw one.
	withdrawn := grant()
	if _, errOut, code := e.cli(t, e.oncall, "changes", "refuse", withdrawn, "--reason", "asked by mistake"); code != 0 {
		t.Errorf("the requester withdrawing: exit %d %s", code, errOut)
	}
	// Approved by the other on-call, it applies.
	approved := grant()
	if _, errOut, code := e.cli(t, e.oncall2, "changes", "approve", approved); code != 0 {
		t.Fatalf("approve the grant: exit %d %s", code, errOut)
	}
	if got := role(); got != "oncall" {
		t.Fatalf("after the approved grant: %s", got)
	}
	// The service refuses an on-call machine: its problem, on one line.
	orchID := e.issue(t, e.oncall, "token", "create", "--role", "orchestrator", "--tenant", "beta", "--name", "orch-beta").PrincipalID
	if _, errOut, code := e.cli(t, e.oncall, "principals", "grant-role", orchID, "--role", "oncall"); code != exitFailure ||
		!strings.HasPrefix(errOut, "quittance: validation_failed") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("grant on-call to a machine: exit %d %q", code, errOut)
	}

	// Bad arguments: exit 2, one line, before any request.
	for _, args := range [][]string{
		{"credentials", "rotate", "not-a-uuid"},
		{"credentials", "rotate", next.ID, "--expires-in", "-1h"},
		{"credentials", "rotate", next.ID, "--expires-in", "soon"},
		{"credentials", "rotate"},
		{"principals", "grant-role", fin.PrincipalID},
		{"principals", "grant-role", "fin", "--role", "finance"},
		{"changes", "show", "not-a-uuid"},
		{"changes", "refuse", "not-a-uuid", "--reason", "x"},
	} {
		_, errOut, code := e.cli(t, e.oncall, args...)
		if code != exitUsage || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want 2 and one line", args, code, errOut)
		}
	}
	if _, errOut, code := e.cli(t, e.oncall, "changes", "show", uuid.NewString()); code != exitFailure || !strings.Contains(errOut, "not_found") {
		t.Errorf("changes show of an unknown change: exit %d %q", code, errOut)
	}
}
