package httpapi_test

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/compensation/compensationtest"
)

// TestRefusalsAnsweredInEqualTime: with a refusal time set, every posted
// token refused without a reason told is answered that long after it
// arrived, whatever work its refusal took — none for a garbage token, a
// signature check against an org's 4096-bit RSA key, a fetch of an org's
// JWKS URL for an unknown kid, or a fetch that would take far longer than
// the refusal time (it is given up) — so response times do not tell which
// orgs, keys and tasks exist. A token whose kid the org has just rotated
// in at its URL is still fetched and accepted within that time.
func TestRefusalsAnsweredInEqualTime(t *testing.T) {
	t.Parallel()
	// Long enough for the rotated-in key's fetch on a loaded machine (the
	// fetch is bounded by it), far short of the slow server's 10 s.
	const refusalTime = 2 * time.Second
	e := newCompEnv(t, apitest.WithEvidenceRefusalTime(refusalTime))
	real := e.pending(t, orgB, 1_000)
	revoked := e.pending(t, orgC, 1_000)
	e.Do(t, http.MethodPost, "/admin/v1/orgs/"+orgC+"/revoke-identity", e.OncallToken, map[string]any{"reason": "key leaked"}).Expect(t, http.StatusOK)

	// An org whose only key is a 4096-bit RSA key: checking a signature
	// with it costs more than with the decoy.
	big, err := rsa.GenerateKey(rand.Reader, 4096)
	if err != nil {
		t.Fatal(err)
	}
	e.putOrg(t, "org-rsa", compensationtest.JWKS(jose.JSONWebKey{Key: &big.PublicKey, KeyID: "big", Algorithm: string(jose.PS256), Use: "sig"}))
	rsaTask := e.pending(t, "org-rsa", 1_000)

	// Orgs serving their keys at a URL: one answers at once without the
	// token's kid, one would answer only after the refusal time, and one
	// has rotated the token's key in.
	rotated := compensationtest.NewEd25519Signer(t, "rotated-in")
	putURLOrg := func(id string, delay time.Duration, doc []byte) {
		keys := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-time.After(delay):
			case <-r.Context().Done():
				return
			}
			w.Header().Set("Content-Type", "application/jwk-set+json")
			_, _ = w.Write(doc)
		}))
		t.Cleanup(keys.Close)
		e.Do(t, http.MethodPut, "/admin/v1/orgs/"+id, e.OncallToken, map[string]any{
			"name": "Org " + id, "jwks_url": keys.URL + "/.well-known/jwks.json",
		}).Expect(t, http.StatusCreated)
	}
	other := compensationtest.NewEd25519Signer(t, "some-other-key")
	putURLOrg("org-url-fast", 0, other.JWKS())
	putURLOrg("org-url-slow", 10*time.Second, rotated.JWKS())
	putURLOrg("org-url-rotated", 0, rotated.JWKS())
	fastTask, slowTask, rotatedTask := e.pending(t, "org-url-fast", 1_000), e.pending(t, "org-url-slow", 1_000), e.pending(t, "org-url-rotated", 1_000)

	forger := compensationtest.NewEd25519Signer(t, e.b.KeyID())
	refused := map[string]string{
		"garbage":                      "garbage." + strings.Repeat("A", 40) + ".x",
		"unregistered org":             forger.Sign(t, ackTyp, with(e.ackClaims(real), "iss", "org-nobody")),
		"forged key, real task":        forger.Sign(t, ackTyp, e.ackClaims(real)),
		"real key, unknown task":       e.b.Sign(t, ackTyp, with(e.ackClaims(real), "sub", "task-that-does-not-exist")),
		"revoked org":                  e.c.Sign(t, ackTyp, e.ackClaims(revoked)),
		"4096-bit RSA org, wrong key":  compensationtest.NewPS256Signer(t, "big").Sign(t, ackTyp, e.ackClaims(rsaTask)),
		"JWKS URL org, unknown kid":    rotated.Sign(t, ackTyp, e.ackClaims(fastTask)),
		"JWKS URL org, slow fetch":     rotated.Sign(t, ackTyp, e.ackClaims(slowTask)),
		"JWKS URL org, key rotated in": rotated.Sign(t, ackTyp, e.ackClaims(rotatedTask)),
	}

	type answer struct {
		status int
		code   string
		took   time.Duration
	}
	var (
		mu      sync.Mutex
		answers = map[string]answer{}
		wg      sync.WaitGroup
	)
	for name, token := range refused {
		wg.Go(func() {
			start := time.Now()
			r := e.post(t, acksPath, token)
			took := time.Since(start)
			var p struct {
				Code string `json:"code"`
			}
			_ = json.Unmarshal(r.Body, &p)
			mu.Lock()
			answers[name] = answer{r.Status, p.Code, took}
			mu.Unlock()
		})
	}
	wg.Wait()

	for name, a := range answers {
		if name == "JWKS URL org, key rotated in" {
			if a.status != http.StatusOK {
				t.Errorf("%s: status %d (%s), want the ack accepted", name, a.status, a.code)
			}
			continue
		}
		if a.status != http.StatusUnauthorized || a.code != "token_refused" {
			t.Errorf("%s: status %d code %q, want 401 token_refused", name, a.status, a.code)
		}
		// Never sooner than the refusal time; never as late as the slow
		// fetch would have made it (the margin is for a loaded machine).
		if a.took < refusalTime || a.took > refusalTime+3*time.Second {
			t.Errorf("%s: answered after %v, want %v", name, a.took, refusalTime)
		}
	}
	if got := e.state(t, rotatedTask.ID).Obligation; got != "compensated" {
		t.Errorf("the ack signed with the rotated-in key left the obligation %s", got)
	}
	e.CheckInvariants(t)
}
