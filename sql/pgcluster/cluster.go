package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Database is the name of the application database Start creates.
const Database = "quittance"

// Superuser is the name of the cluster's superuser role.
const Superuser = "postgres"

// MaxConnections is the server's max_connections setting.
const MaxConnections = 200

// Files Start keeps in the data directory next to PostgreSQL's own.
const (
	portFile = "quittance.port"
	logFile  = "postgres.log"
	pidFile  = "postmaster.pid"
)

// maxSocketPath is the longest unix socket path the kernel accepts
// (sizeof(sun_path) - 1 on Linux).
const maxSocketPath = 107

// Config says where a cluster keeps its data and how it runs.
type Config struct {
	// DataDir is the cluster's data directory. It is created and
	// initialized with initdb if it does not exist or is empty; a relative
	// path is resolved against the working directory when Start is called.
	DataDir string
	// Port is the TCP port on 127.0.0.1. Zero picks one: the port recorded
	// in DataDir by the previous start if it is still free, otherwise a free
	// one, which is then recorded for the next start.
	Port int
	// Fast turns off fsync, synchronous_commit and full_page_writes. Data
	// may be lost or corrupted by a crash of the machine, so it is for
	// throwaway test clusters only; the development cluster keeps it off.
	Fast bool
	// BinDir is the directory holding initdb and postgres. Empty means
	// FindBinaries.
	BinDir string
	// Log receives the cluster's lifecycle events. Nil discards them.
	Log *slog.Logger
}

// Cluster is a running PostgreSQL server started by Start. Its methods are
// safe for concurrent use.
type Cluster struct {
	dataDir string
	binDir  string
	fast    bool
	runAs   *osUser
	log     *slog.Logger

	port atomic.Int32 // read without mu by Port and URL

	mu   sync.Mutex // serializes starting and stopping
	proc *process
}

// process is one run of the postgres executable.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // the result of Wait, readable once done is closed
}

// osUser is the account the server runs as when the caller is root.
type osUser struct {
	name     string
	uid, gid int
}

// Start initializes the cluster in cfg.DataDir if it holds none, starts the
// server, waits until it accepts connections and creates the quittance
// database if it is missing. A postmaster.pid left behind by a crashed run
// is removed; a server still running on the same data directory is an
// error. The server is a child of the calling process and stops, at the
// latest, when that process exits (on Linux; elsewhere call Stop).
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("pgcluster: Config.DataDir is empty")
	}
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("resolve data directory: %w", err)
	}
	binDir := cfg.BinDir
	if binDir == "" {
		if binDir, err = FindBinaries(); err != nil {
			return nil, err
		}
	}
	c := &Cluster{dataDir: dataDir, binDir: binDir, fast: cfg.Fast, log: cfg.Log}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	c.log = c.log.With("data_dir", dataDir)
	if os.Geteuid() == 0 {
		if c.runAs, err = lookupPostgresUser(); err != nil {
			return nil, err
		}
	}
	if err := c.prepare(ctx); err != nil {
		return nil, err
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	remembered := cfg.Port == 0
	port := cfg.Port
	if port == 0 {
		port = c.rememberedPort()
	}
	for attempt := 0; ; attempt++ {
		if port == 0 {
			if port, err = freePort(); err != nil {
				return nil, err
			}
		}
		c.port.Store(int32(port))
		err = c.startLocked(ctx)
		if err == nil {
			break
		}
		// Another process may take a free port between our check and the
		// server's bind; pick another one unless the caller chose it.
		if !remembered || attempt == 2 || !errors.Is(err, errAddrInUse) {
			return nil, err
		}
		c.log.InfoContext(ctx, "port taken, trying another", "port", port)
		port = 0
	}
	if remembered {
		if err := os.WriteFile(filepath.Join(dataDir, portFile), []byte(strconv.Itoa(port)+"\n"), 0o644); err != nil {
			c.log.WarnContext(ctx, "cannot record port", "err", err)
		}
	}
	if err := c.createDatabase(ctx); err != nil {
		_ = c.stopLocked(ctx, syscall.SIGINT)
		return nil, err
	}
	if err := EnsureServiceLogin(ctx, c.URL("postgres")); err != nil {
		_ = c.stopLocked(ctx, syscall.SIGINT)
		return nil, err
	}
	return c, nil
}

