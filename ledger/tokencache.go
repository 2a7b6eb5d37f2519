package ledger

import (
	"sync"
	"time"
)

// tokenCacheTTL is how long an authenticated token is trusted without
// asking the database again. Every API request authenticates, so this
// saves a round trip on each; a token revoked in the database stops working
// within this time.
const tokenCacheTTL = 10 * time.Second

// tokenCacheMax bounds the cache; when full it is emptied, not evicted
// entry by entry, which is simple and enough for a few thousand clients.
const tokenCacheMax = 10_000

// tokenCache remembers recently authenticated principals by token hash.
// Only successful lookups are cached, so a new token works at once.
type tokenCache struct {
	mu      sync.Mutex
	entries map[string]cachedPrincipal
}

type cachedPrincipal struct {
	principal Principal
	until     time.Time
}

func (c *tokenCache) get(hash []byte, now time.Time) (Principal, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[string(hash)]
	if !ok || now.After(e.until) {
		return Principal{}, false
	}
	return e.principal, true
}

func (c *tokenCache) put(hash []byte, p Principal, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil || len(c.entries) >= tokenCacheMax {
		c.entries = make(map[string]cachedPrincipal)
	}
	c.entries[string(hash)] = cachedPrincipal{principal: p, until: now.Add(tokenCacheTTL)}
}
