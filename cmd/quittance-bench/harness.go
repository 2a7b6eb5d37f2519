package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/quittance/quittance/sql/pgcluster"
)

// ledgerID is the ledger id the service runs with: the audience of the
// acks and declarations the load generators sign.
const ledgerID = "quittance-bench"

// harness is a private PostgreSQL cluster, the quittance binary built
// from this module, and a scratch directory for their files.
type harness struct {
	dir     string
	keep    bool
	reused  bool // dir is a kept run's: its data set may be measured again
	binDir  string
	binary  string
	cluster *pgcluster.Cluster
	cost    *costMeter // the bench's lifecycle runs and anchors are measured with it; nil otherwise
	log     *slog.Logger
	stderr  io.Writer
}

// newHarness creates the scratch directory (or takes reuse, one a kept
// run left, and keeps it), builds the binary and starts the cluster (fsync
// on: what is measured is what production pays).
func newHarness(ctx context.Context, stderr io.Writer, keep bool, reuse string) (*harness, error) {
	binDir, err := pgcluster.FindBinaries()
	if err != nil {
		return nil, err
	}
	dir := reuse
	if reuse == "" {
		dir, err = os.MkdirTemp("", "quittance-bench-*")
	} else if _, err = os.Stat(filepath.Join(reuse, "pg", "PG_VERSION")); err != nil {
		err = fmt.Errorf("-reuse %s: not the scratch directory of a kept run: %w", reuse, err)
	}
	if err != nil {
		return nil, err
	}
	// The server runs as the postgres user when we are root: it must be
	// able to reach its data directory inside.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	h := &harness{dir: dir, keep: keep || reuse != "", reused: reuse != "", binDir: binDir, stderr: stderr,
		log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	fmt.Fprintf(stderr, "scratch directory %s\n", dir)
	if err := h.build(ctx); err != nil {
		h.close()
		return nil, err
	}
	fmt.Fprintf(stderr, "starting PostgreSQL from %s (fsync on)\n", binDir)
	h.cluster, err = pgcluster.Start(ctx, pgcluster.Config{DataDir: filepath.Join(dir, "pg"), BinDir: binDir, Log: h.log})
	if err != nil {
		h.close()
		return nil, err
	}
	return h, nil
}

// build compiles ./cmd/quittance of this module into the scratch directory.
func (h *harness) build(ctx context.Context) error {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("locate the module: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return errors.New("run quittance-bench from inside the quittance module (go run ./cmd/quittance-bench)")
	}
	h.binary = filepath.Join(h.dir, "quittance")
	fmt.Fprintf(h.stderr, "building %s\n", h.binary)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", h.binary, "./cmd/quittance")
	cmd.Dir = filepath.Dir(gomod)
	cmd.Stdout, cmd.Stderr = h.stderr, h.stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build quittance: %w", err)
	}
	return nil
}

// close stops the cluster and removes the scratch directory (unless kept).
func (h *harness) close() {
	if h.cluster != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		if err := h.cluster.Stop(ctx); err != nil {
			fmt.Fprintf(h.stderr, "stop PostgreSQL: %v\n", err)
		}
		cancel()
	}
	if h.keep {
		fmt.Fprintf(h.stderr, "kept %s\n", h.dir)
		return
	}
	_ = os.RemoveAll(h.dir)
}

// createDatabase creates an empty database and returns its URL.
func (h *harness) createDatabase(ctx context.Context, name string) (string, error) {
	conn, err := pgx.Connect(ctx, h.cluster.URL("postgres"))
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("drop database %s: %w", name, err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return h.cluster.URL(name), nil
}

// freeAddr returns a free loopback address.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// serviceConfig is how `quittance serve` is started.
type serviceConfig struct {
	Binary      string
	Addr        string
	DatabaseURL string
	Token       string
	LogPath     string
	// Env holds extra NAME=value settings.
	Env []string
}

// service is a running `quittance serve` subprocess.
type service struct {
	cfg  serviceConfig
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	URL  string
}

// signingKeyMu serializes ensureSigningKey: replicas start concurrently.
var signingKeyMu sync.Mutex

// ensureSigningKey writes a new Ed25519 key (PKCS #8 PEM) at path unless
// one is there.
func ensureSigningKey(path string) error {
	signingKeyMu.Lock()
	defer signingKeyMu.Unlock()
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("write the ledger signing key: %w", err)
	}
	return nil
}

