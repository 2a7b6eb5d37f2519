package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quittance/quittance/cmd/quittance/internal/errkind"
	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/ledger"
)

// jwksServer is an org's own JWKS URL on loopback: it serves doc, or fails
// as told, and counts the requests it answers.
type jwksServer struct {
	*httptest.Server
	mu   sync.Mutex
	doc  []byte
	mode string // "", "down" (503) or "garbage"
	hits int
}

func newJWKSServer(t *testing.T, doc []byte) *jwksServer {
	t.Helper()
	s := &jwksServer{doc: doc}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.hits++
		switch s.mode {
		case "down":
			http.Error(w, "maintenance", http.StatusServiceUnavailable)
		case "garbage":
			_, _ = io.WriteString(w, `{"keys": "not a list"}`)
		default:
			w.Header().Set("Content-Type", "application/jwk-set+json")
			_, _ = w.Write(s.doc)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) serve(doc []byte, mode string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.doc, s.mode = doc, mode
}

func (s *jwksServer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits
}

// orgKeyHistory reads `quittance orgs keys history` as kid → in force.
type historyKey struct {
	KeyID      string     `json:"kid"`
	Thumbprint string     `json:"thumbprint"`
	ValidUntil *time.Time `json:"valid_until"`
	InForce    bool       `json:"in_force"`
}

func (e *cliEnv) keyHistory(t *testing.T, token string) []historyKey {
	t.Helper()
	out, errOut, code := e.cli(t, token, "orgs", "keys", "history", "supplier")
	var h struct {
		Keys []historyKey `json:"keys"`
	}
	if err := json.Unmarshal([]byte(out), &h); code != 0 || err != nil {
		t.Fatalf("keys history: exit %d %s %v", code, errOut, err)
	}
	return h.Keys
}

// ackFor signs an ack of the delegation of op with signer.
func (e *cliEnv) ackFor(t *testing.T, orch, id, op string, signer *compensationtest.Signer) string {
	t.Helper()
	var d struct {
		Compensation struct {
			IdempotencyKey string `json:"idempotency_key"`
		} `json:"compensation"`
	}
	if s := e.api(t, http.MethodGet, "/v1/delegations/"+id, orch, nil, &d); s != http.StatusOK {
		t.Fatalf("get delegation: %d", s)
	}
	return signer.Sign(t, "compensation-ack+jwt", compensationtest.AckClaims("supplier", "ledger-cli", "task-"+op, d.Compensation.IdempotencyKey, time.Now()))
}

// TestOrgKeysFromJWKSURL: an org registered by JWKS URL. Setting the URL
// waits for a second on-call principal, and the URL's keys are not in force
// (not even fetched) before. Once approved, a token naming the key the org
// serves is accepted; when the org rotates its key at the URL, a token
// signed with the new key is accepted without any approval, the old key's
// validity ends, and the history and the org's events name both
// thumbprints. A key never served is refused; tokens with random kids do
// not make Quittance fetch on every request; the URL down or serving
// garbage keeps the keys in force, shows the error on the org and counts
// it; verify-chain still verifies the token accepted before the rotation.
func TestOrgKeysFromJWKSURL(t *testing.T) {
	t.Parallel()
	const kidInterval = time.Second
	e := startService(t, "QUITTANCE_EGRESS_ALLOW_HTTP=true", "QUITTANCE_EGRESS_ALLOW_CIDRS=127.0.0.1/32",
		"QUITTANCE_ORG_JWKS_UNKNOWN_KID_INTERVAL="+kidInterval.String(), "QUITTANCE_ORG_JWKS_REFRESH=1h")
	first := compensationtest.NewEd25519Signer(t, "key-2026-01")
	second := compensationtest.NewES256Signer(t, "key-2026-02")
	never := compensationtest.NewEd25519Signer(t, "key-never-served")
	srv := newJWKSServer(t, first.JWKS())
	jwksURL := srv.URL + "/.well-known/jwks.json"

	e.putBudget(t, "ops", 1_000_000, "acme")
	if s := e.api(t, http.MethodPut, "/admin/v1/orgs/supplier", e.oncall, map[string]any{"name": "Supplier"}, nil); s >= 300 {
		t.Fatalf("put org: %d", s)
	}
	orch := e.newToken(t, "--role", "orchestrator", "--tenant", "acme", "--name", "orch")
	finance := e.newToken(t, "--role", "finance", "--name", "fin")

	// Registering the URL is a pending change; nothing is fetched meanwhile.
	out, errOut, code := e.cli(t, e.oncall, "orgs", "keys", "set", "supplier", "--jwks-url", jwksURL)
	if code != 0 || !strings.Contains(out, `"pending_change"`) {
		t.Fatalf("keys set --jwks-url: exit %d %s\n%s", code, errOut, out)
	}
	early := e.pendingDelegation(t, orch, "url-0")
	if s := e.postEvidence(t, "/v1/compensation/acks", e.ackFor(t, orch, early, "url-0", first)); s == http.StatusOK {
		t.Fatal("a token was accepted on a JWKS URL not yet approved")
	}
	if n := srv.count(); n != 0 {
		t.Fatalf("the JWKS URL was fetched %d times before its approval", n)
	}
	if _, errOut, code := e.cli(t, e.oncall, "orgs", "keys", "set", "supplier", "--jwks-url", jwksURL, "--jwks", "x.json"); code != exitUsage {
		t.Errorf("--jwks with --jwks-url: exit %d %s, want 2", code, errOut)
	}
	if s := e.api(t, http.MethodPut, "/admin/v1/orgs/other", e.oncall, map[string]any{
		"name": "Other", "jwks_url": "http://169.254.169.254/latest/meta-data", // not loopback: the egress policy refuses it
	}, nil); s != http.StatusUnprocessableEntity {
		t.Errorf("a JWKS URL the egress policy refuses: %d, want 422", s)
	}
	e.approvePending(t, []byte(out))

	// The key the org serves: fetched on the first token naming it.
	honest := e.compensatedBySignedAck(t, orch, "url-1", first)
	var org struct {
		JWKSURL   string `json:"jwks_url"`
		JWKS      any    `json:"jwks"`
		JWKSFetch struct {
			Keys      json.RawMessage `json:"keys"`
			FetchedAt *time.Time      `json:"fetched_at"`
			Error     string          `json:"error"`
		} `json:"jwks_fetch"`
	}
	out, _, _ = e.cli(t, e.oncall, "orgs", "show", "supplier")
	if err := json.Unmarshal([]byte(out), &org); err != nil || org.JWKSURL != jwksURL || org.JWKS != nil ||
		org.JWKSFetch.FetchedAt == nil || org.JWKSFetch.Error != "" || !strings.Contains(string(org.JWKSFetch.Keys), first.KeyID()) {
		t.Fatalf("orgs show after the first fetch: %v\n%s", err, out)
	}

	// The org rotates at its URL: the new key is accepted, with no approval.
	srv.serve(second.JWKS(), "")
	time.Sleep(kidInterval + 100*time.Millisecond)
	e.compensatedBySignedAck(t, orch, "url-2", second)
	h := e.keyHistory(t, finance)
	if len(h) != 2 || h[0].KeyID != first.KeyID() || h[0].Thumbprint != thumbprintOf(t, first) || h[0].InForce || h[0].ValidUntil == nil ||
		h[1].KeyID != second.KeyID() || h[1].Thumbprint != thumbprintOf(t, second) || !h[1].InForce {
		t.Fatalf("key history after the rotation: %+v", h)
	}
	rows, err := e.query(context.Background(), "SELECT data::text FROM events WHERE stream = 'org:supplier' AND type = 'org_keys_fetched' ORDER BY stream_seq")
	if err != nil {
		t.Fatal(err)
	}
	var fetched []string
	for _, r := range rows {
		var data struct {
			Added   []ledger.KeyRef `json:"keys_added"`
			Removed []ledger.KeyRef `json:"keys_removed"`
		}
		_ = json.Unmarshal([]byte(r), &data)
		for _, k := range data.Added {
			fetched = append(fetched, "+"+k.KeyID+" "+k.Thumbprint)
		}
		for _, k := range data.Removed {
			fetched = append(fetched, "-"+k.KeyID+" "+k.Thumbprint)
		}
	}
	want := []string{"+" + first.KeyID() + " " + thumbprintOf(t, first), "+" + second.KeyID() + " " + thumbprintOf(t, second), "-" + first.KeyID() + " " + thumbprintOf(t, first)}
	if strings.Join(fetched, "|") != strings.Join(want, "|") {
		t.Errorf("org_keys_fetched events name %v, want %v", fetched, want)
	}

	// The old key, no longer served, is refused; so is a key never served.
	for op, signer := range map[string]*compensationtest.Signer{"url-3": first, "url-4": never} {
		id := e.pendingDelegation(t, orch, op)
		if s := e.postEvidence(t, "/v1/compensation/acks", e.ackFor(t, orch, id, op, signer)); s == http.StatusOK {
			t.Errorf("a token signed by %s was accepted", signer.KeyID())
		}
	}

	// Tokens with random kids: at most one fetch per interval, not one each.
	target := e.pendingDelegation(t, orch, "url-5")
	before, start := srv.count(), time.Now()
	for i := range 20 {
		random := compensationtest.NewEd25519Signer(t, "random-"+strconv.Itoa(i))
		if s := e.postEvidence(t, "/v1/compensation/acks", e.ackFor(t, orch, target, "url-5", random)); s == http.StatusOK {
			t.Fatalf("a token with a random kid was accepted")
		}
	}
	if got, most := srv.count()-before, 1+int(time.Since(start)/kidInterval); got > most {
		t.Errorf("20 tokens with random kids fetched the URL %d times in %s, want at most %d", got, time.Since(start), most)
	}

	// The URL down, then serving garbage: the keys in force stay, the error
	// shows on the org, and each failure is counted.
	for _, mode := range []string{"down", "garbage"} {
		srv.serve(second.JWKS(), mode)
		out, errOut, code := e.cli(t, e.oncall, "orgs", "keys", "refresh", "supplier")
		var refreshed struct {
			Org struct {
				JWKSFetch struct {
					Error string `json:"error"`
				} `json:"jwks_fetch"`
			} `json:"org"`
			Removed []ledger.KeyRef `json:"keys_removed"`
		}
		if err := json.Unmarshal([]byte(out), &refreshed); code != 0 || err != nil || refreshed.Org.JWKSFetch.Error == "" || len(refreshed.Removed) != 0 {
			t.Fatalf("refresh with the URL %s: exit %d %s %v\n%s", mode, code, errOut, err, out)
		}
		if h := e.keyHistory(t, finance); len(h) != 2 || !h[1].InForce {
			t.Fatalf("keys after the URL went %s: %+v", mode, h)
		}
		op := "url-" + mode
		e.compensatedBySignedAck(t, orch, op, second)
	}
	resp, err := http.Get(e.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	failed := regexp.MustCompile(`quittance_org_jwks_fetches_total\{outcome="failed"\} (\d+)`).FindSubmatch(metrics)
	if len(failed) != 2 {
		t.Fatalf("no failed-fetch counter in /metrics")
	}
	if n, _ := strconv.Atoi(string(failed[1])); n < 2 {
		t.Errorf("failed fetches counted: %s, want at least 2", failed[1])
	}
	if _, errOut, code := e.cli(t, orch, "orgs", "keys", "refresh", "supplier"); code != errkind.ExitAuth {
		t.Errorf("an orchestrator refreshing keys: exit %d %s, want 4", code, errOut)
	}

	// verify-chain checks the token accepted before the rotation against
	// the key in force then.
	out, errOut, code = e.cli(t, finance, "verify-chain", "--delegation", honest)
	if code != 0 || !strings.Contains(out, "ok\t"+honest) || !strings.Contains(out, "kid "+first.KeyID()+"\tthumbprint "+thumbprintOf(t, first)) {
		t.Fatalf("verify-chain after the rotation: exit %d %s\n%s", code, errOut, out)
	}

	// Back to an inline set is a privileged change again, and ends the
	// URL's keys once approved.
	out, errOut, code = e.cli(t, e.oncall, "orgs", "keys", "set", "supplier", "--jwks", writeTemp(t, never.JWKS()))
	if code != 0 || !strings.Contains(out, `"pending_change"`) {
		t.Fatalf("keys set --jwks: exit %d %s\n%s", code, errOut, out)
	}
	e.approvePending(t, []byte(out))
	h = e.keyHistory(t, finance)
	if len(h) != 3 || h[1].InForce || !h[2].InForce || h[2].KeyID != never.KeyID() {
		t.Fatalf("key history after going inline: %+v", h)
	}
}

func writeTemp(t *testing.T, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestOrgKeysRefreshedPeriodically: with no token at all, the keys an org
// serves at its approved JWKS URL come into force, and a rotation there
// replaces them, at the next QUITTANCE_ORG_JWKS_REFRESH.
func TestOrgKeysRefreshedPeriodically(t *testing.T) {
	t.Parallel()
	e := startService(t, "QUITTANCE_EGRESS_ALLOW_HTTP=true", "QUITTANCE_EGRESS_ALLOW_CIDRS=127.0.0.1/32",
		"QUITTANCE_ORG_JWKS_REFRESH=200ms")
	first := compensationtest.NewEd25519Signer(t, "periodic-1")
	second := compensationtest.NewEd25519Signer(t, "periodic-2")
	srv := newJWKSServer(t, first.JWKS())
	var registered json.RawMessage
	if s := e.api(t, http.MethodPut, "/admin/v1/orgs/supplier", e.oncall, map[string]any{
		"name": "Supplier", "jwks_url": srv.URL + "/jwks.json",
	}, &registered); s != http.StatusAccepted {
		t.Fatalf("put org: %d %s", s, registered)
	}
	e.approvePending(t, registered)
	waitForKeys := func(want string) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			var inForce []string
			for _, k := range e.keyHistory(t, e.oncall) {
				if k.InForce {
					inForce = append(inForce, k.KeyID)
				}
			}
			if strings.Join(inForce, ",") == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("keys in force %v, want %s", inForce, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitForKeys(first.KeyID())
	srv.serve(second.JWKS(), "")
	waitForKeys(second.KeyID())
}
