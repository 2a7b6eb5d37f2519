package access

import (
	"sync"
	"time"

	"github.com/quittance/quittance/ledger"
)

// tokenCacheTTL is how long an authenticated credential is trusted without
// asking the database again. Every API request authenticates, so this
// saves a round trip on each. A revocation does not wait for it: the
// cache is used only while the service listens for credential changes
// (WatchCredentials) on a connection proven alive within
// credentialWatchTrust, and each change empties it.
const tokenCacheTTL = 10 * time.Second

// credentialWatchTrust is how long after the listener last proved its
// connection alive the cache still answers: past it, a revocation could
// have gone unheard. Four CredentialWatchIntervals, so that a slow proof
// or two on a loaded machine do not turn the cache off.
const credentialWatchTrust = 4 * CredentialWatchInterval

// tokenCacheMax bounds the cache; when full it is emptied, not evicted
// entry by entry, which is simple and enough for a few thousand clients.
const tokenCacheMax = 10_000

// tokenCache remembers recently authenticated principals by token hash.
// Only successful lookups are cached, so a new token works at once. It
// answers nothing while disabled, nor while the listener has not proven
// itself within credentialWatchTrust: when no one hears revocations, a
// cached credential could outlive its revocation.
type tokenCache struct {
	mu      sync.Mutex
	enabled bool
	// provenAt is when the listener last proved its connection alive, in
	// the process's own monotonic time (time.Now), never the service's
	// clock: the question is how long this connection has been silent in
	// real time, whatever time the ledger's clock says it is.
	provenAt time.Time
	// gen counts invalidations; a lookup that started before one must not
	// fill the cache with what it read.
	gen     uint64
	entries map[string]cachedPrincipal
}

type cachedPrincipal struct {
	principal ledger.Principal
	until     time.Time
}

func (c *tokenCache) get(hash []byte, now time.Time) (ledger.Principal, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.enabled || time.Since(c.provenAt) > credentialWatchTrust {
		return ledger.Principal{}, false
	}
	e, ok := c.entries[string(hash)]
	if !ok || !now.Before(e.until) {
		return ledger.Principal{}, false
	}
	return e.principal, true
}

// generation is the invalidation count to pass to put.
func (c *tokenCache) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// put caches p until its credential expires or the TTL passes, unless the
// cache was invalidated since gen was read.
func (c *tokenCache) put(hash []byte, p ledger.Principal, now time.Time, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.enabled || gen != c.gen {
		return
	}
	if c.entries == nil || len(c.entries) >= tokenCacheMax {
		c.entries = make(map[string]cachedPrincipal)
	}
	until := now.Add(tokenCacheTTL)
	if !p.CredentialExpiresAt.IsZero() && p.CredentialExpiresAt.Before(until) {
		until = p.CredentialExpiresAt
	}
	c.entries[string(hash)] = cachedPrincipal{principal: p, until: until}
}

// prove records that the listener has just proven its connection alive,
// and turns the cache on. (It turned off, and emptied, when a listener's
// connection last ended; no lookup started before that can fill it.)
func (c *tokenCache) prove() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.enabled = true
	c.provenAt = time.Now()
}

// invalidate empties the cache; enabled says whether it may fill again.
func (c *tokenCache) invalidate(enabled bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.enabled = enabled
	c.entries = nil
}

// flush empties the cache and leaves it on or off as it was: after this
// replica revoked something, so it does not wait for its own notification.
func (c *tokenCache) flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.entries = nil
}
