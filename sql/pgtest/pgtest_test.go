package pgtest

import (
	"context"
	"crypto/sha256"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
)

// checkSchema fails the test unless the database at dbURL has the schema.
func checkSchema(t *testing.T, ctx context.Context, conn *pgx.Conn) {
	t.Helper()
	var delegations bool
	var classes int
	err := conn.QueryRow(ctx, `SELECT to_regclass('public.delegations') IS NOT NULL,
		(SELECT count(*) FROM task_classes)`).Scan(&delegations, &classes)
	if err != nil {
		t.Fatalf("inspect schema: %v", err)
	}
	if !delegations || classes != 5 {
		t.Fatalf("delegations table exists: %v, task_classes rows: %d; want true, 5", delegations, classes)
	}
}

func connect(t *testing.T, ctx context.Context, dbURL string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("connect %s: %v", dbURL, err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func exists(t *testing.T, ctx context.Context, name string) bool {
	t.Helper()
	srv, err := sharedServer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ok, err := databaseExists(ctx, connect(t, ctx, srv.adminURL), name)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

func TestParallelTestsGetSeparateMigratedDatabases(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	names := map[string]bool{}
	for i := range 2 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			pool := Pool(t)
			conn, err := pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Release()
			checkSchema(t, ctx, conn.Conn())
			var name string
			if err := pool.QueryRow(ctx, "SELECT current_database()").Scan(&name); err != nil {
				t.Fatal(err)
			}
			// A write in one test must not be seen by the other.
			if _, err := pool.Exec(ctx, "DELETE FROM task_classes WHERE name = (SELECT min(name) FROM task_classes)"); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if names[name] {
				t.Errorf("database %s handed to two tests", name)
			}
			names[name] = true
		})
	}
}

func TestDatabaseDroppedAfterPassingTest(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var name string
	t.Run("passing", func(t *testing.T) {
		if err := connect(t, ctx, URL(t)).QueryRow(ctx, "SELECT current_database()").Scan(&name); err != nil {
			t.Fatal(err)
		}
		if !exists(t, ctx, name) {
			t.Fatalf("database %s missing during the test", name)
		}
	})
	if name == "" || exists(t, ctx, name) {
		t.Errorf("database %q still exists after its test passed", name)
	}
}

func TestLeakedConnectionDoesNotBlockDrop(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var name string
	var leaked *pgx.Conn
	t.Run("leaks", func(t *testing.T) {
		var err error
		if leaked, err = pgx.Connect(ctx, URL(t)); err != nil {
			t.Fatal(err)
		}
		if err := leaked.QueryRow(ctx, "SELECT current_database()").Scan(&name); err != nil {
			t.Fatal(err)
		}
	})
	defer leaked.Close(context.Background())
	if exists(t, ctx, name) {
		t.Errorf("database %s survived its passing test because a connection was open", name)
	}
}

func TestConcurrentTemplateBuildsAgree(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv, err := sharedServer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A hash no other test uses, so that the template is really built here.
	hash := sha256.Sum256([]byte(t.Name() + rand8()))
	want := templateName(hash)
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), srv.adminURL)
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(context.Background())
		_, _ = conn.Exec(context.Background(), "ALTER DATABASE "+want+" WITH IS_TEMPLATE false")
		_, _ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+want)
	})

	const builders = 8
	var wg sync.WaitGroup
	errs := make([]error, builders)
	for i := range builders {
		wg.Go(func() {
			name, err := buildTemplate(ctx, srv.adminURL, hash)
			if err == nil && name != want {
				err = fmt.Errorf("built %s, want %s", name, want)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("builder %d: %v", i, err)
		}
	}

	admin := connect(t, ctx, srv.adminURL)
	var tmpLeft bool
	var isTemplate, allowConn bool
	if err := admin.QueryRow(ctx, `SELECT datistemplate, datallowconn,
		EXISTS (SELECT FROM pg_database WHERE datname = $2)
		FROM pg_database WHERE datname = $1`, want, want+"_tmp").Scan(&isTemplate, &allowConn, &tmpLeft); err != nil {
		t.Fatalf("look up template %s: %v", want, err)
	}
	if !isTemplate || allowConn || tmpLeft {
		t.Errorf("template %s: datistemplate=%v datallowconn=%v temporary left=%v; want true, false, false",
			want, isTemplate, allowConn, tmpLeft)
	}
	// Clones from many sessions at once work: nobody holds the template.
	var cwg sync.WaitGroup
	for range 4 {
		cwg.Go(func() {
			url := newDatabase(ctx, t, srv, want)
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close(context.Background())
			var n int
			if err := conn.QueryRow(ctx, "SELECT count(*) FROM task_classes").Scan(&n); err != nil || n != 5 {
				t.Errorf("clone of %s: %d task classes, %v; want 5", want, n, err)
			}
		})
	}
	cwg.Wait()
}

func TestTemplateNameFitsPostgres(t *testing.T) {
	if got := templateName(migrationsHash()); len(got) > 63 {
		t.Fatalf("template name %q longer than PostgreSQL's 63-byte limit", got)
	}
}

// validName matches the database names the harness may create.
var validName = regexp.MustCompile(`^test_[a-z0-9_]+$`)

func TestDatabaseName(t *testing.T) {
	for _, name := range []string{"TestX", "TestLong/" + strings.Repeat("x", 200), "Test/sub case #1"} {
		got := databaseName(name)
		if len(got) > 63 || !validName.MatchString(got) {
			t.Errorf("databaseName(%q) = %q", name, got)
		}
		if databaseName(name) == got {
			t.Errorf("databaseName(%q) returned %q twice", name, got)
		}
	}
}

func TestClusterSurvivesCrash(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c, dbURL := Cluster(t)
	conn := connect(t, ctx, dbURL)
	checkSchema(t, ctx, conn)
	if _, err := conn.Exec(ctx, "DELETE FROM task_classes WHERE name = (SELECT min(name) FROM task_classes)"); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(ctx, "immediate"); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	var n int
	if err := connect(t, ctx, dbURL).QueryRow(ctx, "SELECT count(*) FROM task_classes").Scan(&n); err != nil || n != 4 {
		t.Fatalf("after crash: %d task classes, %v; want the committed delete (4)", n, err)
	}
}

func rand8() string { return databaseName("x") }
