package jspeer

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/quittance/quittance/compensation"
)

// ExtensionURI is the compensation extension the peer declares and
// implements.
const ExtensionURI = compensation.ExtensionURI

// RequireEnv names the environment variable that turns a missing node or
// npm from a skipped test into a failed one. CI sets it.
const RequireEnv = "QUITTANCE_REQUIRE_JS_PEER"

// Scenarios: the text of a task's first user message picks what the peer
// does with it. Any other text is ScenarioWork.
const (
	// ScenarioWork goes submitted → working and stays working until
	// canceled, or completes after the WithWorkDuration delay.
	ScenarioWork = "work"
	// ScenarioComplete goes submitted → working → completed, with an
	// artifact.
	ScenarioComplete = "complete"
	// ScenarioFail goes submitted → working → failed.
	ScenarioFail = "fail"
	// ScenarioInputRequired stops in input_required; a follow-up message
	// on the task completes it.
	ScenarioInputRequired = "input_required"
	// ScenarioAuthRequired stops in auth_required with a status message
	// holding a consent URL.
	ScenarioAuthRequired = "auth_required"
	// ScenarioNotCancelable works like ScenarioWork but refuses to be
	// canceled (TaskNotCancelableError).
	ScenarioNotCancelable = "not_cancelable"
	// ScenarioCompensationPending works like ScenarioWork; a compensation
	// request for the task is answered with a working compensation task
	// whose receipt is pending, which completes with the final
	// (compensated) receipt after the WithPendingDuration delay.
	ScenarioCompensationPending = "compensation_pending"
	// ScenarioCompensationNotSupported works like ScenarioWork; a
	// compensation request for the task is answered with a completed
	// compensation task whose receipt is not_supported, with a reason.
	ScenarioCompensationNotSupported = "compensation_not_supported"
	// ScenarioPurgeOnCancel works like ScenarioWork, but a cancel purges
	// the task, as an agent with a short retention does: the cancel and
	// every later call on the task (GetTask, CancelTask) answer
	// TaskNotFoundError (-32001). Its effects stand.
	ScenarioPurgeOnCancel = "purge_on_cancel"
)

// Compensation receipt outcomes the peer can be configured to give.
const (
	// OutcomeCompensated is the default: effects reversed, with an ack.
	OutcomeCompensated = "compensated"
	// OutcomeNoEffects declares, signed, that no effects were committed.
	OutcomeNoEffects = "no_effects"
)

// Peer is a running JS SDK agent.
type Peer struct {
	// URL is the agent's base URL, such as "http://127.0.0.1:40177".
	URL string
	// CardURL is the URL of its agent card.
	CardURL string
	// AllowedHosts are the hosts its card's interfaces live on, in the
	// form a2a.FetchAgentCard compares.
	AllowedHosts []string
	// OrgID is the "iss" of the receipts it signs.
	OrgID string
	// LedgerID is the "aud" of the receipts it signs.
	LedgerID string
	// JWKS is the JSON of the public JWK Set that verifies its receipts.
	JWKS []byte
	// Outcome is the outcome of its compensation receipts.
	Outcome string

	out *syncBuffer
}

// Output returns what the Node process has written so far.
func (p *Peer) Output() string { return p.out.String() }

// CompensationRequests returns the messageIds of the compensation requests
// the peer has received for task taskID, in the order received (a resend
// with the same messageId counts again).
func (p *Peer) CompensationRequests(taskID string) []string {
	var ids []string
	for _, f := range p.lines("JSPEER_COMPENSATION_REQUEST ") {
		if len(f) == 2 && f[0] == taskID {
			ids = append(ids, f[1])
		}
	}
	return ids
}

// Purged reports whether the peer has purged task taskID
// (ScenarioPurgeOnCancel).
func (p *Peer) Purged(taskID string) bool {
	for _, f := range p.lines("JSPEER_PURGED ") {
		if len(f) == 1 && f[0] == taskID {
			return true
		}
	}
	return false
}

