package httpapi_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/compensation/compensationtest"
	qa2a "github.com/quittance/quittance/delegate/a2a"
	"github.com/quittance/quittance/ledger"
)

// These tests run signed agent cards (ledger/DESIGN.md §4.1) through the
// API and the A2A worker: a card server on loopback serves, per path, a
// card pointing at an a2a-go v0.3.3 peer, signed (or not) as the test says
// at that moment; Quittance fetches it as it does every card.

// signedCard is what the card server serves at one path.
type signedCard struct {
	signer *compensationtest.Signer // nil: unsigned
	jku    string
	params map[string]any
}

// cardServer serves agent cards for one peer's JSON-RPC endpoint.
type cardServer struct {
	srv    *httptest.Server
	rpcURL string
	mu     sync.Mutex
	cards  map[string]signedCard
	jwks   []byte // served at /jwks
}

func newCardServer(t *testing.T, rpcURL string) *cardServer {
	t.Helper()
	s := &cardServer{rpcURL: rpcURL, cards: map[string]signedCard{}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skipf("cannot listen on loopback: %v", err)
	}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve(t)))
	s.srv.Listener.Close()
	s.srv.Listener = l
	s.srv.Start()
	t.Cleanup(s.srv.Close)
	return s
}

func (s *cardServer) set(path string, c signedCard) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cards[path] = c
}

func (s *cardServer) url(path string) string { return s.srv.URL + path }

func (s *cardServer) serve(t *testing.T) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		c, ok := s.cards[r.URL.Path]
		jwks := s.jwks
		s.mu.Unlock()
		if r.URL.Path == "/jwks" {
			_, _ = w.Write(jwks)
			return
		}
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(s.card(t, c))
	}
}

// card is the v0.3 card of the peer, with the compensation extension's
// params and, when c has a signer, its AgentCardSignature.
func (s *cardServer) card(t *testing.T, c signedCard) []byte {
	card := map[string]any{
		"name": "Supplier", "description": "sells pallets", "url": s.rpcURL, "preferredTransport": "JSONRPC",
		"protocolVersion": "0.3.0", "version": "1.0.0",
		"capabilities": map[string]any{
			"pushNotifications": true,
			"extensions":        []any{map[string]any{"uri": compensation.ExtensionURI, "params": c.params}},
		},
		"defaultInputModes": []string{"text"}, "defaultOutputModes": []string{"text"},
		"skills": []any{map[string]any{"id": "buy", "name": "buy", "description": "buy", "tags": []string{"buy"}}},
	}
	raw, err := json.Marshal(card)
	if err != nil {
		t.Error(err)
	}
	if c.signer == nil {
		return raw
	}
	payload, err := qa2a.CardSigningPayload(raw)
	if err != nil {
		t.Error(err)
	}
	header := map[string]any{"alg": string(c.signer.Algorithm()), "kid": c.signer.KeyID(), "typ": "JOSE"}
	if c.jku != "" {
		header["jku"] = c.jku
	}
	h, _ := json.Marshal(header)
	parts := strings.Split(c.signer.SignRaw(h, payload), ".")
	card["signatures"] = []any{map[string]any{"protected": parts[0], "signature": parts[2]}}
	raw, _ = json.Marshal(card)
	return raw
}

