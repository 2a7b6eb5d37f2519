//go:build linux

package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/quittance/quittance/sql/pgcluster"
	"github.com/quittance/quittance/sql/pgtest/internal/scratch"
)

// PatroniPair is two PostgreSQL servers under Patroni with a local etcd,
// on loopback, for failover tests where the promotion is Patroni's
// decision: Failover kills the leader's node (its Patroni and its
// postmaster, as a crash of its machine would) and waits until Patroni
// has promoted the synchronous standby.
type PatroniPair struct {
	// Database is the name of the test database, with the schema applied.
	Database string
	nodes    [2]*patroniNode
}

// patroniNode is one member: a Patroni process and the server it runs.
type patroniNode struct {
	name            string
	dir             string // holds the configuration, the log and data/
	pgPort, apiPort int
	cmd             *exec.Cmd
	done            chan struct{}
}

// Patroni timings, short so that a failover takes seconds: Patroni
// requires loop_wait + 2*retry_timeout <= ttl; the leader key expires ttl
// seconds after the leader's last renewal.
const (
	patroniTTL          = 6
	patroniLoopWait     = 1
	patroniRetryTimeout = 2
)

// patroniPackages are the Debian packages the pair needs: Patroni, its
// etcd client library (one of the alternatives the patroni package
// depends on), and the etcd server.
var patroniPackages = []string{"patroni", "python3-etcd", "etcd-server"}

// Patroni starts an etcd and two Patroni members on loopback from the
// machine's PostgreSQL binaries, installing Patroni and etcd with apt-get
// when they are missing (as root; otherwise the test fails saying what to
// install). The first member bootstraps the cluster and leads; the second
// is copied from it and, Patroni's synchronous_mode being on, becomes its
// synchronous standby before Patroni returns. Under root the members run
// as the postgres OS user, as pgcluster does. Everything is stopped and
// removed when the test ends; if it failed, the end of each member's log
// is written to the test log first.
func Patroni(t testing.TB) *PatroniPair {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	binDir, cred, err := patroniPrerequisites(ctx)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	dir, err := scratch.NewDir()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	p := &PatroniPair{}
	var etcd *etcdServer
	t.Cleanup(func() {
		for _, n := range p.nodes {
			if n != nil {
				n.stop(t)
			}
		}
		if etcd != nil {
			etcd.stop()
		}
		_ = os.RemoveAll(dir)
	})
	if err := chownTo(cred, dir); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	ports := freePorts(t, 2)
	if etcd, err = startEtcd(ctx, dir, ports[0], ports[1]); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	// A member's port may be taken between freePorts and its bind (the
	// suite's other servers and clients share the range), and its
	// postmaster then exits: the pair is started again, on other ports,
	// up to three times.
	for attempt := 1; ; attempt++ {
		m := members{dir: filepath.Join(dir, fmt.Sprint(attempt)), etcdURL: etcd.url, binDir: binDir, cred: cred}
		err := p.startMembers(ctx, t, m)
		if err == nil {
			break
		}
		if attempt == 3 || !errors.Is(err, errExited) {
			t.Fatalf("pgtest: %v", err)
		}
		t.Logf("pgtest: %v\nstarting the pair again on other ports", err)
	}
	if p.Database, err = createPatroniDatabase(ctx, p.nodes[0].url("postgres"), t.Name()); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range p.nodes {
				t.Logf("pgtest: log of Patroni member %s:\n%s", n.name, fileTail(n.log()))
			}
		}
	})
	return p
}

// members is where and how a pair's members run.
type members struct {
	dir, etcdURL, binDir string
	cred                 *syscall.Credential
}

