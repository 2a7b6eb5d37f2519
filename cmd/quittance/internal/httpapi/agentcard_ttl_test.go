package httpapi_test

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/compensation/compensationtest"
)

// aheadClock is the system clock moved forward by a settable offset: the
// service runs in real time, and a test can jump past a cache's lifetime.
type aheadClock struct{ ahead atomic.Int64 }

func (c *aheadClock) Now() time.Time { return time.Now().Add(time.Duration(c.ahead.Load())) }

// A card that changes while a checked copy is cached is noticed when the
// cache's lifetime (the worker's CardTTL, 5 minutes by default) ends: until
// then dispatches go to the card that was checked and pinned, after it the
// changed card is held for approval and nothing is sent.
func TestCardChangeNoticedWithinCardTTL(t *testing.T) {
	t.Parallel()
	peer := startV03Peer(t, &v03Peer{}, "127.0.0.1")
	cards := newCardServer(t, peer.srv.URL+"/rpc")
	key := compensationtest.NewEd25519Signer(t, "card-1")
	cards.set("/card", signedCard{signer: key, params: map[string]any{"atomicCancel": false}})
	clock := &aheadClock{}
	e := newA2AEnv(t, apitest.Worker{DispatchMaxAttempts: 1000}, apitest.WithClock(clock))
	e.must(t, http.MethodPut, "/admin/v1/orgs/supplier", e.OncallToken, map[string]any{
		"name": "Supplier", "agent_card_url": cards.url("/card"), "allowed_hosts": []string{"127.0.0.1"},
		"jwks": jwksMap(t, key), "require_signed_card": true,
	}, http.StatusCreated)

	e.waitFor(t, e.dispatch(t, "po-1", "supplier").ID, "the dispatched task", dispatched)
	e.waitCard(t, "supplier", "verified")

	// Within the card's lifetime the checked copy is used.
	cards.set("/card", signedCard{signer: key, params: map[string]any{"atomicCancel": true}})
	clock.ahead.Store(int64(4 * time.Minute))
	e.waitFor(t, e.dispatch(t, "po-2", "supplier").ID, "a task dispatched on the cached card", dispatched)
	if o := e.org(t, "supplier"); o.AgentCard.Status != "verified" || !o.AgentCard.Used {
		t.Fatalf("card within its lifetime = %+v", o.AgentCard)
	}

	// Past it, the changed card is fetched, checked and held.
	clock.ahead.Store(int64(5*time.Minute + time.Second))
	d3 := e.dispatch(t, "po-3", "supplier")
	if o := e.waitCard(t, "supplier", "change_awaiting_approval"); o.AgentCard.Used {
		t.Fatalf("changed card = %+v", o.AgentCard)
	}
	time.Sleep(200 * time.Millisecond)
	if got := e.get(t, d3.ID); dispatched(got) || len(peer.received()) != 2 {
		t.Fatalf("a dispatch went to a held card: %+v; peer received %v", got, peer.received())
	}
}