// lookupPostgresUser finds the account the server runs as under root.
func lookupPostgresUser() (*osUser, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, PostgreSQL must run as another user, "+
			"but the postgres OS user is missing (install PostgreSQL with apt-get, "+
			"or create it with `useradd --system postgres`): %w", err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("postgres OS user has non-numeric ids %q/%q", u.Uid, u.Gid)
	}
	return &osUser{name: u.Username, uid: uid, gid: gid}, nil
}

// prepare makes sure the data directory holds a cluster the server can use.
func (c *Cluster) prepare(ctx context.Context) error {
	_, err := os.Stat(filepath.Join(c.dataDir, "PG_VERSION"))
	switch {
	case err == nil:
		if err := c.checkReachable(); err != nil {
			return err
		}
		return c.removeStalePID(ctx)
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("inspect data directory: %w", err)
	}
	entries, err := os.ReadDir(c.dataDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("inspect data directory: %w", err)
	}
	if len(entries) > 0 {
		return fmt.Errorf("data directory %s is neither empty nor a PostgreSQL cluster (no PG_VERSION)", c.dataDir)
	}
	if err := os.MkdirAll(c.dataDir, 0o700); err != nil {
		return fmt.Errorf("create data directory: %w", err)
	}
	if err := os.Chmod(c.dataDir, 0o700); err != nil {
		return fmt.Errorf("restrict data directory: %w", err)
	}
	if c.runAs != nil {
		if err := os.Chown(c.dataDir, c.runAs.uid, c.runAs.gid); err != nil {
			return fmt.Errorf("give data directory to the %s user: %w", c.runAs.name, err)
		}
	}
	if err := c.checkReachable(); err != nil {
		return err
	}
	return c.initdb(ctx)
}

// ErrDataDirUnreachable is returned, wrapped in advice, when the server's
// OS user (postgres, when the caller is root) cannot reach the data
// directory because a parent directory is closed to it.
var ErrDataDirUnreachable = errors.New("data directory unreachable by the server's user")

// checkReachable fails with advice when the server's OS user cannot reach
// the data directory because a parent directory is closed to it, which
// happens when root keeps the data under a private directory.
func (c *Cluster) checkReachable() error {
	if c.runAs == nil {
		return nil
	}
	for dir := filepath.Dir(c.dataDir); ; dir = filepath.Dir(dir) {
		fi, err := os.Stat(dir)
		if err != nil {
			return fmt.Errorf("inspect %s: %w", dir, err)
		}
		if !searchable(fi, c.runAs) {
			return fmt.Errorf("%w: the %s user, which runs the server, cannot enter %s (mode %v); "+
				"run `chmod o+x %s` or choose a data directory elsewhere",
				ErrDataDirUnreachable, c.runAs.name, dir, fi.Mode().Perm(), dir)
		}
		if dir == filepath.Dir(dir) {
			return nil
		}
	}
}

// initdb creates a new cluster in the data directory.
func (c *Cluster) initdb(ctx context.Context) error {
	c.log.InfoContext(ctx, "initializing PostgreSQL cluster")
	args := []string{
		"-D", c.dataDir,
		"--username=" + Superuser,
		"--encoding=UTF8",
		"--locale=C",
		"--auth=trust",
	}
	if c.fast {
		args = append(args, "--no-sync")
	}
	cmd := c.command(filepath.Join(c.binDir, "initdb"), args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, tail(out.String(), 4000))
	}
	return nil
}