// startMembers stops the members of an earlier attempt, then starts two
// in m.dir on free ports, one cluster in the etcd namespace (its scope
// named after the directory): the first bootstraps and leads, the second
// follows as its synchronous standby.
func (p *PatroniPair) startMembers(ctx context.Context, t testing.TB, m members) error {
	for i, n := range p.nodes {
		if n != nil {
			n.stop(t)
			p.nodes[i] = nil
		}
	}
	if err := os.MkdirAll(m.dir, 0o700); err != nil {
		return err
	}
	if err := chownTo(m.cred, m.dir); err != nil {
		return err
	}
	ports := freePorts(t, 4)
	scope := filepath.Base(filepath.Dir(m.dir)) + "-" + filepath.Base(m.dir)
	for i := range p.nodes {
		n := &patroniNode{name: fmt.Sprintf("node%d", i+1), dir: filepath.Join(m.dir, fmt.Sprintf("n%d", i+1)),
			pgPort: ports[2*i], apiPort: ports[2*i+1]}
		if err := n.prepare(scope, m.etcdURL, m.binDir, m.cred); err != nil {
			return err
		}
		if err := n.start(m.cred); err != nil {
			return err
		}
		p.nodes[i] = n
		want := "/primary"
		if i == 1 {
			want = "/sync"
		}
		if err := waitHTTP(ctx, n.api(want), n.done); err != nil {
			return fmt.Errorf("%s (%s): %w\n%s", n.name, want, err, fileTail(n.log()))
		}
	}
	return nil
}

// errExited: a member exited before it was ready.
var errExited = errors.New("exited")

// patroniPrerequisites makes sure Patroni and etcd are installed and
// finds what the members run: the directory of the PostgreSQL server
// binaries Patroni is given (bin_dir), and, under root, the postgres OS
// user's credential, since PostgreSQL refuses to run as root (nil
// otherwise: the caller's user).
func patroniPrerequisites(ctx context.Context) (binDir string, cred *syscall.Credential, err error) {
	if err := ensurePatroni(ctx); err != nil {
		return "", nil, err
	}
	binDir, err = pgcluster.FindBinaries()
	if err != nil {
		return "", nil, err
	}
	if real, err := filepath.EvalSymlinks(filepath.Join(binDir, "postgres")); err == nil {
		binDir = filepath.Dir(real) // beside pg_ctl, pg_basebackup, pg_controldata
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return "", nil, fmt.Errorf("running as root, PostgreSQL runs as the postgres OS user, which is missing: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	}
	return binDir, cred, nil
}

// chownTo gives path to cred's user, so that the members, run as that
// user, can write where the test (root) made directories and files; with
// a nil cred the members run as the caller and nothing changes.
func chownTo(cred *syscall.Credential, path string) error {
	if cred == nil {
		return nil
	}
	return os.Chown(path, int(cred.Uid), int(cred.Gid))
}

// etcdServer is the pair's etcd, Patroni's distributed configuration
// store, listening for clients on url.
type etcdServer struct {
	url  string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
}

// startEtcd starts a one-member etcd with its data and log under dir,
// for clients on clientPort and peers on peerPort, and waits until it is
// healthy: the members cannot bootstrap without it. When it returns an
// etcdServer, with an error or not, the caller stops it.
func startEtcd(ctx context.Context, dir string, clientPort, peerPort int) (*etcdServer, error) {
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	etcdLog, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		return nil, err
	}
	defer etcdLog.Close()
	cmd := exec.Command("etcd", "--name", "pgtest", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "pgtest="+peerURL, "--initial-cluster-state", "new")
	cmd.Stdout, cmd.Stderr = etcdLog, etcdLog
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start etcd: %w", err)
	}
	e := &etcdServer{url: etcdURL, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(e.done) }()
	if err := waitHTTP(ctx, etcdURL+"/health", e.done); err != nil {
		return e, fmt.Errorf("etcd: %w\n%s", err, fileTail(etcdLog.Name()))
	}
	return e, nil
}

// stop kills etcd and waits for it to exit; it holds nothing the test
// keeps, so it need not stop cleanly.
func (e *etcdServer) stop() {
	_ = e.cmd.Process.Kill()
	<-e.done
}