func jwksMap(t *testing.T, signers ...*compensationtest.Signer) map[string]any {
	t.Helper()
	var out map[string]any
	keys := make([]any, 0, len(signers))
	for _, s := range signers {
		var k map[string]any
		if err := json.Unmarshal(mustJSON(t, s.PublicJWK()), &k); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	out = map[string]any{"keys": keys}
	return out
}

// org gets an org through the API.
func (e *a2aEnv) org(t *testing.T, id string) httpapi.OrgBody {
	t.Helper()
	var o httpapi.OrgBody
	e.Do(t, http.MethodGet, "/admin/v1/orgs/"+id, e.OncallToken, nil).Expect(t, http.StatusOK).JSON(t, &o)
	return o
}

// waitCard polls the org until its card status is want.
func (e *a2aEnv) waitCard(t *testing.T, id, want string) httpapi.OrgBody {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second) // a loaded CI machine's worker can lag
	for {
		o := e.org(t, id)
		if o.AgentCard.Status == want {
			return o
		}
		if time.Now().After(deadline) {
			t.Fatalf("org %s's card is %+v, want status %s", id, o.AgentCard, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *a2aEnv) orgEventTypes(t *testing.T, id string) []string {
	t.Helper()
	rows, err := e.Pool.Query(context.Background(), "SELECT type FROM events WHERE stream = $1 ORDER BY stream_seq", "org:"+id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var typ string
		if err := rows.Scan(&typ); err != nil {
			t.Fatal(err)
		}
		out = append(out, typ)
	}
	return out
}

func thumbprint(t *testing.T, s *compensationtest.Signer) string {
	t.Helper()
	tp, err := ledger.JWKThumbprint(mustJSON(t, s.PublicJWK()))
	if err != nil {
		t.Fatal(err)
	}
	return tp
}

// A signed card verifies and pins its key and params; a change of params
// or key holds the card (and the dispatches to it) until one on-call
// person accepts it and another approves; self-approval is refused.
func TestSignedAgentCardPinnedAndChangeApproved(t *testing.T) {
	t.Parallel()
	peer := startV03Peer(t, &v03Peer{}, "127.0.0.1")
	cards := newCardServer(t, peer.srv.URL+"/rpc")
	k1, k2 := compensationtest.NewEd25519Signer(t, "card-1"), compensationtest.NewES256Signer(t, "card-2")
	cards.set("/card", signedCard{signer: k1, params: map[string]any{"atomicCancel": false}})
	e := newA2AEnv(t, apitest.Worker{CardTTL: time.Nanosecond, DispatchMaxAttempts: 1000})
	e.must(t, http.MethodPut, "/admin/v1/orgs/supplier", e.OncallToken, map[string]any{
		"name": "Supplier", "agent_card_url": cards.url("/card"), "allowed_hosts": []string{"127.0.0.1"},
		"jwks": jwksMap(t, k1, k2), "require_signed_card": true,
	}, http.StatusCreated)
	if o := e.org(t, "supplier"); o.AgentCard.Status != "unchecked" || !o.RequireSignedCard || o.AgentCard.Pinned != nil {
		t.Fatalf("registered org = %+v", o)
	}

	d := e.dispatch(t, "po-1", "supplier")
	e.waitFor(t, d.ID, "the dispatched task", dispatched)
	o := e.waitCard(t, "supplier", "verified")
	if c := o.AgentCard; !c.Used || c.KeyID != "card-1" || c.Thumbprint != thumbprint(t, k1) || c.Pinned == nil ||
		c.Pinned.Thumbprint != c.Thumbprint || string(mustJSON(t, c.Pinned.CompensationParams)) != `{"atomicCancel":false}` {
		t.Fatalf("verified card = %+v", c)
	}

	// The org changes its compensation params: held.
	cards.set("/card", signedCard{signer: k1, params: map[string]any{"atomicCancel": true}})
	d2 := e.dispatch(t, "po-2", "supplier")
	o = e.waitCard(t, "supplier", "change_awaiting_approval")
	if o.AgentCard.Used || !strings.Contains(o.AgentCard.Reason, "compensation extension params") {
		t.Fatalf("changed card = %+v", o.AgentCard)
	}
	time.Sleep(200 * time.Millisecond)
	if got := e.get(t, d2.ID); dispatched(got) || len(peer.received()) != 1 {
		t.Fatalf("a dispatch went to a held card: %+v; peer received %v", got, peer.received())
	}

	alice, bob := e.TwoOncall(t, "alice", "bob")
	var asked httpapi.OrgBody
	e.Do(t, http.MethodPost, "/admin/v1/orgs/supplier/agent-card/accept", alice.Token, nil).Expect(t, http.StatusAccepted).JSON(t, &asked)
	pc := asked.AgentCard.PendingChange
	if pc == nil || pc.Kind != string(ledger.ChangeOrgCardAccept) {
		t.Fatalf("accept answer = %+v", asked.AgentCard)
	}
	e.Do(t, http.MethodPost, "/admin/v1/pending-changes/"+pc.ID+"/approve", alice.Token, nil).Problem(t, http.StatusForbidden, "self_approval")
	if o := e.org(t, "supplier"); o.AgentCard.Used {
		t.Fatalf("card used before a second person approved: %+v", o.AgentCard)
	}
	e.Approve(t, bob.Token, pc.ID)
	o = e.org(t, "supplier")
	if c := o.AgentCard; c.Status != "verified" || !c.Used || string(mustJSON(t, c.Pinned.CompensationParams)) != `{"atomicCancel":true}` {
		t.Fatalf("accepted card = %+v", c)
	}
	e.waitFor(t, d2.ID, "the held dispatch, sent once approved", dispatched)

	// The org signs with another of its keys: held again.
	cards.set("/card", signedCard{signer: k2, params: map[string]any{"atomicCancel": true}})
	d3 := e.dispatch(t, "po-3", "supplier")
	o = e.waitCard(t, "supplier", "change_awaiting_approval")
	if c := o.AgentCard; c.KeyID != "card-2" || c.Thumbprint != thumbprint(t, k2) || c.Pinned.Thumbprint != thumbprint(t, k1) {
		t.Fatalf("card signed with another key = %+v", c)
	}
	time.Sleep(200 * time.Millisecond)
	if got := e.get(t, d3.ID); dispatched(got) {
		t.Fatalf("a dispatch went to a card signed with an unpinned key: %+v", got)
	}
	types := strings.Join(e.orgEventTypes(t, "supplier"), " ")
	for _, want := range []string{"org_card_checked", "org_card_change_detected", "org_card_accepted"} {
		if !strings.Contains(types, want) {
			t.Errorf("org events %s lack %s", types, want)
		}
	}
	e.Do(t, http.MethodPost, "/admin/v1/orgs/nobody/agent-card/accept", alice.Token, nil).Problem(t, http.StatusNotFound, "")
}

// A forged signature, a jku on a host the org does not allow, and an
// unsigned card where a signed one is required: the card is not used,
// nothing is sent, and the org shows why. A jku on an allowed host
// verifies, and so does a key the org just published at its JWKS URL.
func TestAgentCardRefusals(t *testing.T) {
	t.Parallel()
	peer := startV03Peer(t, &v03Peer{}, "127.0.0.1")
	cards := newCardServer(t, peer.srv.URL+"/rpc")
	registered := compensationtest.NewEd25519Signer(t, "card-1")
	forger := compensationtest.NewEd25519Signer(t, "card-1") // same kid, another key
	remote := compensationtest.NewES256Signer(t, "remote-1")
	cards.jwks = remote.JWKS()
	cards.set("/forged", signedCard{signer: forger})
	cards.set("/jku", signedCard{signer: remote, jku: cards.url("/jwks")})
	cards.set("/unsigned", signedCard{})
	cards.set("/by-url", signedCard{signer: remote})
	e := newA2AEnv(t, apitest.Worker{})
	put := func(id, path string, extra map[string]any) {
		body := map[string]any{"name": id, "agent_card_url": cards.url(path), "allowed_hosts": []string{"127.0.0.1"}}
		for k, v := range extra {
			body[k] = v
		}
		e.must(t, http.MethodPut, "/admin/v1/orgs/"+id, e.OncallToken, body, http.StatusCreated)
	}
	put("forged", "/forged", map[string]any{"jwks": jwksMap(t, registered)})
	put("jku-refused", "/jku", map[string]any{"jwks": jwksMap(t, registered), "card_jku_hosts": []string{"localhost"}})
	put("unsigned", "/unsigned", map[string]any{"require_signed_card": true})
	put("jku-allowed", "/jku", map[string]any{"card_jku_hosts": []string{"127.0.0.1"}})
	// Keys by JWKS URL, not fetched yet: the card's kid makes the URL be
	// fetched at once.
	put("by-url", "/by-url", map[string]any{"jwks_url": cards.url("/jwks")})

	var held []httpapi.DelegationBody
	for _, org := range []string{"forged", "jku-refused", "unsigned"} {
		held = append(held, e.dispatch(t, "po-"+org, org))
	}
	checks := map[string]string{"forged": "signature_invalid", "jku-refused": "card_jku_hosts", "unsigned": "requiring a signed agent card"}
	for org, reason := range checks {
		want := "failed"
		if org == "unsigned" {
			want = "unsigned"
		}
		o := e.waitCard(t, org, want)
		if o.AgentCard.Used || !strings.Contains(o.AgentCard.Reason, reason) || o.AgentCard.Pinned != nil {
			t.Errorf("org %s's card = %+v, want not used because of %q", org, o.AgentCard, reason)
		}
	}
	for _, org := range []string{"jku-allowed", "by-url"} {
		ok := e.dispatch(t, "po-ok-"+org, org)
		e.waitFor(t, ok.ID, "the dispatch to a verified card", dispatched)
		if o := e.org(t, org); o.AgentCard.Status != "verified" || o.AgentCard.Thumbprint != thumbprint(t, remote) {
			t.Fatalf("org %s's card = %+v", org, o.AgentCard)
		}
	}
	time.Sleep(200 * time.Millisecond)
	for _, d := range held {
		if got := e.get(t, d.ID); dispatched(got) {
			t.Errorf("delegation %s to org %s was dispatched to a card that is not used", d.ID, d.OrgID)
		}
	}
	if got := peer.received(); len(got) != 2 {
		t.Fatalf("peer received %d messages, want the two to verified cards only", len(got))
	}
}