// removeStalePID deletes a postmaster.pid whose process is gone, as a crash
// leaves it, and fails if a server is still running on the data directory.
func (c *Cluster) removeStalePID(ctx context.Context) error {
	path := filepath.Join(c.dataDir, pidFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", pidFile, err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err == nil && pid > 0 && processAlive(pid) && isPostgres(pid) {
		stop := "pg_ctl stop -D " + c.dataDir
		if c.runAs != nil {
			stop = "runuser -u " + c.runAs.name + " -- " + stop
		}
		return fmt.Errorf("a PostgreSQL server (pid %d) is already running on %s; stop it with `%s`",
			pid, c.dataDir, stop)
	}
	c.log.InfoContext(ctx, "removing stale postmaster.pid", "pid", pid)
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove stale %s: %w", pidFile, err)
	}
	return nil
}

// isPostgres reports whether pid runs the postgres executable. Without
// /proc it assumes so, which errs on the side of not touching a live server.
func isPostgres(pid int) bool {
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return true
	}
	return strings.HasPrefix(strings.TrimSpace(string(comm)), "postgres")
}

// rememberedPort returns the port recorded by the previous start if it is
// free now, or 0.
func (c *Cluster) rememberedPort() int {
	b, err := os.ReadFile(filepath.Join(c.dataDir, portFile))
	if err != nil {
		return 0
	}
	port, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || port <= 0 || port > 65535 {
		return 0
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return 0
	}
	_ = l.Close()
	return port
}

// freePort asks the kernel for a free TCP port on 127.0.0.1.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// errAddrInUse marks a start that failed because the port was taken.
var errAddrInUse = errors.New("address already in use")

// startLocked runs postgres and waits until it accepts connections.
func (c *Cluster) startLocked(ctx context.Context) error {
	logPath := filepath.Join(c.dataDir, logFile)
	if _, err := os.Stat(logPath); err == nil {
		_ = os.Rename(logPath, logPath+".old")
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("open server log: %w", err)
	}
	defer logf.Close() // the child holds its own descriptor

	cmd := c.command(filepath.Join(c.binDir, "postgres"), c.serverArgs()...)
	cmd.Stdout, cmd.Stderr = logf, logf
	deathSignal := syscall.SIGINT // fast shutdown keeps a development cluster tidy
	if c.fast {
		deathSignal = syscall.SIGQUIT // immediate: a throwaway cluster need not checkpoint
	}
	setProcAttr(cmd, c.runAs, deathSignal)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	c.proc = p
	c.log.InfoContext(ctx, "starting PostgreSQL", "port", c.Port(), "pid", cmd.Process.Pid)

	if err := c.waitReady(ctx, p); err != nil {
		_ = c.stopLocked(context.WithoutCancel(ctx), syscall.SIGQUIT) // returns at once if it exited
		logText := c.logTail(4000)
		if strings.Contains(logText, "Address already in use") {
			err = fmt.Errorf("%w: %w", errAddrInUse, err)
		}
		return fmt.Errorf("start PostgreSQL on port %d: %w\nserver log %s:\n%s", c.Port(), err, logPath, logText)
	}
	c.log.InfoContext(ctx, "PostgreSQL ready", "port", c.Port())
	return nil
}

// serverArgs are the command-line arguments of postgres. Settings given
// here override postgresql.conf, so they hold whatever that file says.
func (c *Cluster) serverArgs() []string {
	socketDir := c.dataDir
	if len(socketDir)+len("/.s.PGSQL.65535") > maxSocketPath {
		socketDir = "" // too long for a socket path: TCP only
	}
	args := []string{
		"-D", c.dataDir,
		"-p", strconv.Itoa(c.Port()),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=" + socketDir,
		"-c", "max_connections=" + strconv.Itoa(MaxConnections),
	}
	if c.fast {
		args = append(args,
			"-c", "fsync=off",
			"-c", "synchronous_commit=off",
			"-c", "full_page_writes=off",
		)
	}
	return args
}

