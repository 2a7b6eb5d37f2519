package pgcluster_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/quittance/quittance/sql/pgcluster"
)

// dataDir returns a fresh directory path for a cluster, inside a temporary
// directory the postgres OS user can enter when the tests run as root.
func dataDir(t *testing.T) string {
	t.Helper()
	base := t.TempDir()
	for dir := base; dir != os.TempDir() && dir != filepath.Dir(dir); dir = filepath.Dir(dir) {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(base, "data")
}

func start(t *testing.T, cfg pgcluster.Config) *pgcluster.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgcluster.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(context.Background()); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return c
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func TestFindBinaries(t *testing.T) {
	dir, err := pgcluster.FindBinaries()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"initdb", "postgres"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("FindBinaries returned %s without %s: %v", dir, name, err)
		}
	}
}

func TestDataSurvivesStopAndStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := dataDir(t)

	c := start(t, pgcluster.Config{DataDir: dir})
	conn := connect(t, c.URL(pgcluster.Database))
	if _, err := conn.Exec(ctx, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('hello')"); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(ctx)
	port := c.Port()
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second); err == nil {
		t.Fatalf("port %d still accepts connections after Stop", port)
	}

	c2 := start(t, pgcluster.Config{DataDir: dir})
	if c2.Port() != port {
		t.Errorf("second start picked port %d, want the remembered %d", c2.Port(), port)
	}
	var v string
	if err := connect(t, c2.URL(pgcluster.Database)).QueryRow(ctx, "SELECT v FROM kept").Scan(&v); err != nil || v != "hello" {
		t.Fatalf("after restart: got %q, %v; want the row written before Stop", v, err)
	}
}

func TestListensOnLoopbackOnly(t *testing.T) {
	t.Parallel()
	c := start(t, pgcluster.Config{DataDir: dataDir(t), Fast: true})
	conn := connect(t, c.URL("postgres"))
	for setting, want := range map[string]string{
		"listen_addresses": "127.0.0.1",
		"max_connections":  "200",
		"fsync":            "off",
		"server_encoding":  "UTF8",
	} {
		var got string
		if err := conn.QueryRow(context.Background(), "SELECT current_setting($1)", setting).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s = %q, want %q", setting, got, want)
		}
	}
}

func TestFsyncStaysOnByDefault(t *testing.T) {
	t.Parallel()
	c := start(t, pgcluster.Config{DataDir: dataDir(t)})
	var fsync string
	if err := connect(t, c.URL("postgres")).QueryRow(context.Background(), "SHOW fsync").Scan(&fsync); err != nil {
		t.Fatal(err)
	}
	if fsync != "on" {
		t.Errorf("fsync = %q without Fast, want on", fsync)
	}
}

func TestRelativeDataDirAndFixedPort(t *testing.T) {
	dir := dataDir(t)
	t.Chdir(filepath.Dir(dir))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()

	c := start(t, pgcluster.Config{DataDir: "data", Port: port, Fast: true})
	if c.Port() != port {
		t.Errorf("Port() = %d, want %d", c.Port(), port)
	}
	if c.DataDir() != dir {
		t.Errorf("DataDir() = %q, want %q", c.DataDir(), dir)
	}
	connect(t, c.URL(pgcluster.Database))
}

func TestStalePIDFileFromCrash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := dataDir(t)
	c := start(t, pgcluster.Config{DataDir: dir, Fast: true})
	pidPath := filepath.Join(dir, "postmaster.pid")
	pidFile, err := os.ReadFile(pidPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// A crash leaves the file of a server that no longer exists behind.
	if err := os.WriteFile(pidPath, pidFile, 0o600); err != nil {
		t.Fatal(err)
	}
	c2 := start(t, pgcluster.Config{DataDir: dir, Fast: true})
	connect(t, c2.URL(pgcluster.Database))
}

func TestSecondServerOnSameDataDirIsRefused(t *testing.T) {
	t.Parallel()
	dir := dataDir(t)
	c := start(t, pgcluster.Config{DataDir: dir, Fast: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if c2, err := pgcluster.Start(ctx, pgcluster.Config{DataDir: dir, Fast: true}); err == nil {
		_ = c2.Stop(ctx)
		t.Fatal("second Start on a data directory in use succeeded")
	}
	connect(t, c.URL(pgcluster.Database)) // the first server is unharmed
}

func TestRestartImmediateKeepsCommittedData(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := start(t, pgcluster.Config{DataDir: dataDir(t)})
	conn := connect(t, c.URL(pgcluster.Database))
	if _, err := conn.Exec(ctx, "CREATE TABLE t (v int); INSERT INTO t VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(ctx, "immediate"); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if err := conn.Ping(ctx); err == nil {
		t.Error("a connection from before the immediate restart still works")
	}
	var v int
	if err := connect(t, c.URL(pgcluster.Database)).QueryRow(ctx, "SELECT v FROM t").Scan(&v); err != nil || v != 42 {
		t.Fatalf("after immediate restart: got %d, %v; want 42", v, err)
	}
	if err := c.Restart(ctx, "sideways"); err == nil {
		t.Error("Restart accepted an unknown mode")
	}
}

func TestNonEmptyDirectoryIsRefused(t *testing.T) {
	t.Parallel()
	dir := dataDir(t)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if c, err := pgcluster.Start(context.Background(), pgcluster.Config{DataDir: dir}); err == nil {
		_ = c.Stop(context.Background())
		t.Fatal("Start initialized a cluster over a directory holding other files")
	}
}