// startService starts the binary and waits until /readyz answers 200.
func startService(ctx context.Context, cfg serviceConfig) (*service, error) {
	logf, err := os.OpenFile(cfg.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	// The service runs as shipped: with a signing key, signing checkpoints.
	// Every replica of a run shares the one key in the log's directory.
	keyFile := filepath.Join(filepath.Dir(cfg.LogPath), "ledger-signing-key.pem")
	if err := ensureSigningKey(keyFile); err != nil {
		logf.Close()
		return nil, err
	}
	cmd := exec.Command(cfg.Binary, "serve")
	cmd.Env = append([]string{
		"QUITTANCE_SIGNING_KEY_FILE=" + keyFile,
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"DATABASE_URL=" + cfg.DatabaseURL,
		"QUITTANCE_ADDR=" + cfg.Addr,
		"QUITTANCE_BOOTSTRAP_TOKEN=" + cfg.Token,
		"QUITTANCE_LEDGER_ID=" + ledgerID,
		"QUITTANCE_RATE_LIMIT_RPS=1000000",
		"QUITTANCE_RATE_LIMIT_BURST=1000000",
		"QUITTANCE_LOG_LEVEL=warn",
	}, cfg.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// The service dies with us, whatever happens to us.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start quittance serve: %w", err)
	}
	s := &service{cfg: cfg, cmd: cmd, done: make(chan struct{}), URL: "http://" + cfg.Addr}
	go func() {
		s.err = cmd.Wait()
		logf.Close()
		close(s.done)
	}()
	if err := s.waitReady(ctx, 90*time.Second); err != nil {
		s.kill()
		return nil, err
	}
	return s, nil
}

// waitReady polls /readyz until it answers 200.
func (s *service) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	hc := &http.Client{Timeout: 2 * time.Second}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/readyz", nil)
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-s.done:
			return fmt.Errorf("quittance serve exited before it was ready (%v); see %s", s.err, s.cfg.LogPath)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("quittance serve not ready after %s; see %s", timeout, s.cfg.LogPath)
		}
	}
}

// kill SIGKILLs the service and waits for it to exit.
func (s *service) kill() {
	_ = s.cmd.Process.Kill()
	<-s.done
}

// stop asks the service to shut down gracefully, killing it after 30s.
func (s *service) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		s.kill()
	}
}

// peakRSS is the service's peak resident set size (VmHWM), in bytes.
func (s *service) peakRSS() (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, errors.New("no VmHWM in /proc/<pid>/status")
}

// client is a minimal HTTP client of the API.
type client struct {
	base string
	hc   *http.Client
}

func newClient(base string, conns int) *client {
	tr := &http.Transport{
		MaxIdleConns: conns * 2, MaxIdleConnsPerHost: conns * 2, IdleConnTimeout: 90 * time.Second,
		DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	}
	return &client{base: base, hc: &http.Client{Transport: tr, Timeout: 60 * time.Second}}
}

// response is an HTTP answer with its body read.
type response struct {
	Status int
	Body   []byte
}

// do sends a request; body is sent verbatim when it is []byte (as
// contentType) and as JSON otherwise. A transport error is returned as err.
func (c *client) do(ctx context.Context, method, path, token, contentType string, body any) (response, error) {
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		r = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			return response{}, err
		}
		r, contentType = bytes.NewReader(raw), "application/json"
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, r)
	if err != nil {
		return response{}, err
	}
	if contentType != "" && r != nil {
		req.Header.Set("Content-Type", contentType)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, err
	}
	return response{Status: resp.StatusCode, Body: raw}, nil
}

// request is one JSON API request: method and path, the bearer token
// (none when empty) and the body, sent as JSON when not nil.
type request struct {
	method, path, token string
	body                any
}

// must sends a JSON request and fails unless the status is one of want;
// it decodes the answer into out when out is not nil.
func (c *client) must(ctx context.Context, r request, out any, want ...int) error {
	resp, err := c.do(ctx, r.method, r.path, r.token, "", r.body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", r.method, r.path, err)
	}
	ok := false
	for _, w := range want {
		ok = ok || resp.Status == w
	}
	if !ok {
		return fmt.Errorf("%s %s: status %d: %s", r.method, r.path, resp.Status, resp.Body)
	}
	if out != nil {
		return json.Unmarshal(resp.Body, out)
	}
	return nil
}

// delegation is the part of a delegation the load generators read.
type delegation struct {
	ID              string `json:"id"`
	ObligationState string `json:"obligation_state"`
	TaskStatus      string `json:"task_status"`
	Compensation    *struct {
		IdempotencyKey string `json:"idempotency_key"`
	} `json:"compensation"`
}

// signer is a remote org's Ed25519 signing key: it signs compact JWS
// acks and declarations the way a remote org would.
type signer struct {
	kid  string
	priv ed25519.PrivateKey
}

