package pgtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/quittance/quittance/sql/migrations"
	"github.com/quittance/quittance/sql/pgcluster"
	"github.com/quittance/quittance/sql/pgtest/internal/scratch"
	"github.com/quittance/quittance/sql/pgtypes"
)

// EnvDatabaseURL names the environment variable that points the tests at a
// running server: the URL of a maintenance database on it.
const EnvDatabaseURL = scratch.EnvDatabaseURL

// EnvClusterDir names the environment variable pgtestenv sets to the data
// directory of the throwaway cluster it started.
const EnvClusterDir = scratch.EnvClusterDir

// PoolMaxConns is the connection limit of a pool returned by Pool. It is
// small because many test binaries and parallel tests share one server; a
// test that needs more can build its own pool from URL.
const PoolMaxConns = 5

// setupTimeout bounds starting a server, building a template and creating a
// database.
const setupTimeout = 3 * time.Minute

// server is where test databases are created.
type server struct {
	adminURL string // URL of the maintenance database
	dataDir  string // data directory of a throwaway cluster, or empty
	private  bool   // whether the cluster belongs to one test (Cluster)
}

var (
	sharedMu  sync.Mutex
	shared    *server
	sharedErr error

	templatesMu sync.Mutex
	templates   = map[string]string{} // adminURL -> template name, once built
)

// URL creates a database for the test, with the schema applied, and
// returns its URL. When the test passes, the database is dropped; when it
// fails, it is kept and the test log says how to connect to it.
func URL(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	srv, err := sharedServer(ctx)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	tpl, err := cachedTemplate(ctx, srv.adminURL)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return newDatabase(ctx, t, srv, tpl)
}

// EmptyURL creates an empty database for the test, without the schema
// (from template0), and returns its URL: for tests of what happens on a
// database nothing has migrated yet, such as several replicas starting on
// it at once. It is dropped or kept as URL's is.
func EmptyURL(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	srv, err := sharedServer(ctx)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return newDatabase(ctx, t, srv, "template0")
}

// ServiceURL returns the URL of the test database at dbURL (from URL,
// EmptyURL or Cluster) for the service's own login role,
// pgcluster.ServiceLogin: a member of the role migration 00015 grants the
// service's privileges to, owning nothing, so it may append to the audit
// log but not rewrite it. dbURL itself stays the owner's. The login role is
// created on the server when missing; it has no password, so the server
// must trust local connections, as every cluster pgcluster starts does.
func ServiceURL(t testing.TB, dbURL string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	u, err := url.Parse(dbURL)
	if err != nil || u.Scheme == "" {
		t.Fatalf("pgtest: ServiceURL needs a URL, not %q", dbURL)
	}
	if err := pgcluster.EnsureServiceLogin(ctx, withDatabase(dbURL, "postgres")); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	u.User = url.User(pgcluster.ServiceLogin)
	return u.String()
}

// Pool creates a database for the test as URL does and returns a pool of at
// most PoolMaxConns connections to it, closed before the database is
// dropped.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return poolFor(t, URL(t))
}

// poolFor opens a pool of at most PoolMaxConns connections to dbURL,
// closed when the test ends.
func poolFor(t testing.TB, dbURL string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatalf("pgtest: parse %s: %v", dbURL, err)
	}
	cfg.MaxConns = PoolMaxConns
	cfg.AfterConnect = pgtypes.AfterConnect
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgtest: open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	if err := pool.Ping(ctx); err != nil {
		t.Fatalf("pgtest: ping %s: %v", dbURL, err)
	}
	return pool
}

// PrivatePool is Pool on a database of a private cluster (see Cluster):
// for tests that time what the feed serves, whose cut waits for every
// transaction open on the server, other tests' included.
func PrivatePool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	_, dbURL := Cluster(t)
	return poolFor(t, dbURL)
}