// prepare makes the member's directory and writes its Patroni
// configuration there, both owned by cred's user (see chownTo).
func (n *patroniNode) prepare(scope, etcdURL, binDir string, cred *syscall.Credential) error {
	if err := os.Mkdir(n.dir, 0o700); err != nil {
		return err
	}
	if err := chownTo(cred, n.dir); err != nil {
		return err
	}
	if err := os.WriteFile(n.config(), []byte(n.yaml(scope, etcdURL, binDir)), 0o600); err != nil {
		return err
	}
	return chownTo(cred, n.config())
}

// createPatroniDatabase makes the test's database, named after testName,
// on the leader at adminURL from the migrated template, as Replicated
// does for its pair; the standby gets it by replication. It returns the
// database's name.
func createPatroniDatabase(ctx context.Context, adminURL, testName string) (string, error) {
	if err := pgcluster.EnsureServiceLogin(ctx, adminURL); err != nil {
		return "", err
	}
	tpl, err := buildTemplate(ctx, adminURL, migrationsHash())
	if err != nil {
		return "", err
	}
	db := databaseName(testName)
	if err := createFromTemplate(ctx, adminURL, db, tpl); err != nil {
		return "", err
	}
	return db, nil
}

// ensurePatroni installs patroniPackages when patroni or etcd is missing.
func ensurePatroni(ctx context.Context) error {
	_, errP := exec.LookPath("patroni")
	_, errE := exec.LookPath("etcd")
	if errP == nil && errE == nil && exec.Command("/usr/bin/python3", "-c", "import etcd").Run() == nil {
		return nil
	}
	err := pgcluster.AptInstall(ctx, nil, patroniPackages...)
	if errors.Is(err, pgcluster.ErrAptUnavailable) {
		return fmt.Errorf("the Patroni failover test needs Patroni and etcd, which %w: install Debian's %s (apt-get install %s)",
			err, strings.Join(patroniPackages, ", "), strings.Join(patroniPackages, " "))
	}
	if err != nil {
		return fmt.Errorf("install Patroni and etcd: %w", err)
	}
	return nil
}

// URL is the test database's URL naming both members, for
// target_session_attrs=read-write.
func (p *PatroniPair) URL() string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d,127.0.0.1:%d/%s?sslmode=disable&target_session_attrs=read-write",
		pgcluster.Superuser, p.nodes[0].pgPort, p.nodes[1].pgPort, p.Database)
}