func newSigner(kid string) *signer {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return &signer{kid: kid, priv: priv}
}

// jwks is the public JWK Set to register for the org.
func (s *signer) jwks() json.RawMessage {
	pub := s.priv.Public().(ed25519.PublicKey)
	raw, _ := json.Marshal(map[string]any{"keys": []map[string]string{{
		"kty": "OKP", "crv": "Ed25519", "x": base64.RawURLEncoding.EncodeToString(pub),
		"kid": s.kid, "alg": "EdDSA", "use": "sig",
	}}})
	return raw
}

// Token types, as the service expects them in the typ header.
const (
	typAck         = "compensation-ack+jwt"
	typDeclaration = "no-compensation-required+jwt"
)

// sign returns a compact JWS (EdDSA) of claims with the given typ.
func (s *signer) sign(typ string, claims map[string]any) []byte {
	h, _ := json.Marshal(map[string]string{"alg": "EdDSA", "kid": s.kid, "typ": typ})
	c, _ := json.Marshal(claims)
	input := base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(c)
	sig := ed25519.Sign(s.priv, []byte(input))
	return []byte(input + "." + base64.RawURLEncoding.EncodeToString(sig))
}

// evidenceClaims are the claims of an ack (idempotencyKey set) or a
// declaration (idempotencyKey empty) about the org's task, valid for
// five minutes from now.
func evidenceClaims(org, task, idempotencyKey string, now time.Time) map[string]any {
	c := map[string]any{
		"iss": org, "aud": ledgerID, "sub": task, "jti": rand.Text(),
		"iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix(),
	}
	if idempotencyKey != "" {
		c["idempotency_key"] = idempotencyKey
		c["receipt_id"] = "rcpt-" + rand.Text()
	}
	return c
}

// onCall makes administrative changes through c with token, and
// approves with approver the ones that wait for a second on-call
// principal (202).
type onCall struct {
	c               *client
	token, approver string
}

// approve approves the pending change the answer to a privileged request
// names, if any, and returns the approval's token_part: the second part
// of a person's credential when the change creates a person principal.
func (a onCall) approve(ctx context.Context, pending *pendingChange) (string, error) {
	if pending == nil {
		return "", nil
	}
	var out struct {
		TokenPart string `json:"token_part"`
	}
	err := a.c.must(ctx, request{http.MethodPost, "/admin/v1/pending-changes/" + pending.ID + "/approve", a.approver, nil}, &out, http.StatusOK)
	return out.TokenPart, err
}

// pendingChange is the pending change a privileged request may answer with.
type pendingChange struct {
	ID string `json:"id"`
}

// newToken issues an API token through the admin API; a principal that
// needs a second on-call approval (202) is approved. A person's
// credential asked for by another on-call principal comes in two parts
// (ledger/PRINCIPALS.md): the request's token_part followed by the
// approval's.
func (a onCall) newToken(ctx context.Context, role, tenant, name string) (string, error) {
	var out struct {
		Token         string         `json:"token"`
		TokenPart     string         `json:"token_part"`
		PendingChange *pendingChange `json:"pending_change"`
	}
	body := map[string]any{"role": role, "name": name}
	if tenant != "" {
		body["tenant"] = tenant
	}
	if err := a.c.must(ctx, request{http.MethodPost, "/admin/v1/tokens", a.token, body}, &out, http.StatusCreated, http.StatusAccepted); err != nil {
		return "", err
	}
	second, err := a.approve(ctx, out.PendingChange)
	if err != nil {
		return "", err
	}
	if out.Token == "" {
		return out.TokenPart + second, nil
	}
	return out.Token, nil
}

// twoOncall creates, with the bootstrap token, the two on-call principals
// it may create outside dev, and returns their tokens: one asks for
// privileged changes, the other approves them.
func twoOncall(ctx context.Context, c *client, bootstrap string) (string, string, error) {
	boot := onCall{c: c, token: bootstrap}
	a, err := boot.newToken(ctx, "oncall", "", "bench-oncall-1")
	if err != nil {
		return "", "", err
	}
	b, err := boot.newToken(ctx, "oncall", "", "bench-oncall-2")
	return a, b, err
}

// privileged does a privileged change and, when it waits for a second
// on-call principal (202), approves it.
func (a onCall) privileged(ctx context.Context, method, path string, body any) error {
	var out struct {
		PendingChange *pendingChange `json:"pending_change"`
	}
	if err := a.c.must(ctx, request{method, path, a.token, body}, &out, http.StatusOK, http.StatusCreated, http.StatusAccepted); err != nil {
		return err
	}
	_, err := a.approve(ctx, out.PendingChange)
	return err
}