// lines returns the fields after prefix of each output line that starts
// with prefix.
func (p *Peer) lines(prefix string) [][]string {
	var out [][]string
	for line := range strings.Lines(p.Output()) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok {
			out = append(out, strings.Fields(rest))
		}
	}
	return out
}

type options struct {
	orgID, ledgerID, outcome string
	work, pending            time.Duration
	atomicCancel             bool
}

// Option configures a peer.
type Option func(*options)

// WithOrgID sets the org id the peer signs as (default "js-peer").
func WithOrgID(id string) Option { return func(o *options) { o.orgID = id } }

// WithLedgerID sets the ledger id its receipts are addressed to (default
// "quittance").
func WithLedgerID(id string) Option { return func(o *options) { o.ledgerID = id } }

// WithNoEffects makes compensation receipts say no_effects, with a signed
// no-compensation-required declaration, instead of compensated.
func WithNoEffects() Option { return func(o *options) { o.outcome = OutcomeNoEffects } }

// WithWorkDuration makes ScenarioWork and ScenarioNotCancelable tasks
// complete after d instead of working until canceled.
func WithWorkDuration(d time.Duration) Option { return func(o *options) { o.work = d } }

// WithPendingDuration sets how long a ScenarioCompensationPending reversal
// works before its final receipt (default 1s).
func WithPendingDuration(d time.Duration) Option { return func(o *options) { o.pending = d } }

// WithAtomicCancel makes the peer declare atomicCancel in its card and put
// a compensation receipt in its cancel responses.
func WithAtomicCancel() Option { return func(o *options) { o.atomicCancel = true } }

// Start installs the peer's npm packages if needed, starts the peer, waits
// until it serves its agent card, and stops it when the test ends. It skips
// the test when node or npm is missing, unless RequireEnv is set.
func Start(t testing.TB, opts ...Option) *Peer {
	t.Helper()
	o := options{orgID: "js-peer", ledgerID: "quittance", outcome: OutcomeCompensated, pending: time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	node := requireNode(t)
	script, err := install()
	if err != nil {
		t.Fatalf("jspeer: %v", err)
	}
	privJWK, jwks := signingKey(t)
	pr := launch(t, node, script, o.env(privJWK))
	port := pr.awaitPort(t)
	base := "http://127.0.0.1:" + port
	p := &Peer{
		URL: base, CardURL: base + "/.well-known/agent-card.json", AllowedHosts: []string{"127.0.0.1"},
		OrgID: o.orgID, LedgerID: o.ledgerID, JWKS: jwks, Outcome: o.outcome, out: pr.out,
	}
	if err := waitForCard(p.CardURL, 30*time.Second); err != nil {
		t.Fatalf("jspeer: %v:\n%s", err, pr.out.String())
	}
	return p
}

// signingKey makes the peer's Ed25519 signing key: the private JWK it
// signs with and the JSON of the public JWK Set that verifies it.
func signingKey(t testing.TB) (privJWK, jwks []byte) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	kid := "jspeer-" + strings.ToLower(rand.Text()[:10])
	privJWK, err = jose.JSONWebKey{Key: priv, KeyID: kid, Algorithm: string(jose.EdDSA), Use: "sig"}.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	jwks, err = json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
		{Key: priv.Public(), KeyID: kid, Algorithm: string(jose.EdDSA), Use: "sig"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return privJWK, jwks
}

// env is the peer process's environment: this process's, and the options.
func (o options) env(privJWK []byte) []string {
	return append(os.Environ(),
		"JSPEER_SIGNING_JWK="+string(privJWK),
		"JSPEER_ORG_ID="+o.orgID,
		"JSPEER_LEDGER_ID="+o.ledgerID,
		"JSPEER_OUTCOME="+o.outcome,
		"JSPEER_WORK_MS="+strconv.FormatInt(o.work.Milliseconds(), 10),
		"JSPEER_PENDING_MS="+strconv.FormatInt(o.pending.Milliseconds(), 10),
		"JSPEER_ATOMIC_CANCEL="+map[bool]string{true: "1", false: "0"}[o.atomicCancel],
	)
}

// process is the running node process of a peer.
type process struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	out     *syncBuffer
	exited  chan error
	stopped bool
}

