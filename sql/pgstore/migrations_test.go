package pgstore_test

import (
	"context"
	"crypto"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/report"
	"github.com/quittance/quittance/sql/migrations"
	"github.com/quittance/quittance/sql/pgstore"
	"github.com/quittance/quittance/sql/pgtest"
)

// migrateDownTo takes pool's database down to version, for a test to write
// data as an older schema held it before migrating up again.
func migrateDownTo(t *testing.T, pool *pgxpool.Pool, version int64) *goose.Provider {
	t.Helper()
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close() })
	migrate, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrate.DownTo(context.Background(), version); err != nil {
		t.Fatalf("down to %05d: %v", version, err)
	}
	return migrate
}

func migrateUp(t *testing.T, pool *pgxpool.Pool, migrate *goose.Provider) {
	t.Helper()
	if _, err := migrate.Up(context.Background()); err != nil {
		t.Fatalf("up: %v", err)
	}
	pool.Reset() // statements prepared against the older schema
}

// TestOrgKeysBackfill: migrating to 00016 gives every org registered
// before it a key history — each key of its JWK Set in force since the
// org was registered, under the RFC 7638 thumbprint ledger.JWKThumbprint
// computes — and none to an org without keys.
func TestOrgKeysBackfill(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := pgstore.New(pool)
	ctx := context.Background()
	migrate := migrateDownTo(t, pool, 15)

	ed := compensationtest.NewEd25519Signer(t, "ed-key")
	ec := compensationtest.NewES256Signer(t, "ec-key")
	registered := epoch.Add(-48 * time.Hour)
	for _, o := range []struct {
		id   string
		jwks []byte
	}{{"keyed", compensationtest.JWKS(ed.PublicJWK(), ec.PublicJWK())}, {"keyless", nil}} {
		if _, err := pool.Exec(ctx, `INSERT INTO remote_orgs (id, name, jwks, created_at, updated_at) VALUES ($1, $1, $2, $3, $3)`,
			o.id, o.jwks, registered); err != nil {
			t.Fatal(err)
		}
	}
	migrateUp(t, pool, migrate)

	history, err := store.OrgKeys(ctx, "keyed")
	if err != nil || len(history) != 2 {
		t.Fatalf("keyed history %+v, %v", history, err)
	}
	byKid := map[string]ledger.OrgKey{}
	for _, k := range history {
		byKid[k.KeyID] = k
	}
	for _, s := range []*compensationtest.Signer{ed, ec} {
		k, ok := byKid[s.KeyID()]
		want, err := ledger.JWKThumbprint(k.JWK)
		if !ok || err != nil || k.Thumbprint != want || k.Thumbprint != thumbprint(t, s) ||
			!k.ValidFrom.Equal(registered) || !k.ValidUntil.IsZero() {
			t.Errorf("key %s: %+v (recomputed %s, %v)", s.KeyID(), k, want, err)
		}
	}
	if history, err := store.OrgKeys(ctx, "keyless"); err != nil || len(history) != 0 {
		t.Errorf("keyless history %+v, %v", history, err)
	}
}

