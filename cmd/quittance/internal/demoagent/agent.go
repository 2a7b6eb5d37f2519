package demoagent

import (
	"crypto"
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
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/quittance/quittance/compensation/kit"
)

// ExtensionURI is the URI of Quittance's compensation extension, which the
// agent declares in its card and expects on compensation requests.
const ExtensionURI = kit.URI

// Well-known paths the agent serves.
const (
	// CardPath is where the agent card is served.
	CardPath = "/.well-known/agent-card.json"
	// JWKSPath is where the org's public JWK Set is served.
	JWKSPath = "/.well-known/jwks.json"
	// RPCPath is the JSON-RPC endpoint named in the card.
	RPCPath = "/a2a/v1"
)

// Defaults applied by New to a zero Config.
const (
	// DefaultOrgID is the org id the agent signs as unless configured.
	DefaultOrgID = "demo-supplier"
	// DefaultLedgerID is the ledger id receipts are addressed to unless
	// configured.
	DefaultLedgerID = "quittance"
	// DefaultWorkDelay is how long a procurement task works unless
	// configured: long enough to cancel it by hand.
	DefaultWorkDelay = 2 * time.Minute
)

// Config configures an Agent. Only the zero values noted below are filled
// in by New.
type Config struct {
	// OrgID is the supplier org's id: the "iss" of every receipt it signs.
	// Empty means DefaultOrgID.
	OrgID string
	// LedgerID is the id of the ledger receipts are addressed to (their
	// "aud"). Empty means DefaultLedgerID.
	LedgerID string
	// WorkDelay is how long a procurement task works (with its purchase
	// order committed) before it completes. Zero means DefaultWorkDelay.
	WorkDelay time.Duration
	// Key is the org's Ed25519 signing key. Nil means a fresh key that
	// lives as long as the Agent (see LoadOrCreateKey for a persistent one).
	Key ed25519.PrivateKey
	// BaseURL is the agent's public base URL, such as
	// "http://127.0.0.1:8090", used for the interface URL in its card.
	// Empty means the scheme-less Host of each card request, over http.
	BaseURL string
	// AtomicCancel makes the agent declare atomicCancel in its card and put
	// a compensation receipt in its CancelTask responses.
	AtomicCancel bool
	// PurgeOnCancel makes the agent forget a task as soon as it is asked to
	// cancel it, as an agent with a short retention does: the cancel, and
	// every later call naming the task (GetTask, CancelTask,
	// SubscribeToTask, a compensation request), answer TaskNotFoundError
	// (-32001). The task's purchase order stands. It overrides
	// AtomicCancel: nothing is reversed.
	PurgeOnCancel bool
	// Compensation is how the agent answers compensation requests:
	// CompensationImmediate (or empty) reverses at once; CompensationPending
	// answers with a working task whose receipt is pending, and completes
	// it with the final receipt after PendingDelay; CompensationNotSupported
	// answers not_supported and never reverses.
	Compensation string
	// PendingDelay is how long a pending compensation works before its
	// final receipt. Zero means DefaultPendingDelay.
	PendingDelay time.Duration
	// PushClient delivers push notifications. Nil means a client with a
	// 10-second timeout.
	PushClient *http.Client
	// Log receives the agent's operational log. Nil discards it.
	Log *slog.Logger
	// Now is the agent's clock. Nil means time.Now.
	Now func() time.Time
}

// Agent is the demo supplier's A2A agent. Its methods are safe for
// concurrent use.
type Agent struct {
	cfg Config
	// signer signs the org's receipts: the agent answers compensation
	// requests with the kit a remote org's agent would use.
	signer *kit.Signer
	jwks   []byte
	log    *slog.Logger

	mu          sync.Mutex
	tasks       map[string]*task
	order       []string             // task ids, oldest first
	byMessageID map[string]string    // messageId -> task id
	receipts    map[string]*receipt  // idempotency key -> receipt
	orders      map[string]*purchase // task id -> purchase order
	purged      map[string]bool      // task id -> purged (PurgeOnCancel)
	closed      bool
}