// Cluster starts a private throwaway cluster for the test, creates a
// database with the schema applied on it, and returns the cluster and the
// database's URL. The test may stop, restart or crash the server
// (c.Restart(ctx, "immediate")) without disturbing other tests; the port,
// and so the URL, stay the same across restarts. The cluster is stopped and
// removed when the test ends; if the test failed, the end of the server's
// log is written to the test log first. Unlike the shared server, the
// private cluster keeps fsync and synchronous_commit on, so a transaction
// whose commit was acknowledged survives a crash, as in production. Each
// call costs an initdb, so use URL or Pool unless the test needs to control
// the server.
func Cluster(t testing.TB) (c *pgcluster.Cluster, dbURL string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	dir, err := scratch.NewDir()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	// Not Fast: with synchronous_commit off, a commit acknowledged just
	// before a crash may be lost, and that is what fault tests check.
	c, err = pgcluster.Start(ctx, pgcluster.Config{DataDir: dir})
	if err != nil {
		_ = os.RemoveAll(dir)
		t.Fatalf("pgtest: start private cluster: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			if b, err := os.ReadFile(c.LogFile()); err == nil {
				t.Logf("pgtest: server log of the private cluster:\n%s", lastLines(string(b), 40))
			}
		}
		if err := c.Stop(context.Background()); err != nil {
			t.Errorf("pgtest: stop private cluster: %v", err)
		}
		_ = os.RemoveAll(dir)
	})
	srv := &server{adminURL: c.URL("postgres"), private: true}
	tpl, err := buildTemplate(ctx, srv.adminURL, migrationsHash())
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return c, newDatabase(ctx, t, srv, tpl)
}

// sharedServer returns the server named by EnvDatabaseURL, or starts this
// process's throwaway cluster on first use.
func sharedServer(ctx context.Context) (*server, error) {
	if u := os.Getenv(EnvDatabaseURL); u != "" {
		return &server{adminURL: u, dataDir: os.Getenv(EnvClusterDir)}, nil
	}
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared != nil || sharedErr != nil {
		return shared, sharedErr
	}
	dir, err := scratch.NewDir()
	if err != nil {
		sharedErr = err
		return nil, err
	}
	// The cluster is never stopped explicitly: it dies with this process.
	c, err := pgcluster.Start(ctx, pgcluster.Config{DataDir: dir, Fast: true})
	if err != nil {
		_ = os.RemoveAll(dir)
		sharedErr = fmt.Errorf("start a throwaway PostgreSQL cluster (or set %s to a running server): %w",
			EnvDatabaseURL, err)
		return nil, sharedErr
	}
	shared = &server{adminURL: c.URL("postgres"), dataDir: dir}
	return shared, nil
}

// cachedTemplate builds the template on the server once per process.
func cachedTemplate(ctx context.Context, adminURL string) (string, error) {
	templatesMu.Lock()
	defer templatesMu.Unlock()
	if name, ok := templates[adminURL]; ok {
		return name, nil
	}
	name, err := buildTemplate(ctx, adminURL, migrationsHash())
	if err != nil {
		return "", err
	}
	templates[adminURL] = name
	return name, nil
}

// migrationsHash returns the SHA-256 of the embedded migration files' names
// and contents.
func migrationsHash() [sha256.Size]byte {
	h := sha256.New()
	err := fs.WalkDir(migrations.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.FS, path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		panic(fmt.Sprintf("pgtest: read embedded migrations: %v", err)) // embedded files always read
	}
	return [sha256.Size]byte(h.Sum(nil))
}

// templateName returns the name of the template database for a hash.
func templateName(hash [sha256.Size]byte) string {
	return "tpl_" + hex.EncodeToString(hash[:16])
}

// buildTemplate makes sure the template database for hash exists on the
// server and returns its name. It is safe to call from any number of
// goroutines and processes at once.
func buildTemplate(ctx context.Context, adminURL string, hash [sha256.Size]byte) (string, error) {
	name := templateName(hash)
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", fmt.Errorf("connect to maintenance database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx)) // also releases the lock

	if ok, err := databaseExists(ctx, conn, name); err != nil || ok {
		return name, err
	}
	// Advisory locks belong to a database: all callers use the maintenance
	// database, so they all contend for the same lock.
	lockKey := int64(binary.BigEndian.Uint64(hash[:8]))
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", lockKey); err != nil {
		return "", fmt.Errorf("lock template %s: %w", name, err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", lockKey) //nolint:errcheck // closing releases it too
	if ok, err := databaseExists(ctx, conn, name); err != nil || ok {
		return name, err
	}

	// A build that died half-way left its temporary database; nobody else
	// can be building it while we hold the lock.
	tmp := name + "_tmp"
	tmpID := pgx.Identifier{tmp}.Sanitize()
	for _, q := range []string{
		"DROP DATABASE IF EXISTS " + tmpID + " WITH (FORCE)",
		"CREATE DATABASE " + tmpID,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return "", fmt.Errorf("build template %s: %s: %w", name, q, err)
		}
	}
	if err := migrate(ctx, withDatabase(adminURL, tmp)); err != nil {
		return "", fmt.Errorf("build template %s: %w", name, err)
	}
	// Refusing connections guarantees that cloning never finds a session
	// on the template; the rename publishes it only once it is complete.
	for _, q := range []string{
		"ALTER DATABASE " + tmpID + " WITH IS_TEMPLATE true ALLOW_CONNECTIONS false",
		"ALTER DATABASE " + tmpID + " RENAME TO " + pgx.Identifier{name}.Sanitize(),
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return "", fmt.Errorf("build template %s: %s: %w", name, q, err)
		}
	}
	return name, nil
}