// Failover SIGKILLs the leader's Patroni and then its postmaster, as a
// crash of its machine ends both, and returns once Patroni has promoted
// the other member (its REST API says it is the primary) and it takes
// writes. killed is when the leader's Patroni was killed.
func (p *PatroniPair) Failover(ctx context.Context) (killed time.Time, err error) {
	leader, other := p.nodes[0], p.nodes[1]
	if httpStatus(other.api("/primary")) == http.StatusOK {
		leader, other = other, leader
	}
	pid, err := leader.postmasterPID()
	if err != nil {
		return time.Now(), err
	}
	killed = time.Now()
	_ = leader.cmd.Process.Kill()
	_ = syscall.Kill(pid, syscall.SIGKILL)
	<-leader.done
	for {
		if httpStatus(other.api("/primary")) == http.StatusOK {
			var recovering bool
			conn, err := pgx.Connect(ctx, other.url("postgres"))
			if err == nil {
				err = conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&recovering)
				conn.Close(context.WithoutCancel(ctx))
				if err == nil && !recovering {
					return killed, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return killed, fmt.Errorf("Patroni did not promote %s: %w\n%s", other.name, ctx.Err(), fileTail(other.log()))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (n *patroniNode) config() string { return filepath.Join(n.dir, "patroni.yml") }
func (n *patroniNode) log() string    { return filepath.Join(n.dir, "patroni.log") }
func (n *patroniNode) data() string   { return filepath.Join(n.dir, "data") }

func (n *patroniNode) api(path string) string {
	return fmt.Sprintf("http://127.0.0.1:%d%s", n.apiPort, path)
}

func (n *patroniNode) url(dbname string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", pgcluster.Superuser, n.pgPort, dbname)
}

// yaml is the member's Patroni configuration: loopback only, trust
// authentication on loopback (as pgcluster's clusters), synchronous mode.
func (n *patroniNode) yaml(scope, etcdURL, binDir string) string {
	return fmt.Sprintf(`scope: %[1]s
namespace: /quittance-pgtest/
name: %[2]s
log:
  level: INFO
restapi:
  listen: 127.0.0.1:%[3]d
  connect_address: 127.0.0.1:%[3]d
etcd3:
  hosts: %[4]s
bootstrap:
  dcs:
    ttl: %[8]d
    loop_wait: %[9]d
    retry_timeout: %[10]d
    synchronous_mode: true
    postgresql:
      use_pg_rewind: false
      parameters:
        max_connections: %[7]d
        synchronous_commit: "on"
  initdb:
    - encoding: UTF8
    - locale: C
    - username: %[11]s
postgresql:
  listen: 127.0.0.1:%[5]d
  connect_address: 127.0.0.1:%[5]d
  data_dir: %[6]s/data
  bin_dir: %[12]s
  pgpass: %[6]s/pgpass
  authentication:
    superuser:
      username: %[11]s
      password: pgtest
    replication:
      username: %[11]s
      password: pgtest
  pg_hba:
    - host all all 127.0.0.1/32 trust
    - host replication all 127.0.0.1/32 trust
  parameters:
    unix_socket_directories: %[6]s
    max_connections: %[7]d
`, scope, n.name, n.apiPort, strings.TrimPrefix(etcdURL, "http://"), n.pgPort, n.dir, pgcluster.MaxConnections,
		patroniTTL, patroniLoopWait, patroniRetryTimeout, pgcluster.Superuser, binDir)
}

// start runs the member's Patroni as cred (nil: the caller's user). If the
// test binary dies, Patroni gets SIGTERM and stops its server.
func (n *patroniNode) start(cred *syscall.Credential) error {
	logf, err := os.Create(n.log())
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command("patroni", n.config())
	cmd.Dir = n.dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") && !strings.HasPrefix(kv, "PATRONI") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start patroni: %w", err)
	}
	n.cmd, n.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(n.done) }()
	return nil
}

// stop asks Patroni to stop (SIGTERM: it shuts its server down) and, if
// it has not within a minute, or its server outlived it, kills both.
func (n *patroniNode) stop(t testing.TB) {
	select {
	case <-n.done:
	default:
		_ = n.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-n.done:
		case <-time.After(time.Minute):
			t.Errorf("pgtest: Patroni member %s did not stop within a minute", n.name)
			_ = n.cmd.Process.Kill()
			<-n.done
		}
	}
	if pid, err := n.postmasterPID(); err == nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// postmasterPID is the pid in the member's postmaster.pid, if its
// process is alive.
func (n *patroniNode) postmasterPID() (int, error) {
	b, err := os.ReadFile(filepath.Join(n.data(), "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", n.name, err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("%s: postmaster.pid holds %q", n.name, first)
	}
	if syscall.Kill(pid, 0) != nil {
		return 0, fmt.Errorf("%s: postmaster %d is not running", n.name, pid)
	}
	return pid, nil
}

// waitHTTP waits until url answers 200, failing when done closes (the
// process behind it exited) or ctx ends.
func waitHTTP(ctx context.Context, url string, done <-chan struct{}) error {
	for {
		if httpStatus(url) == http.StatusOK {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("%w before %s answered 200", errExited, url)
		case <-ctx.Done():
			return fmt.Errorf("%s did not answer 200: %w", url, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// httpStatus is the status of a GET of url, or 0.
func httpStatus(url string) int {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// freePorts asks the kernel for n distinct free TCP ports on 127.0.0.1.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("pgtest: find a free port: %v", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// fileTail is the last lines of a log file.
func fileTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return lastLines(string(b), 40)
}