// New returns an agent configured by cfg.
func New(cfg Config) (*Agent, error) {
	if cfg.OrgID == "" {
		cfg.OrgID = DefaultOrgID
	}
	if cfg.LedgerID == "" {
		cfg.LedgerID = DefaultLedgerID
	}
	if cfg.WorkDelay == 0 {
		cfg.WorkDelay = DefaultWorkDelay
	}
	if cfg.WorkDelay < 0 {
		return nil, errors.New("demoagent: negative work delay")
	}
	switch cfg.Compensation {
	case "", CompensationImmediate, CompensationPending, CompensationNotSupported:
	default:
		return nil, fmt.Errorf("demoagent: unknown compensation mode %q (immediate, pending, not_supported)", cfg.Compensation)
	}
	if cfg.PendingDelay == 0 {
		cfg.PendingDelay = DefaultPendingDelay
	}
	if cfg.PendingDelay < 0 {
		return nil, errors.New("demoagent: negative pending delay")
	}
	if cfg.BaseURL != "" {
		cfg.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	}
	if cfg.PushClient == nil {
		cfg.PushClient = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	key := cfg.Key
	if key == nil {
		var err error
		if _, key, err = ed25519.GenerateKey(rand.Reader); err != nil {
			return nil, fmt.Errorf("demoagent: generate key: %w", err)
		}
	}
	if len(key) != ed25519.PrivateKeySize {
		return nil, errors.New("demoagent: malformed Ed25519 key")
	}
	thumb, err := (&jose.JSONWebKey{Key: key.Public()}).Thumbprint(crypto.SHA256)
	if err != nil {
		return nil, fmt.Errorf("demoagent: key thumbprint: %w", err)
	}
	signer, err := kit.NewSigner(kit.SignerConfig{
		OrgID: cfg.OrgID, LedgerID: cfg.LedgerID, KeyID: base64.RawURLEncoding.EncodeToString(thumb), Key: key, Now: cfg.Now,
	})
	if err != nil {
		return nil, fmt.Errorf("demoagent: %w", err)
	}
	jwks, err := signer.JWKS()
	if err != nil {
		return nil, fmt.Errorf("demoagent: encode JWK Set: %w", err)
	}
	return &Agent{
		cfg: cfg, signer: signer, jwks: jwks, log: cfg.Log,
		tasks: map[string]*task{}, byMessageID: map[string]string{},
		receipts: map[string]*receipt{}, orders: map[string]*purchase{}, purged: map[string]bool{},
	}, nil
}

// OrgID returns the org id the agent signs receipts as.
func (a *Agent) OrgID() string { return a.cfg.OrgID }

// JWKS returns the JSON of the public JWK Set that verifies the agent's
// receipts: one Ed25519 key with kid, "use": "sig" and "alg": "EdDSA".
func (a *Agent) JWKS() []byte { return append([]byte(nil), a.jwks...) }

// CardURL returns the URL of the agent card for an agent served at base,
// such as "http://127.0.0.1:8090".
func (a *Agent) CardURL(base string) string { return strings.TrimRight(base, "/") + CardPath }

// Handler returns the agent's HTTP handler: the agent card, the JWK Set and
// the JSON-RPC endpoint.
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+CardPath, a.serveCard)
	mux.HandleFunc("GET "+JWKSPath, a.serveJWKS)
	mux.HandleFunc("POST "+RPCPath, a.serveRPC)
	return mux
}

// Close stops the agent's timers; tasks still working stay working. It
// does not wait for push notifications in flight.
func (a *Agent) Close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	for _, t := range a.tasks {
		if t.timer != nil {
			t.timer.Stop()
		}
	}
}

func (a *Agent) serveJWKS(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/jwk-set+json")
	w.Header().Set("Cache-Control", "max-age=300")
	w.Write(a.jwks)
}

func (a *Agent) serveCard(w http.ResponseWriter, r *http.Request) {
	base := a.cfg.BaseURL
	if base == "" {
		base = "http://" + r.Host
	}
	ext := kit.Extension(a.signer, kit.Params{AtomicCancel: a.cfg.AtomicCancel})
	card := map[string]any{
		"name":        "Demo Supplier",
		"description": "A demo supplier org's procurement agent. It commits a purchase order while it works and reverses it on a compensation request.",
		"version":     "1.0.0",
		"provider":    map[string]any{"organization": a.cfg.OrgID, "url": base},
		"supportedInterfaces": []map[string]any{{
			"url": base + RPCPath, "protocolBinding": "JSONRPC", "protocolVersion": "1.0",
		}},
		"capabilities": map[string]any{
			"streaming": true, "pushNotifications": true, "extensions": []any{ext},
		},
		"defaultInputModes":  []string{"text/plain", "application/json"},
		"defaultOutputModes": []string{"application/json", "text/plain"},
		"skills": []map[string]any{{
			"id":          "procurement",
			"name":        "Procurement",
			"description": "Places a purchase order for the goods described in the request.",
			"tags":        []string{"procurement", "purchase-order"},
			"examples":    []string{"Order 40 laptops for the Lyon office"},
		}},
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Vary", "A2A-Version")
	json.NewEncoder(w).Encode(card)
}

// LoadOrCreateKey returns the Ed25519 key stored in path as a PKCS #8 PEM
// block, creating the file (mode 0600, and its directory) with a fresh key
// when it does not exist.
func LoadOrCreateKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return createKey(path)
	}
	if err != nil {
		return nil, fmt.Errorf("read key file: %w", err)
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("key file %s: not a PEM \"PRIVATE KEY\" block", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("key file %s: %w", path, err)
	}
	key, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("key file %s: not an Ed25519 key", path)
	}
	return key, nil
}

func createKey(path string) (ed25519.PrivateKey, error) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create key directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return LoadOrCreateKey(path) // another process won the race
	}
	if err != nil {
		return nil, fmt.Errorf("create key file: %w", err)
	}
	err = pem.Encode(f, &pem.Block{Type: "PRIVATE KEY", Bytes: der})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("write key file: %w", err)
	}
	return key, nil
}

// newID returns a random identifier with a prefix.
func newID(prefix string) string {
	return prefix + strings.ToLower(rand.Text()[:16])
}

// discard drains and closes a response body.
func discard(rc io.ReadCloser) {
	io.Copy(io.Discard, io.LimitReader(rc, 64<<10))
	rc.Close()
}