// migrate applies the migrations to the database at dbURL and closes every
// connection to it.
func migrate(ctx context.Context, dbURL string) error {
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		return fmt.Errorf("parse %s: %w", dbURL, err)
	}
	db := stdlib.OpenDB(*cfg)
	err = migrations.Up(ctx, db, slog.New(slog.DiscardHandler))
	return errors.Join(err, db.Close())
}

// databaseExists reports whether the server has a database of this name.
func databaseExists(ctx context.Context, conn *pgx.Conn, name string) (bool, error) {
	var ok bool
	err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", name).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("look up database %s: %w", name, err)
	}
	return ok, nil
}

// newDatabase clones the template into a database named after the test and
// arranges for it to be dropped if the test passes.
func newDatabase(ctx context.Context, t testing.TB, srv *server, tpl string) string {
	t.Helper()
	name := databaseName(t.Name())
	conn, err := pgx.Connect(ctx, srv.adminURL)
	if err != nil {
		t.Fatalf("pgtest: connect to maintenance database: %v", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	q := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize() + " TEMPLATE " + pgx.Identifier{tpl}.Sanitize()
	if _, err := conn.Exec(ctx, q); err != nil {
		t.Fatalf("pgtest: %s: %v", q, err)
	}
	dbURL := withDatabase(srv.adminURL, name)
	t.Cleanup(func() {
		if t.Failed() {
			keep(t, srv, name, dbURL)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := dropDatabase(ctx, srv.adminURL, name); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return dbURL
}

// keep leaves a failed test's database in place and logs how to reach it.
func keep(t testing.TB, srv *server, name, dbURL string) {
	t.Helper()
	if srv.private {
		return // the private cluster goes away with the test; its log is shown instead
	}
	t.Logf("pgtest: kept database %s; connect with: psql '%s'", name, dbURL)
	if srv.dataDir == "" {
		return
	}
	if err := scratch.Keep(srv.dataDir); err != nil {
		t.Logf("pgtest: cannot mark %s to be kept: %v", srv.dataDir, err)
	}
	t.Logf("pgtest: the throwaway server stops when the tests end; start it again with: "+
		"go run ./sql/pgtest/pgtestenv -dir %s psql '%s'   (remove it with: rm -rf %s)",
		srv.dataDir, dbURL, srv.dataDir)
}

// dropDatabase drops a test database, ending any session a test left open.
func dropDatabase(ctx context.Context, adminURL, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect to maintenance database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// unsafeChars matches what may not appear in a database name we make.
var unsafeChars = regexp.MustCompile(`[^a-z0-9]+`)

// databaseName returns a unique database name that shows which test made
// it.
func databaseName(testName string) string {
	base := strings.Trim(unsafeChars.ReplaceAllString(strings.ToLower(testName), "_"), "_")
	if len(base) > 40 {
		base = base[:40]
	}
	return "test_" + base + "_" + strings.ToLower(rand.Text()[:8])
}

// withDatabase returns adminURL with its database replaced by name.
func withDatabase(adminURL, name string) string {
	u, err := url.Parse(adminURL)
	if err != nil || u.Scheme == "" {
		// Keyword/value strings are rare in this variable; append dbname.
		return adminURL + " dbname=" + name
	}
	u.Path = "/" + name
	u.RawPath = ""
	return u.String()
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
