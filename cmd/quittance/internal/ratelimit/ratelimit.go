package ratelimit

import (
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"golang.org/x/time/rate"
)

// Config configures the limits. A zero RPS disables them.
type Config struct {
	// RPS is the sustained rate of each bucket, in requests per second.
	RPS float64
	// Burst is the bucket size: how many requests may arrive at once
	// (RPS rounded up when zero).
	Burst int
	// ClientIPHeader, when set, names the header a trusted load balancer
	// puts the client's address in. For X-Forwarded-For its right-most
	// entry is used, the one the balancer appended, so entries a client
	// sends itself are ignored; any other header must hold one address.
	// A value that is not an IP address counts as absent: the connection's
	// peer is the client. Unset, the connection's peer is the client.
	ClientIPHeader string
	// MaxBuckets bounds the number of buckets kept in each of the
	// limiter's three tables (DefaultMaxBuckets when zero): when that many
	// are in use, every new key of the table shares the table's overflow
	// bucket until idle buckets are swept, so memory stays bounded and a
	// flood from ever new addresses is still limited, without reaching
	// principals' buckets.
	MaxBuckets int
}

// DefaultMaxBuckets is the bound on buckets when Config.MaxBuckets is
// zero: a bucket takes about 200 bytes, so some 20 MB per table at most.
const DefaultMaxBuckets = 100_000

// Limiter is a set of token buckets, one per principal and one per client
// address. A nil *Limiter limits nothing. It is safe for concurrent use.
//
// The buckets are kept in three tables, each bounded by MaxBuckets with an
// overflow bucket of its own, so that a flood from ever new addresses,
// which fills only the table of anonymous addresses, never takes a bucket
// from a principal: principals' buckets; the buckets of addresses a
// credential was proven from (a principal whose credential is no longer
// in the authentication cache is looked up from there); and the buckets
// of every other address. Only a valid credential adds to the first two.
type Limiter struct {
	limit    rate.Limit
	burst    int
	ipHeader string
	log      *slog.Logger
	now      func() time.Time
	// idle is how long a bucket goes unused before it is full again, and
	// so no different from a new one.
	idle time.Duration

	mu         sync.Mutex
	principals *table
	proven     *table // addresses a principal's credential was proven from
	addresses  *table // every other address
}

// table is one bounded set of buckets.
type table struct {
	max      int
	buckets  map[string]*bucket
	overflow *bucket
	swept    time.Time
}

type bucket struct {
	l    *rate.Limiter
	last time.Time
	// held counts the tokens held by lookups not yet settled: they are
	// not available to other requests, and a bucket with any is never
	// swept.
	held int
}

