package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
	e := startService(t)
	ctx := context.Background()
	// Some events, and a checkpoint over them, signed as the service role.
	if s := e.api(t, http.MethodPut, "/admin/v1/budgets/ops", e.oncall, map[string]any{"currency": "EUR", "funded_minor": 1000}, nil); s >= 300 {
		t.Fatalf("put budget: %d", s)
	}
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
	var owns int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname IN ('public', 'reporting') AND pg_has_role(current_user, c.relowner, 'USAGE')`).Scan(&owns); err != nil {
		t.Fatal(err)
	}
	if owns != 0 {
		t.Errorf("the service role owns (or inherits the owner of) %d relations, want none", owns)
	}
	// Appending and reading still work, and so do the reporting views.
	if s := e.api(t, http.MethodPut, "/admin/v1/budgets/ops", e.oncall, map[string]any{"currency": "EUR", "funded_minor": 2000}, nil); s >= 300 {
		t.Fatalf("put budget again: %d", s)
	}
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
