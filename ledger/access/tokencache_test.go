package access

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/ledger"
)

// TestTokenCache: the authentication cache answers only while a listener
// has proven itself, never with what a lookup read before an
// invalidation, and never past the credential's expiry or tokenCacheTTL.
func TestTokenCache(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	hash := HashToken("qt_secret")
	p := ledger.Principal{ID: uuid.New(), Role: ledger.RoleFinance}

	var c tokenCache
	c.put(hash, p, now, c.generation())
	if _, ok := c.get(hash, now); ok {
		t.Fatal("a cache no listener proved answers")
	}

	c.prove()
	gen := c.generation()
	c.put(hash, p, now, gen)
	if got, ok := c.get(hash, now); !ok || got.ID != p.ID {
		t.Fatalf("get = %v, %v; want the principal put", got, ok)
	}
	if _, ok := c.get(hash, now.Add(tokenCacheTTL)); ok {
		t.Fatal("an entry answers past tokenCacheTTL")
	}

	c.flush()
	if _, ok := c.get(hash, now); ok {
		t.Fatal("a flushed cache answers")
	}
	c.put(hash, p, now, gen)
	if _, ok := c.get(hash, now); ok {
		t.Fatal("a lookup started before the flush filled the cache")
	}

	expiring := p
	expiring.CredentialExpiresAt = now.Add(time.Second)
	c.put(hash, expiring, now, c.generation())
	if _, ok := c.get(hash, now.Add(time.Second)); ok {
		t.Fatal("an entry answers past its credential's expiry")
	}

	c.invalidate(false)
	c.put(hash, p, now, c.generation())
	if _, ok := c.get(hash, now); ok {
		t.Fatal("a cache turned off answers")
	}
}