// waitReady polls until the server accepts a connection, the server exits,
// or ctx ends.
func (c *Cluster) waitReady(ctx context.Context, p *process) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		attempt, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(attempt, c.URL("postgres"))
		cancel()
		if err == nil {
			return conn.Close(ctx)
		}
		select {
		case <-p.done:
			if p.err == nil {
				return errors.New("postgres exited before accepting connections")
			}
			return fmt.Errorf("postgres exited before accepting connections: %w", p.err)
		case <-ctx.Done():
			return fmt.Errorf("wait for PostgreSQL to accept connections: %w (last error: %w)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// createDatabase creates the application database if it is missing.
func (c *Cluster) createDatabase(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return fmt.Errorf("connect to maintenance database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", Database).Scan(&exists); err != nil {
		return fmt.Errorf("look up database %s: %w", Database, err)
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{Database}.Sanitize()); err != nil {
		return fmt.Errorf("create database %s: %w", Database, err)
	}
	c.log.InfoContext(ctx, "created database", "database", Database)
	return nil
}

// command prepares to run a PostgreSQL executable as the server's user,
// from a working directory that user can read, without PG* variables that
// could point it at another cluster.
func (c *Cluster) command(path string, args ...string) *exec.Cmd {
	cmd := exec.Command(path, args...)
	cmd.Dir = "/"
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	setProcAttr(cmd, c.runAs, 0)
	return cmd
}

// URL returns a connection URL for database dbname on the cluster, as the
// superuser, over TCP on 127.0.0.1.
func (c *Cluster) URL(dbname string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", Superuser, c.Port(), dbname)
}

// ServiceURL returns the URL of database dbname for ServiceLogin, the
// service's own login role, which cannot rewrite the audit log.
func (c *Cluster) ServiceURL(dbname string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", ServiceLogin, c.Port(), dbname)
}

// Port returns the TCP port the server listens on.
func (c *Cluster) Port() int {
	return int(c.port.Load())
}

// DataDir returns the absolute path of the cluster's data directory.
func (c *Cluster) DataDir() string { return c.dataDir }

// LogFile returns the path of the server's log for its current run. The log
// of the run before is kept next to it with the suffix ".old".
func (c *Cluster) LogFile() string { return filepath.Join(c.dataDir, logFile) }

// logTail returns the end of the server log.
func (c *Cluster) logTail(n int) string {
	b, err := os.ReadFile(c.LogFile())
	if err != nil {
		return "(no server log: " + err.Error() + ")"
	}
	return tail(string(b), n)
}

// shutdownSignals maps pg_ctl's shutdown modes to the signals pg_ctl sends.
var shutdownSignals = map[string]syscall.Signal{
	"smart":     syscall.SIGTERM,
	"fast":      syscall.SIGINT,
	"immediate": syscall.SIGQUIT,
}

// Stop shuts the server down in fast mode, as `pg_ctl stop -m fast` does:
// sessions are disconnected, a checkpoint is written, and Stop returns once
// the server and all its processes have exited. If ctx ends first, the
// server is shut down in immediate mode and then killed. Stop on a stopped
// cluster does nothing.
func (c *Cluster) Stop(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopLocked(ctx, syscall.SIGINT)
}

// Restart stops the server in mode, one of pg_ctl's shutdown modes "smart",
// "fast" or "immediate" (empty means "fast"), and starts it again on the
// same port and data. "immediate" ends the server without a checkpoint, as
// a crash would, so the next start runs crash recovery.
func (c *Cluster) Restart(ctx context.Context, mode string) error {
	if mode == "" {
		mode = "fast"
	}
	sig, ok := shutdownSignals[mode]
	if !ok {
		return fmt.Errorf("pgcluster: unknown shutdown mode %q (want smart, fast or immediate)", mode)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.stopLocked(ctx, sig); err != nil {
		return err
	}
	if err := c.removeStalePID(ctx); err != nil {
		return err
	}
	return c.startLocked(ctx)
}

// stopLocked signals the server and waits for it to exit, escalating to
// immediate shutdown and then to SIGKILL if ctx ends first.
func (c *Cluster) stopLocked(ctx context.Context, sig syscall.Signal) error {
	p := c.proc
	if p == nil {
		return nil
	}
	c.proc = nil
	c.log.InfoContext(ctx, "stopping PostgreSQL", "signal", sig.String())
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
	}
	_ = p.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	return fmt.Errorf("stop PostgreSQL: %w", ctx.Err())
}