// launch starts node on script with env, and stops it when the test ends,
// logging its output if the test failed.
func launch(t testing.TB, node, script string, env []string) *process {
	t.Helper()
	pr := &process{out: &syncBuffer{ready: make(chan string, 1)}, exited: make(chan error, 1)}
	pr.cmd = exec.Command(node, script)
	pr.cmd.Dir = filepath.Dir(script)
	pr.cmd.Env = env
	pr.cmd.Stdout, pr.cmd.Stderr = pr.out, pr.out
	// The peer exits when its stdin closes: it cannot outlive this process.
	var err error
	if pr.stdin, err = pr.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := pr.cmd.Start(); err != nil {
		t.Fatalf("jspeer: start node: %v", err)
	}
	go func() { pr.exited <- pr.cmd.Wait() }()
	t.Cleanup(func() {
		pr.stop()
		if t.Failed() {
			t.Logf("jspeer output:\n%s", pr.out.String())
		}
	})
	return pr
}

// stop closes the peer's stdin, kills it and waits for it, once.
func (pr *process) stop() {
	if pr.stopped {
		return
	}
	pr.stopped = true
	pr.stdin.Close()
	pr.cmd.Process.Kill()
	<-pr.exited
}

// awaitPort waits until the peer says which port it listens on, and fails
// the test if it exits first or takes more than a minute.
func (pr *process) awaitPort(t testing.TB) string {
	t.Helper()
	select {
	case port := <-pr.out.ready:
		return port
	case err := <-pr.exited:
		pr.stopped = true
		t.Fatalf("jspeer: the peer exited before serving (%v):\n%s", err, pr.out.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("jspeer: the peer did not start within 60s:\n%s", pr.out.String())
	}
	return ""
}

// waitForCard polls the agent card until it is served.
func waitForCard(url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		req.Header.Set("A2A-Version", "1.0")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("HTTP %d", resp.StatusCode)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("agent card at %s not served: %w", url, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// requireNode returns the path of node after checking that node (20 or
// later) and npm are installed; otherwise it skips or fails the test.
func requireNode(t testing.TB) string {
	t.Helper()
	node, nodeErr := exec.LookPath("node")
	_, npmErr := exec.LookPath("npm")
	if nodeErr != nil || npmErr != nil {
		unavailable(t, "node and npm are not both on PATH")
	}
	out, err := exec.Command(node, "--version").Output()
	if err != nil {
		unavailable(t, fmt.Sprintf("node --version failed: %v", err))
	}
	v := strings.TrimPrefix(strings.TrimSpace(string(out)), "v")
	major, _ := strconv.Atoi(strings.SplitN(v, ".", 2)[0])
	if major < 20 {
		unavailable(t, fmt.Sprintf("node %s is too old; @a2a-js/sdk needs Node 20 or later", v))
	}
	return node
}

func unavailable(t testing.TB, reason string) {
	t.Helper()
	if os.Getenv(RequireEnv) != "" {
		t.Fatalf("jspeer: %s, and %s is set: the JS SDK interop peer must run", reason, RequireEnv)
	}
	t.Skipf("jspeer: %s; skipping the JS SDK interop test (set %s=1 to fail instead)", reason, RequireEnv)
}

// installs memoizes install per process; the file lock in install
// serializes test binaries running in parallel.
var installs struct {
	sync.Mutex
	script string
}

// install makes sure the peer's packages are installed in a cache directory
// keyed by the hash of package.json and package-lock.json, copies the
// current agent.mjs there under a name of its own hash (so checkouts with
// different agents share the packages but never run each other's agent),
// and returns the path of that copy.
func install() (string, error) {
	installs.Lock()
	defer installs.Unlock()
	if installs.script != "" {
		return installs.script, nil
	}
	src, err := sourceDir()
	if err != nil {
		return "", err
	}
	pkg, err := os.ReadFile(filepath.Join(src, "package.json"))
	if err != nil {
		return "", err
	}
	lock, err := os.ReadFile(filepath.Join(src, "package-lock.json"))
	if err != nil {
		return "", err
	}
	script, err := os.ReadFile(filepath.Join(src, "agent.mjs"))
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(append(append(append([]byte(nil), pkg...), 0), lock...))
	root := cacheRoot()
	dir := filepath.Join(root, "jspeer-"+hex.EncodeToString(sum[:8]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create the npm cache directory: %w", err)
	}
	unlock, err := lockFile(dir + ".lock")
	if err != nil {
		return "", fmt.Errorf("lock %s: %w", dir, err)
	}
	defer unlock()

	marker := filepath.Join(dir, "node_modules", ".quittance-installed")
	if _, err := os.Stat(marker); err != nil {
		if err := npmCI(dir, pkg, lock); err != nil {
			return "", err
		}
		if err := os.WriteFile(marker, sum[:], 0o644); err != nil {
			return "", err
		}
	}
	scriptSum := sha256.Sum256(script)
	path := filepath.Join(dir, "agent-"+hex.EncodeToString(scriptSum[:8])+".mjs")
	if err := writeIfChanged(path, script); err != nil {
		return "", err
	}
	installs.script = path
	return path, nil
}

// npmCI installs the locked packages into dir, quietly, and reports npm's
// output only if it fails.
func npmCI(dir string, pkg, lock []byte) error {
	os.RemoveAll(filepath.Join(dir, "node_modules"))
	if err := os.WriteFile(filepath.Join(dir, "package.json"), pkg, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "package-lock.json"), lock, 0o644); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error")
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		os.RemoveAll(filepath.Join(dir, "node_modules"))
		return fmt.Errorf("npm ci in %s failed (%v); is the npm registry reachable?\n%s", dir, err, out.String())
	}
	return nil
}

// writeIfChanged replaces path with data, atomically, unless it already
// holds exactly data.
func writeIfChanged(path string, data []byte) error {
	if cur, err := os.ReadFile(path); err == nil && bytes.Equal(cur, data) {
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".agent-*.mjs")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// cacheRoot is $XDG_CACHE_HOME/quittance (or the platform's user cache
// directory), falling back to the temporary directory.
func cacheRoot() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "quittance")
	}
	return filepath.Join(os.TempDir(), "quittance-cache")
}

