package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quittance/quittance/cmd/quittance/internal/demoagent"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/ledger"
)

// orgKeysServer is an org's own JWKS URL on loopback: it serves the JWK Set
// it is told to and counts the requests it answers.
type orgKeysServer struct {
	*httptest.Server
	mu   sync.Mutex
	doc  []byte
	hits int
}

func newOrgKeysServer(t *testing.T, doc []byte) *orgKeysServer {
	t.Helper()
	s := &orgKeysServer{doc: doc}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.hits++
		w.Header().Set("Content-Type", "application/jwk-set+json")
		_, _ = w.Write(s.doc)
	}))
	t.Cleanup(s.Close)
	return s
}

// serve makes the URL serve doc from now on: the org rotates its keys.
func (s *orgKeysServer) serve(doc []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.doc = doc
}

func (s *orgKeysServer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits
}

// jwksKeyID is the kid of the only key of a JWK Set.
func jwksKeyID(t *testing.T, doc []byte) string {
	t.Helper()
	var set struct {
		Keys []struct {
			KeyID string `json:"kid"`
		} `json:"keys"`
	}
	if err := json.Unmarshal(doc, &set); err != nil || len(set.Keys) != 1 {
		t.Fatalf("JWK Set %s: %v, want one key", doc, err)
	}
	return set.Keys[0].KeyID
}

// receiptKeysEnv is an a2aEnv whose fetches for unknown kids are at least
// kidInterval apart, with the demo agent (configured by cfg) registered as
// an org that requires signed receipts and serves its keys at keys' URL,
// where the agent's own key is not yet served: old's is, and is in force.
// The delegation is dispatched to the agent.
func receiptKeysEnv(t *testing.T, cfg demoagent.Config, w apitest.Worker, kidInterval time.Duration) (*a2aEnv, *demoagent.Agent, *orgKeysServer, httpapi.DelegationBody) {
	t.Helper()
	agent, base := serveDemoAgent(t, cfg)
	old := compensationtest.NewEd25519Signer(t, "key-before-rotation")
	keys := newOrgKeysServer(t, old.JWKS())
	e := newA2AEnv(t, w, apitest.WithOrgJWKSUnknownKidInterval(kidInterval))
	e.must(t, http.MethodPut, "/admin/v1/orgs/"+agent.OrgID(), e.OncallToken, map[string]any{
		"name": "Demo supplier", "agent_card_url": agent.CardURL(base), "allowed_hosts": []string{"127.0.0.1"},
		"jwks_url": keys.URL + "/.well-known/jwks.json", "require_signed_receipts": true,
	}, http.StatusCreated)
	e.must(t, http.MethodPost, "/admin/v1/orgs/"+agent.OrgID()+"/keys/refresh", e.OncallToken, nil, http.StatusOK)
	d := e.dispatch(t, "po-keys", agent.OrgID())
	d = e.waitFor(t, d.ID, "the dispatched task", dispatched)
	return e, agent, keys, d
}

// orgKeysFetched lists the keys added by the org's org_keys_fetched events,
// as "kid thumbprint".
func orgKeysFetched(t *testing.T, e *a2aEnv, orgID string) []string {
	t.Helper()
	rows, err := e.Pool.Query(context.Background(),
		"SELECT data FROM events WHERE stream = $1 AND type = $2 ORDER BY stream_seq", "org:"+orgID, string(ledger.EventTypeOrgKeysFetched))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var added []string
	for rows.Next() {
		var data struct {
			Added []ledger.KeyRef `json:"keys_added"`
		}
		if err := rows.Scan(&data); err != nil {
			t.Fatal(err)
		}
		for _, k := range data.Added {
			added = append(added, k.KeyID)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return added
}

// settled reports whether the obligation is where a compensation ends:
// compensated, or unconfirmed once the requests are exhausted.
func settled(d httpapi.DelegationBody) bool {
	return d.ObligationState == "compensated" || d.ObligationState == "compensation_unconfirmed"
}

// TestA2AReceiptKeyRotatedInAtJWKSURL: an org that serves its keys at a
// JWKS URL rotates a new key in there, and its agent signs its compensation
// receipt with that key — in its answer to the compensation request, or in
// its cancel reply (atomic cancel). The kid no key in force has makes
// Quittance fetch the URL at once (an Env never refreshes keys
// periodically), so the receipt is accepted at its first judgment: the
// obligation is compensated with no failed attempt (straight from held for
// the atomic cancel), and an org_keys_fetched event names the new key.
func TestA2AReceiptKeyRotatedInAtJWKSURL(t *testing.T) {
	t.Parallel()
	for name, atomic := range map[string]bool{"compensation request": false, "atomic cancel": true} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			const kidInterval = 100 * time.Millisecond
			// No push: the cancel reply is the only news of the cancel, so
			// an atomic receipt is always judged with the obligation held.
			e, agent, keys, d := receiptKeysEnv(t, demoagent.Config{AtomicCancel: atomic}, apitest.Worker{NoPush: true}, kidInterval)
			kid := jwksKeyID(t, agent.JWKS())

			// The org rotates: its URL serves the agent's key, the old
			// one no longer. The on-call refresh above was more than an
			// interval ago.
			keys.serve(agent.JWKS())
			time.Sleep(2 * kidInterval)
			before := keys.count()
			e.must(t, http.MethodPost, "/v1/delegations/"+d.ID+"/cancel", e.orch, nil, http.StatusOK)
			d = e.waitFor(t, d.ID, "the compensation to end", settled)
			events := e.events(t, d.ID)
			if d.ObligationState != "compensated" || d.HoldState != "returned" || d.TaskStatus != "canceled" {
				t.Fatalf("after a receipt signed by a key rotated in at the JWKS URL: %+v; events %+v", d, events)
			}
			if n := countEvents(events, ledger.EventTypeCompensationRequestFailed) + countEvents(events, ledger.EventTypeReceiptRefused); n != 0 {
				t.Errorf("%d failed or refused receipts before the key was fetched; events %+v", n, events)
			}
			wantAttempts := 1
			if atomic {
				wantAttempts = 0
				if d.ObligationReason != ledger.ReasonAtomicCompensation {
					t.Errorf("obligation reason %s, want %s: the cancel reply's receipt was not accepted", d.ObligationReason, ledger.ReasonAtomicCompensation)
				}
			}
			if d.Compensation == nil || d.Compensation.Attempts != wantAttempts {
				t.Errorf("compensation %+v, want %d attempts", d.Compensation, wantAttempts)
			}
			if n := keys.count() - before; n != 1 {
				t.Errorf("the JWKS URL was fetched %d times for the receipt, want once", n)
			}
			if added := orgKeysFetched(t, e, agent.OrgID()); !slices.Contains(added, kid) {
				t.Errorf("org_keys_fetched events added %v, want %s among them", added, kid)
			}
			e.CheckInvariants(t)
		})
	}
}

