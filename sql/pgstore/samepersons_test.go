package pgstore_test

import (
	"context"
	"slices"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/quittance/quittance/sql/pgtest"
)

// TestSamePersonFunctionsIgnoreSearchPath: a session of the service's role
// that shadows oidc_identities with an empty temporary table (pg_temp is
// searched first unless named) still sees Alice's identity linked to her
// token principal: principal_aliases and principal_person read the real
// table, and the four-eyes trigger refuses a change Alice asked for with
// her token and applied as her identity's principal.
func TestSamePersonFunctionsIgnoreSearchPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ownerURL := pgtest.URL(t)
	owner, err := pgx.Connect(ctx, ownerURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { owner.Close(ctx) })
	alice, own, change := uuid.New(), uuid.New(), uuid.New()
	for _, p := range []struct {
		id   uuid.UUID
		name string
	}{{alice, "alice"}, {own, "oidc:alice@example.com"}} {
		if _, err := owner.Exec(ctx, `INSERT INTO principals (id, kind, display_name, name_key, role, created_at) VALUES ($1, 'person', $2, $2, 'oncall', now())`, p.id, p.name); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := owner.Exec(ctx, `INSERT INTO oidc_identities (issuer, subject, principal_id, recorded_principal_id, linked_by, linked_at)
		VALUES ('https://idp.example.com', 'u-alice', $1, $2, $1, now())`, alice, own); err != nil {
		t.Fatal(err)
	}
	if _, err := owner.Exec(ctx, `INSERT INTO pending_changes (id, kind, target, payload, summary, status, requested_by, requested_at, expires_at)
		VALUES ($1, 'role_grant', 'principal:x', '{}', 'grant', 'pending', $2, now(), now() + interval '1 day')`, change, alice); err != nil {
		t.Fatal(err)
	}

	svc, err := pgx.Connect(ctx, pgtest.ServiceURL(t, ownerURL))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close(ctx) })
	if _, err := svc.Exec(ctx, `CREATE TEMP TABLE oidc_identities (issuer text, subject text, principal_id uuid, recorded_principal_id uuid, linked_by uuid, linked_at timestamptz)`); err != nil {
		t.Fatal(err)
	}
	var aliases []uuid.UUID
	if err := svc.QueryRow(ctx, `SELECT principal_aliases($1)`, alice).Scan(&aliases); err != nil || !slices.Contains(aliases, own) {
		t.Errorf("aliases of alice under a shadowing temporary table: %v, %v; want %s", aliases, err, own)
	}
	var person uuid.UUID
	if err := svc.QueryRow(ctx, `SELECT principal_person($1)`, own).Scan(&person); err != nil || person != alice {
		t.Errorf("person of alice's identity principal: %s, %v; want %s", person, err, alice)
	}
	tag, err := svc.Exec(ctx, `UPDATE pending_changes SET status = 'applied', decided_by = $2, decided_at = now() WHERE id = $1`, change, own)
	if err == nil {
		t.Errorf("alice's change applied by her identity's principal under a shadowing table: %s", tag)
	}
}