// sourceDir is the directory of the Node agent's sources, next to this
// file, wherever the test binary runs from.
func sourceDir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot locate the jspeer sources")
	}
	return filepath.Join(filepath.Dir(file), "agent"), nil
}

// syncBuffer collects the process's output and reports the port from its
// "JSPEER_LISTENING <port>" line.
type syncBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	ready   chan string
	partial []byte
	found   bool
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if !b.found {
		b.partial = append(b.partial, p...)
		for {
			i := bytes.IndexByte(b.partial, '\n')
			if i < 0 {
				break
			}
			line := strings.TrimSpace(string(b.partial[:i]))
			b.partial = b.partial[i+1:]
			if port, ok := strings.CutPrefix(line, "JSPEER_LISTENING "); ok {
				b.found = true
				b.partial = nil
				b.ready <- port
				break
			}
		}
	}
	return len(p), nil
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Modules installs the pinned npm packages if needed, as Start does, and
// returns the node binary and the node_modules directory they are in, for
// tests that run a script of their own on @a2a-js/sdk (an orchestrator on
// its client). It skips the test when node or npm is missing, unless
// RequireEnv is set.
func Modules(t testing.TB) (node, nodeModules string) {
	t.Helper()
	node = requireNode(t)
	script, err := install()
	if err != nil {
		t.Fatalf("jspeer: %v", err)
	}
	return node, filepath.Join(filepath.Dir(script), "node_modules")
}