// TestA2AReceiptKidNotServedAtJWKSURL: a receipt signed by a key that the
// org's JWKS URL does not serve either is refused at every attempt, and the
// obligation ends compensation_unconfirmed with its hold; each refused
// receipt asks for a fetch of the URL, but it is fetched at most once per
// QUITTANCE_ORG_JWKS_UNKNOWN_KID_INTERVAL, not once per receipt.
func TestA2AReceiptKidNotServedAtJWKSURL(t *testing.T) {
	t.Parallel()
	const (
		kidInterval = time.Second
		attempts    = 6
	)
	e, _, keys, d := receiptKeysEnv(t, demoagent.Config{}, apitest.Worker{CompensationMaxAttempts: attempts}, kidInterval)
	time.Sleep(kidInterval + 100*time.Millisecond) // past the on-call refresh's interval
	before, start := keys.count(), time.Now()
	e.must(t, http.MethodPost, "/v1/delegations/"+d.ID+"/cancel", e.orch, nil, http.StatusOK)
	d = e.waitFor(t, d.ID, "the compensation to end", settled)
	elapsed := time.Since(start)
	events := e.events(t, d.ID)
	if d.ObligationState != "compensation_unconfirmed" || d.HoldState != "active" || d.Compensation == nil ||
		d.Compensation.Attempts != attempts || !strings.Contains(d.Compensation.LastError, "token_key_unknown") {
		t.Fatalf("after receipts signed by a key the JWKS URL does not serve: %+v; events %+v", d, events)
	}
	if n := countEvents(events, ledger.EventTypeCompensationRequestFailed) + countEvents(events, ledger.EventTypeCompensationRetriesExhausted); n != attempts {
		t.Errorf("%d refused receipts recorded, want %d; events %+v", n, attempts, events)
	}
	got, most := keys.count()-before, 1+int(elapsed/kidInterval)
	if got < 1 || got > most {
		t.Errorf("%d receipts with an unknown kid fetched the JWKS URL %d times in %s, want 1 to %d", attempts, got, elapsed, most)
	}
	e.CheckInvariants(t)
}

// TestOnCallKeyRefreshNamesTheOnCall: the keys a fetch that on-call asked
// for brings in are recorded as that person's doing, not the ledger's: the
// org_keys_fetched event's actor is the on-call principal.
func TestOnCallKeyRefreshNamesTheOnCall(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	keys := newOrgKeysServer(t, compensationtest.NewEd25519Signer(t, "k-1").JWKS())
	e.Do(t, http.MethodPut, "/admin/v1/orgs/org-url", e.OncallToken, map[string]any{
		"name": "Org URL", "jwks_url": keys.URL + "/.well-known/jwks.json",
	}).Expect(t, http.StatusCreated)
	e.Do(t, http.MethodPost, "/admin/v1/orgs/org-url/keys/refresh", e.OncallToken, nil).Expect(t, http.StatusOK)

	var actor, oncall string
	ctx := context.Background()
	if err := e.Pool.QueryRow(ctx, "SELECT actor FROM events WHERE stream = 'org:org-url' AND type = $1", string(ledger.EventTypeOrgKeysFetched)).Scan(&actor); err != nil {
		t.Fatal(err)
	}
	if err := e.Pool.QueryRow(ctx, "SELECT id::text FROM principals WHERE name_key = 'oncall'").Scan(&oncall); err != nil {
		t.Fatal(err)
	}
	if want := "principal:" + oncall; actor != want {
		t.Errorf("the keys on-call fetched are recorded as %q's, want %q", actor, want)
	}
}