// TestRevokedReleasesBackfill: an identity revoked before 00018 (which
// surfaces releases only for revocations made after it) has each
// obligation released on one of its declarations surfaced by 00020 — in
// reporting.revoked_identity_releases_v1 and the summary's totals — and
// nothing else: not a release of another reason, not an org still trusted.
func TestRevokedReleasesBackfill(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := pgstore.New(pool)
	ctx := context.Background()
	ds := canceledDelegations(t, store, 3)
	if _, err := pool.Exec(ctx, `INSERT INTO remote_orgs (id, name, created_at, updated_at) VALUES ('trusted', 'Trusted', $1, $1)`, epoch); err != nil {
		t.Fatal(err)
	}
	migrate := migrateDownTo(t, pool, 17)

	// As the schema of 00017 held them: two releases on declarations and
	// one written off, then the org's identity revoked.
	revoked, released := epoch.Add(time.Hour), epoch.Add(time.Minute)
	for i, reason := range []string{"no_compensation_declared", "no_compensation_declared", "written_off"} {
		state := "released"
		if reason == "written_off" {
			state = "written_off"
		}
		if _, err := pool.Exec(ctx, `UPDATE delegations SET obligation_state = $2, obligation_reason = $3, updated_at = $4 WHERE id = $1`,
			ds[i].ID, state, reason, released); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE remote_orgs SET identity_revoked_at = $1, identity_revoked_reason = 'key leaked' WHERE id = 'initech'`, revoked); err != nil {
		t.Fatal(err)
	}
	migrateUp(t, pool, migrate)

	rows, err := pool.Query(ctx, `SELECT delegation_id::text, amount_minor, released_at, identity_revoked_at, identity_revoked_reason
		FROM reporting.revoked_identity_releases_v1 ORDER BY delegation_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var (
			id, reason string
			amount     int64
			rel, revAt time.Time
		)
		if err := rows.Scan(&id, &amount, &rel, &revAt, &reason); err != nil {
			t.Fatal(err)
		}
		if amount != 10 || !rel.Equal(released) || !revAt.Equal(revoked) || reason != "key leaked" {
			t.Errorf("release %s: amount %d, released %s, revoked %s (%s)", id, amount, rel, revAt, reason)
		}
		got = append(got, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{ds[0].ID.String(), ds[1].ID.String()}
	if ds[1].ID.String() < ds[0].ID.String() {
		want[0], want[1] = want[1], want[0]
	}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("surfaced %v, want the two declared releases %v", got, want)
	}
	totals, err := store.Reports().RevokedReleaseTotals(ctx, report.SummaryQuery{})
	if err != nil || len(totals) != 1 || totals[0].OrgID != "initech" || totals[0].Count != 2 || totals[0].AmountMinor != 20 {
		t.Fatalf("summary totals %+v, %v", totals, err)
	}
	// The sweep appends each one's released_on_revoked_identity event, once,
	// so they are anomalies too, on chains that still verify.
	comp := compensation.NewService(compensation.Config{Store: store.Compensation(), Clock: fixedClock{epoch}})
	for range 2 {
		if _, err := comp.Sweep(ctx, epoch.Add(2*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	reports := report.NewReports(report.ReportsConfig{Store: store.Reports(), Reader: store, Clock: fixedClock{epoch}})
	finance := ledger.Principal{Role: ledger.RoleFinance, Name: "finance"}
	anomalies, err := reports.Anomalies(ctx, finance, report.AnomalyQuery{Kinds: []report.AnomalyKind{report.AnomalyReleasedOnRevokedIdentity}})
	if err != nil || len(anomalies) != 2 {
		t.Fatalf("anomalies %+v, %v; want the two releases", anomalies, err)
	}
	for _, a := range anomalies {
		if a.OrgID != "initech" || (a.DelegationID != ds[0].ID && a.DelegationID != ds[1].ID) {
			t.Errorf("anomaly %+v", a)
		}
		events, err := store.StreamEvents(ctx, "delegation:"+a.DelegationID.String())
		if err != nil || len(events) < 3 || events[len(events)-1].Type != ledger.EventTypeReleasedOnRevokedIdentity {
			t.Fatalf("delegation %s: %d events, %v", a.DelegationID, len(events), err)
		}
		if err := ledger.VerifyChain(events); err != nil {
			t.Errorf("delegation %s chain: %v", a.DelegationID, err)
		}
	}

	// Migrating again (down past 00020 and up) surfaces nothing twice.
	if _, err := migrate.DownTo(ctx, 19); err != nil {
		t.Fatal(err)
	}
	migrateUp(t, pool, migrate)
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM revoked_identity_releases`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d rows after migrating again (%v), want 2", n, err)
	}
}

// thumbprint is s's RFC 7638 thumbprint as go-jose computes it.
func thumbprint(t *testing.T, s *compensationtest.Signer) string {
	t.Helper()
	k := s.PublicJWK()
	sum, err := k.Thumbprint(crypto.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(sum)
}

// TestCheckpointHeadsBackfill: migrating to 00034 keeps, for every stream,
// the head the latest checkpoint listing it signed: the latest full
// checkpoint (from before 00031, listing every stream) and the incremental
// ones after it, so a stream only a full checkpoint lists keeps its head
// there, and a full checkpoint older than the latest one is not read.
func TestCheckpointHeadsBackfill(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	migrate := migrateDownTo(t, pool, 33)
	for _, c := range []struct {
		id      int64
		through *int64
		payload string
	}{
		{1, nil, `{"streams":[{"stream":"budget:old","seq":1,"hash":"01"},{"stream":"budget:a","seq":1,"hash":"a1"}]}`},
		{2, nil, `{"streams":[{"stream":"budget:a","seq":2,"hash":"a2"},{"stream":"budget:b","seq":5,"hash":"b5"}]}`},
		{3, new(int64(7)), `{"streams":[{"stream":"budget:a","seq":1,"hash":"a1"}]}`},
		{4, new(int64(9)), `{"streams":[{"stream":"budget:a","seq":3,"hash":"a3"}]}`},
	} {
		if _, err := pool.Exec(ctx, `INSERT INTO checkpoints (id, created_at, created_by, kid, streams, heads_sha256, payload, jws, through_pos, through_order_xid, through_tx_pos)
			VALUES ($1, $2, 'test', 'k', 1, '\x00', $3, 'jws', $4, CASE WHEN $4::bigint IS NOT NULL THEN '1'::xid8 END, $4)`,
			c.id, epoch.Add(time.Duration(c.id)*time.Minute), c.payload, c.through); err != nil {
			t.Fatal(err)
		}
	}
	migrateUp(t, pool, migrate)
	rows, err := pool.Query(ctx, `SELECT format('%s %s %s %s', stream, checkpoint_id, stream_seq, hash) FROM checkpoint_heads ORDER BY stream`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	// budget:old is listed by the first full checkpoint only, which the
	// second, listing every stream then, replaced.
	want := []string{"budget:a 4 3 a3", "budget:b 2 5 b5"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("checkpoint_heads after the migration:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestBudgetTenantsBackfill: migrating to 00037 names on each budget the
// tenants that held on it (every delegation's tenant, whatever its state)
// and nothing on a budget nobody held on, which then holds for nobody;
// reporting.budgets_v1 gains the list as its last column.
func TestBudgetTenantsBackfill(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	initech := ledger.Principal{Role: ledger.RoleOrchestrator, Name: "orch-initech", Tenant: "initech"}
	if _, _, err := b.svc.PutOrg(ctx, oncall, "globex", ledger.OrgInput{Name: "Globex"}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"shared", "acme-only", "idle"} {
		if _, _, err := b.svc.PutBudget(ctx, oncall, id, ledger.BudgetInput{Currency: "EUR", FundedMinor: 1_000}); err != nil {
			t.Fatal(err)
		}
		holdsFor(t, b.store, id, "acme", "initech", "umbrella")
	}
	hold := func(p ledger.Principal, budget, op string) {
		t.Helper()
		_, _, err := b.svc.CreateDelegation(ctx, p, ledger.CreateInput{
			BusinessOperationID: op, OrgID: "globex", TaskClass: "procurement", BudgetID: budget,
			Hold: ledger.Money{AmountMinor: 10, Currency: "EUR"}, Remote: ledger.RemoteTask{TaskID: "task-" + op},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	hold(initech, "shared", "s-1")
	hold(orch, "shared", "s-2")
	hold(initech, "shared", "s-3")
	hold(orch, "acme-only", "a-1")

	migrate := migrateDownTo(t, b.pool, 36)
	var cols int
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM information_schema.columns WHERE table_schema = 'reporting' AND table_name = 'budgets_v1'`).Scan(&cols); err != nil {
		t.Fatal(err)
	}
	if cols != 10 {
		t.Fatalf("reporting.budgets_v1 has %d columns before 00037, want 10", cols)
	}
	migrateUp(t, b.pool, migrate)

	want := map[string][]string{"shared": {"acme", "initech"}, "acme-only": {"acme"}, "idle": {}}
	for id, tenants := range want {
		got, err := b.svc.GetBudget(ctx, oncall, id)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(got.Tenants, ",") != strings.Join(tenants, ",") {
			t.Errorf("budget %s: tenants %q after the migration, want %q", id, got.Tenants, tenants)
		}
		var viewed []string
		if err := b.pool.QueryRow(ctx, `SELECT tenants FROM reporting.budgets_v1 WHERE budget_id = $1`, id).Scan(&viewed); err != nil {
			t.Fatal(err)
		}
		if strings.Join(viewed, ",") != strings.Join(tenants, ",") {
			t.Errorf("reporting.budgets_v1 %s: tenants %q, want %q", id, viewed, tenants)
		}
	}
	var last string
	if err := b.pool.QueryRow(ctx, `SELECT column_name FROM information_schema.columns WHERE table_schema = 'reporting' AND table_name = 'budgets_v1' ORDER BY ordinal_position DESC LIMIT 1`).Scan(&last); err != nil {
		t.Fatal(err)
	}
	if last != "tenants" {
		t.Errorf("reporting.budgets_v1's last column is %q, want tenants", last)
	}
	// The budget nobody held on holds for nobody.
	_, _, err := b.svc.CreateDelegation(ctx, orch, ledger.CreateInput{
		BusinessOperationID: "i-1", OrgID: "globex", TaskClass: "procurement", BudgetID: "idle",
		Hold: ledger.Money{AmountMinor: 10, Currency: "EUR"}, Remote: ledger.RemoteTask{TaskID: "task-i-1"},
	})
	var ref *ledger.ReferenceError
	if !errors.As(err, &ref) || ref.Field != "budget_id" {
		t.Fatalf("a hold on the budget nobody held on: %v, want budget_id does not exist", err)
	}
}
