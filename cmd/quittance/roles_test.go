package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/sql/pgcluster"
	"github.com/quittance/quittance/sql/pgtest"
)

// eventsDigest summarizes every stored event and checkpoint, so a test can
// tell whether a statement changed any.
func eventsDigest(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	var digest string
	err := conn.QueryRow(context.Background(), `SELECT
		(SELECT count(*) || ':' || coalesce(md5(string_agg(seq || actor || encode(hash, 'hex'), ',' ORDER BY seq)), '') FROM events)
		|| '/' || (SELECT count(*) FROM checkpoints)`).Scan(&digest)
	if err != nil {
		t.Fatal(err)
	}
	return digest
}

// TestServiceRoleCannotRewriteEvents: the service runs as its own role
// (startService, as production does), which may append to and read the
// audit log but not update, delete or truncate it, nor disable, drop or
// replace its triggers; the privilege system refuses, not the trigger.
// Everything the service does still works as that role: the CLI end-to-end
// test runs on the same setup.
func TestServiceRoleCannotRewriteEvents(t *testing.T) {
	t.Parallel()
	e := startCheckpointingService(t)
	ctx := context.Background()
	// Some events, and a checkpoint over them, signed as the service role.
	e.putBudget(t, "ops", 1000)
	// An org with a key, so its key history has a row.
	var registered json.RawMessage
	if s := e.api(t, http.MethodPut, "/admin/v1/orgs/supplier", e.oncall, map[string]any{
		"name": "Supplier", "jwks": json.RawMessage(compensationtest.NewEd25519Signer(t, "sup-key").JWKS()),
	}, &registered); s != http.StatusAccepted {
		t.Fatalf("put org: %d", s)
	}
	e.approvePending(t, registered)
	if s := e.api(t, http.MethodPost, "/admin/v1/checkpoints", e.oncall, nil, nil); s != http.StatusCreated {
		t.Fatalf("create checkpoint: %d", s)
	}

	conn, err := pgx.Connect(ctx, e.serviceURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var user string
	var super bool
	if err := conn.QueryRow(ctx, "SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user").Scan(&user, &super); err != nil {
		t.Fatal(err)
	}
	if user != pgcluster.ServiceLogin || super {
		t.Fatalf("the service connects as %s (superuser %v), want %s, not a superuser", user, super, pgcluster.ServiceLogin)
	}
	before := eventsDigest(t, conn)
	for _, stmt := range []string{
		`ALTER TABLE events DISABLE TRIGGER ALL`,
		`ALTER TABLE events DISABLE TRIGGER events_append_only`,
		`ALTER TABLE events DISABLE TRIGGER USER`,
		`DROP TRIGGER events_append_only ON events`,
		`CREATE OR REPLACE FUNCTION events_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END; $$`,
		`UPDATE events SET actor = 'mallory'`,
		`DELETE FROM events WHERE stream = 'budget:ops'`,
		`TRUNCATE events`,
		`TRUNCATE events CASCADE`,
		`ALTER TABLE events OWNER TO ` + pgcluster.ServiceLogin,
		`CREATE TRIGGER mallory BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION events_refuse_change()`,
		`SET session_replication_role = replica`,
		`ALTER TABLE checkpoints DISABLE TRIGGER ALL`,
		`UPDATE checkpoints SET created_by = 'mallory'`,
		`DELETE FROM checkpoints`,
		`TRUNCATE checkpoints`,
		`UPDATE goose_db_version SET is_applied = false`,
		// The key history: appended and ended, never rewritten or removed.
		`UPDATE org_keys SET valid_from = valid_from - interval '1 day'`,
		`UPDATE org_keys SET jwk = '{}'`,
		`DELETE FROM org_keys`,
		`TRUNCATE org_keys`,
		`ALTER TABLE org_keys DISABLE TRIGGER ALL`,
		`SELECT quittance_grant_service_role()`,
		`CREATE TABLE public.mallory (id int)`,
	} {
		_, err := conn.Exec(ctx, stmt)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
			t.Errorf("%s as the service role: %v, want SQLSTATE 42501", stmt, err)
			continue
		}
		// The privilege check refuses it, not the append-only trigger.
		if !strings.Contains(pgErr.Message, "permission denied") && !strings.Contains(pgErr.Message, "must be owner") {
			t.Errorf("%s refused by %q, want a privilege check", stmt, pgErr.Message)
		}
		if got := eventsDigest(t, conn); got != before {
			t.Fatalf("%s changed the audit log", stmt)
		}
	}
	// GRANT of a privilege it lacks is only a warning: check none came.
	for _, stmt := range []string{`GRANT DELETE ON events TO ` + pgcluster.ServiceLogin, `GRANT UPDATE, TRUNCATE ON events TO PUBLIC`} {
		_, _ = conn.Exec(ctx, stmt)
	}
	var writable bool
	if err := conn.QueryRow(ctx, `SELECT has_table_privilege('events', 'UPDATE') OR has_table_privilege('events', 'DELETE')
		OR has_table_privilege('events', 'TRUNCATE') OR has_table_privilege('checkpoints', 'UPDATE')
		OR has_table_privilege('checkpoints', 'DELETE') OR has_table_privilege('checkpoints', 'TRUNCATE')`).Scan(&writable); err != nil {
		t.Fatal(err)
	}
	if writable {
		t.Error("the service role may update, delete or truncate the audit log")
	}

	// The one change the service makes to a key row, ending it, is allowed
	// once and not before the key came into force; the trigger refuses the
	// rest. An end no event recorded is still a lie verify-chain finds.
	keys := func() string {
		var s string
		if err := conn.QueryRow(ctx, `SELECT string_agg(format('%s %s %s %s', kid, thumbprint, valid_from, valid_until), ';' ORDER BY kid) FROM org_keys`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	original := keys()
	if _, err := conn.Exec(ctx, `UPDATE org_keys SET valid_until = valid_from - interval '1 second'`); err == nil || !strings.Contains(err.Error(), "org_keys is append-only") {
		t.Errorf("ending a key before it came into force, as the service role: %v, want the trigger's refusal", err)
	}
	if got := keys(); got != original {
		t.Fatalf("a refused change moved the key history: %s -> %s", original, got)
	}
	if _, err := conn.Exec(ctx, `UPDATE org_keys SET valid_until = valid_from + interval '1 hour'`); err != nil {
		t.Fatalf("ending a key once, as the service role: %v", err)
	}
	for _, stmt := range []string{
		`UPDATE org_keys SET valid_until = valid_until + interval '1 day'`,
		`UPDATE org_keys SET valid_until = NULL`,
	} {
		if _, err := conn.Exec(ctx, stmt); err == nil || !strings.Contains(err.Error(), "org_keys is append-only") {
			t.Errorf("%s as the service role, after the key ended: %v, want the trigger's refusal", stmt, err)
		}
	}
	// The owner re-running the grants (as a DBA does after creating the
	// role) gives none of it back.
	if err := e.exec(ctx, `SELECT quittance_grant_service_role()`); err != nil {
		t.Fatal(err)
	}
	var rewritable bool
	if err := conn.QueryRow(ctx, `SELECT has_table_privilege('org_keys', 'UPDATE') OR has_table_privilege('org_keys', 'DELETE')
		OR has_table_privilege('org_keys', 'TRUNCATE') OR has_column_privilege('org_keys', 'valid_from', 'UPDATE')
		OR has_column_privilege('org_keys', 'jwk', 'UPDATE')`).Scan(&rewritable); err != nil {
		t.Fatal(err)
	}
	if rewritable {
		t.Error("after quittance_grant_service_role(), the service role may rewrite or remove key history rows")
	}
	finance := e.newToken(t, "--role", "finance", "--name", "fin")
	out, errOut, code := e.cli(t, finance, "verify-chain")
	if code != exitFailure || !strings.Contains(out, "BROKEN\torg:supplier\tkey history: key sup-key") || !strings.Contains(out, "no event of the org's stream removed it") {
		t.Errorf("verify-chain after the service role ended a key no event removed: exit %d, want %d\n%s\n%s", code, exitFailure, out, errOut)
	}
	// The owner, whom nothing stops, adds a key backdated to before the
	// org's stream recorded any: verify-chain names it too.
	other := compensationtest.NewEd25519Signer(t, "backdated")
	otherJWK, err := json.Marshal(other.PublicJWK())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.exec(ctx, `INSERT INTO org_keys (org_id, kid, thumbprint, jwk, valid_from) VALUES ('supplier', 'backdated', $1, $2, now() - interval '30 days')`,
		thumbprintOf(t, other), string(otherJWK)); err != nil {
		t.Fatal(err)
	}
	out, _, code = e.cli(t, finance, "verify-chain")
	if code != exitFailure || !strings.Contains(out, "key history: key backdated (thumbprint "+thumbprintOf(t, other)+") is in force from") {
		t.Errorf("verify-chain after the owner added a backdated key: exit %d\n%s", code, out)
	}
	var owns int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname IN ('public', 'reporting') AND pg_has_role(current_user, c.relowner, 'USAGE')`).Scan(&owns); err != nil {
		t.Fatal(err)
	}
	if owns != 0 {
		t.Errorf("the service role owns (or inherits the owner of) %d relations, want none", owns)
	}
	// Appending and reading still work, and so do the reporting views.
	e.putBudget(t, "ops", 2000)
	if got := eventsDigest(t, conn); got == before {
		t.Fatal("funding a budget as the service role appended nothing")
	}
	if _, err := conn.Exec(ctx, "SELECT * FROM reporting.obligation_summary_v1"); err != nil {
		t.Errorf("the service role reading the reporting views: %v", err)
	}
}

// TestMigrationsRunAsTheOwner: `quittance migrate` with
// QUITTANCE_MIGRATION_DATABASE_URL migrates an empty database as its owner,
// after which serve runs on the service role's DATABASE_URL alone; serve
// with only a service role's URL on an unmigrated database says where the
// owner's URL goes.
func TestMigrationsRunAsTheOwner(t *testing.T) {
	t.Parallel()
	ownerURL := pgtest.EmptyURL(t)
	serviceURL := pgtest.ServiceURL(t, ownerURL)
	env := map[string]string{"DATABASE_URL": serviceURL, "QUITTANCE_ADDR": "127.0.0.1:0", "QUITTANCE_LOG_LEVEL": "error",
		"QUITTANCE_SIGNING_KEY_FILE": signingKeyFile(t)}
	getenv := func(k string) string { return env[k] }

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := run(ctx, []string{"serve"}, getenv, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "QUITTANCE_MIGRATION_DATABASE_URL") {
		t.Fatalf("serve as the service role on an unmigrated database: %v, want a hint at QUITTANCE_MIGRATION_DATABASE_URL", err)
	}
	env["QUITTANCE_MIGRATION_DATABASE_URL"] = ownerURL
	if err := run(ctx, []string{"migrate"}, getenv, io.Discard, io.Discard); err != nil {
		t.Fatalf("migrate as the owner: %v", err)
	}
	delete(env, "QUITTANCE_MIGRATION_DATABASE_URL")
	serveCtx, stop := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(serveCtx, []string{"serve"}, getenv, pw, io.Discard)
		pw.Close()
	}()
	var out bytes.Buffer
	buf := make([]byte, 4096)
	for !strings.Contains(out.String(), "Quittance listening on http://") {
		n, err := pr.Read(buf)
		if err != nil {
			t.Fatalf("serve as the service role on a migrated database: %v\n%s", <-done, out.String())
		}
		out.Write(buf[:n])
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	addr := strings.Fields(strings.SplitN(out.String(), "Quittance listening on ", 2)[1])[0]
	res := newTestClient(addr).do(ctx, http.MethodGet, "/readyz", "", nil)
	stop()
	if err := <-done; err != nil {
		t.Errorf("serve: %v", err)
	}
	if res.status != http.StatusOK {
		t.Errorf("/readyz as the service role: %v", res)
	}
}