// New builds the limiter of cfg; nil when cfg.RPS is not positive. log
// receives debug messages about unusable client address headers (nil
// discards them); now tells the time.
func New(cfg Config, log *slog.Logger, now func() time.Time) *Limiter {
	if cfg.RPS <= 0 {
		return nil
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	burst := cfg.Burst
	if burst < 1 {
		burst = int(math.Max(1, math.Ceil(cfg.RPS)))
	}
	maxBuckets := cfg.MaxBuckets
	if maxBuckets < 1 {
		maxBuckets = DefaultMaxBuckets
	}
	limit := rate.Limit(cfg.RPS)
	newTable := func() *table {
		return &table{max: maxBuckets, buckets: map[string]*bucket{}, overflow: &bucket{l: rate.NewLimiter(limit, burst)}}
	}
	return &Limiter{
		limit: limit, burst: burst, ipHeader: http.CanonicalHeaderKey(cfg.ClientIPHeader), log: log, now: now,
		idle:       time.Duration(float64(burst) / cfg.RPS * float64(time.Second)),
		principals: newTable(), proven: newTable(), addresses: newTable(),
	}
}

// AllowPrincipal takes a token from the bucket of the principal id: for a
// request known to be its without a lookup. When the bucket is empty it
// returns false and how long until a token is available.
func (l *Limiter) AllowPrincipal(id uuid.UUID) (bool, time.Duration) {
	if l == nil {
		return true, 0
	}
	_, wait := l.admit(l.principals, id.String(), false)
	return wait == 0, wait
}

// Lookup admits a request not known to be a principal's: it holds one token
// of the bucket of r's client address until Known or Refused settles it.
// When the bucket has no token to hold it returns false and how long until
// one is available; the request must be refused without any lookup.
func (l *Limiter) Lookup(r *http.Request) (*Lookup, bool, time.Duration) {
	if l == nil {
		return nil, true, 0
	}
	key := addressKey(l.clientAddr(r))
	l.mu.Lock()
	_, proven := l.proven.buckets[key]
	l.mu.Unlock()
	t := l.addresses
	if proven {
		t = l.proven
	}
	b, wait := l.admit(t, key, true)
	if b == nil {
		return nil, false, wait
	}
	return &Lookup{l: l, b: b, key: key}, true, 0
}

// Lookup is a token held for one request of a client address. A nil
// *Lookup (no limiter) allows everything. It is not safe for concurrent
// use; settling it twice does nothing the second time.
type Lookup struct {
	l       *Limiter
	b       *bucket
	key     string
	settled bool
}

// Known settles the lookup for a request that proved to be the principal
// id's: the address's token is given back and the principal's bucket is
// charged instead. When that bucket is empty it returns false and how long
// until a token is available.
func (k *Lookup) Known(id uuid.UUID) (bool, time.Duration) {
	if k == nil {
		return true, 0
	}
	if !k.settled {
		k.settled = true
		k.l.settle(k.b, false)
		k.l.prove(k.key)
	}
	return k.l.AllowPrincipal(id)
}

// Refused settles the lookup for a request that proved no principal's (no
// credential, an unknown or revoked one, a public endpoint): the address's
// token is spent. Callers defer it when they take the lookup.
func (k *Lookup) Refused() {
	if k == nil || k.settled {
		return
	}
	k.settled = true
	k.l.settle(k.b, true)
}

// admit takes a token of key's bucket in t, or with hold only holds it.
// The tokens other lookups hold are not available. When none is, it
// returns a nil bucket and how long until one is.
func (l *Limiter) admit(t *table, key string, hold bool) (*bucket, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.bucketLocked(t, key, now)
	b.last = now
	free := b.l.TokensAt(now) - float64(b.held)
	if free < 1 {
		wait := time.Duration((1 - free) / float64(l.limit) * float64(time.Second))
		return nil, max(wait, time.Millisecond)
	}
	if hold {
		b.held++
	} else {
		b.l.AllowN(now, 1)
	}
	return b, 0
}

// prove moves the bucket of an address a credential was just proven from
// to the table of such addresses, where a flood of other addresses cannot
// reach it; a new bucket there if it had none of its own (the overflow's).
func (l *Limiter) prove(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.proven.buckets[key]; ok {
		return
	}
	now := l.now()
	if b, ok := l.addresses.buckets[key]; ok {
		l.proven.sweepLocked(now, l.idle)
		if len(l.proven.buckets) < l.proven.max {
			delete(l.addresses.buckets, key)
			l.proven.buckets[key] = b
		}
		return
	}
	l.bucketLocked(l.proven, key, now).last = now
}

// settle ends a hold on b, spending its token when charge is set. The token
// is there to spend: held tokens are never given to anyone else.
func (l *Limiter) settle(b *bucket, charge bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b.held--
	b.last = now
	if charge {
		b.l.ReserveN(now, 1)
	}
}

// bucketLocked is key's bucket in t, a new one if there is room, else
// t's overflow bucket. Called with l.mu held.
func (l *Limiter) bucketLocked(t *table, key string, now time.Time) *bucket {
	if b, ok := t.buckets[key]; ok {
		return b
	}
	t.sweepLocked(now, l.idle)
	if len(t.buckets) >= t.max {
		return t.overflow
	}
	b := &bucket{l: rate.NewLimiter(l.limit, l.burst)}
	t.buckets[key] = b
	return b
}

// sweepLocked forgets buckets that have been full for a while (idle, and
// a minute more), once a minute, or once a second while the table is full.
// Called with the limiter's mu held.
func (t *table) sweepLocked(now time.Time, idle time.Duration) {
	every := time.Minute
	if len(t.buckets) >= t.max {
		every = time.Second
	}
	if now.Sub(t.swept) < every {
		return
	}
	t.swept = now
	for k, b := range t.buckets {
		if b.held == 0 && now.Sub(b.last) > idle+time.Minute {
			delete(t.buckets, k)
		}
	}
}

// ClientAddress is r's client address: the connection's peer or, behind
// the trusted proxy, the address its header gives (Config.ClientIPHeader).
func (l *Limiter) ClientAddress(r *http.Request) string {
	if a := l.clientAddr(r); a.IsValid() {
		return a.String()
	}
	return peerHost(r)
}

// clientAddr is r's client address, invalid when neither the header nor
// the connection gives one that parses.
func (l *Limiter) clientAddr(r *http.Request) netip.Addr {
	if l != nil && l.ipHeader != "" {
		if a, ok := l.headerAddr(r); ok {
			return a
		}
	}
	a, err := netip.ParseAddr(peerHost(r))
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap()
}

// headerAddr is the address the trusted proxy's header gives: the last
// header line's right-most entry for X-Forwarded-For (what the proxy
// appended), the whole value for any other header. false when the header
// is absent or not an address (then logged at debug, without the value).
func (l *Limiter) headerAddr(r *http.Request) (netip.Addr, bool) {
	lines := r.Header.Values(l.ipHeader)
	if len(lines) == 0 {
		return netip.Addr{}, false
	}
	v := lines[len(lines)-1]
	if l.ipHeader == "X-Forwarded-For" {
		if i := strings.LastIndexByte(v, ','); i >= 0 {
			v = v[i+1:]
		}
	}
	v = strings.TrimSpace(v)
	if a, err := netip.ParseAddr(v); err == nil {
		return a.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(v); err == nil {
		return ap.Addr().Unmap(), true
	}
	l.log.DebugContext(r.Context(), "client address header is not an IP address; using the connection's address",
		slog.String("header", l.ipHeader), slog.String("peer", peerHost(r)))
	return netip.Addr{}, false
}

// peerHost is the connection's peer address, as net/http gives it.
func peerHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// addressKey is the bucket of a client address: an IPv4 address alone
// (IPv4-mapped IPv6 addresses are IPv4), an IPv6 address by its /64, the
// prefix one subscriber or host usually gets whole.
func addressKey(a netip.Addr) string {
	if !a.IsValid() {
		return "ip:unknown"
	}
	a = a.Unmap().WithZone("")
	if a.Is4() {
		return "ip:" + a.String()
	}
	p, _ := a.Prefix(64)
	return "ip:" + p.String()
}
