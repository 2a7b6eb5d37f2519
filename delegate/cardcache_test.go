package delegate

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quittance/quittance/delegate/a2a"
	"github.com/quittance/quittance/ledger"
)

type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time { return c.t }

// A card's first verified check pins it, so the org read before the check
// has no pin and the next one has: the cached card still serves until its
// lifetime ends. A pin of another card (on-call accepted a change) does not
// take the cached one.
func TestCardCacheKeepsTheCardItsCheckPinned(t *testing.T) {
	t.Parallel()
	var fetches atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fetches.Add(1)
		_ = json.NewEncoder(w).Encode(map[string]any{"name": "supplier", "url": "http://127.0.0.1/rpc", "protocolVersion": "0.3.0"})
	}))
	t.Cleanup(srv.Close)
	now := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
	cache := newCardCache(srv.Client(), fixedClock{now}, 5*time.Minute)
	seen := ledger.CardObservation{Signed: true, Verified: true, KeyID: "card-1", Thumbprint: "tp-1", CompensationParams: json.RawMessage(`{}`)}
	check := func(a2a.AgentCard) (ledger.CardObservation, error) { return seen, nil }
	org := ledger.Org{ID: "supplier", AgentCardURL: srv.URL + "/card", AllowedHosts: []string{"127.0.0.1"}}
	get := func(org ledger.Org) {
		t.Helper()
		if _, err := cache.get(context.Background(), org, check); err != nil {
			t.Fatal(err)
		}
	}

	get(org)
	org.CardPin = ledger.CardPin{KeyID: "card-1", Thumbprint: "tp-1", CompensationParams: json.RawMessage(`{ }`), PinnedAt: now}
	get(org)
	if n := fetches.Load(); n != 1 {
		t.Fatalf("the card its own check pinned was fetched again: %d fetches", n)
	}
	org.CardPin = ledger.CardPin{KeyID: "card-2", Thumbprint: "tp-2", PinnedAt: now.Add(time.Minute)}
	get(org)
	if n := fetches.Load(); n != 2 {
		t.Fatalf("a cached card was used against another card's pin: %d fetches", n)
	}
}
