package ledger

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// The defaults of an org's JWKS URL refresh.
const (
	// DefaultOrgJWKSRefresh is how often every org's JWKS URL is fetched.
	DefaultOrgJWKSRefresh = 15 * time.Minute
	// DefaultOrgJWKSUnknownKidInterval is the shortest time between two
	// fetches of one org's JWKS URL caused by tokens naming a kid none of
	// its keys in force has.
	DefaultOrgJWKSUnknownKidInterval = time.Minute
	// maxFetchErrorLen bounds the fetch error kept on the org.
	maxFetchErrorLen = 1000
)

// The outcomes of a JWKS URL fetch, as Config.ObserveOrgJWKSFetch is told.
const (
	// JWKSFetchChanged: the set was fetched and valid, and keys were added
	// or removed.
	JWKSFetchChanged = "changed"
	// JWKSFetchUnchanged: the set was fetched and valid, with the keys
	// already in force.
	JWKSFetchUnchanged = "unchanged"
	// JWKSFetchFailed: the URL could not be fetched or served an invalid
	// set; the keys in force stay.
	JWKSFetchFailed = "failed"
)

// KeyRefresh is what a fetch of an org's JWKS URL changed.
type KeyRefresh struct {
	Added, Removed []KeyRef
}

// Changed reports whether any key was added or removed.
func (r KeyRefresh) Changed() bool { return len(r.Added)+len(r.Removed) > 0 }

// orgJWKSActor is the actor of the key changes the ledger's own fetches
// of an org's JWKS URL bring in: the periodic refresh, and a fetch for an
// unknown kid.
const orgJWKSActor = "system:org_jwks"

// RefreshOrgKeys fetches the org's JWKS URL now (on-call), and returns
// what changed and the org as it is after the fetch. A failed fetch is not
// an error: it is recorded on the org (JWKSFetch.Error) and the keys in
// force stay. An org without a JWKS URL is a conflict
// (org_has_no_jwks_url).
func (s *Service) RefreshOrgKeys(ctx context.Context, p Principal, orgID string) (Org, KeyRefresh, error) {
	if err := Authorize(p, ActionAdminister); err != nil {
		return Org{}, KeyRefresh{}, err
	}
	org, err := s.store.Org(ctx, orgID)
	if err != nil {
		return Org{}, KeyRefresh{}, err
	}
	if org.JWKSURL == "" {
		return Org{}, KeyRefresh{}, Conflict("org_has_no_jwks_url", "org %s's keys are registered inline; it has no JWKS URL to fetch", orgID)
	}
	r, err := s.refreshOrgKeys(ctx, org, p.Actor())
	if err != nil {
		return Org{}, KeyRefresh{}, err
	}
	org, err = s.store.Org(ctx, orgID)
	return org, r, err
}

// RefreshOrgKeysForKid is asked when a token of orgID (one posted as
// evidence, or the jws of a receipt its agent returned over A2A) names kid
// and none of the org's keys in force has it: when the org's keys come
// from a JWKS URL, the URL is fetched at once, so a key the org just
// rotated in is accepted without waiting for the periodic refresh. It reports whether a key with
// that kid came into force. Such fetches are rate-limited per org (at most
// one per Config.OrgJWKSUnknownKidInterval, counting the periodic ones, on
// every replica), so tokens with random kids cannot make the ledger fetch
// on every request.
func (s *Service) RefreshOrgKeysForKid(ctx context.Context, orgID, kid string) bool {
	if s.jwks.fetch == nil || kid == "" || s.jwks.recent(orgID, s.Now()) {
		return false
	}
	org, err := s.store.Org(ctx, orgID)
	if err != nil || org.JWKSURL == "" || org.IdentityRevoked() {
		return false
	}
	now := s.Now()
	if last := org.JWKSFetch.AttemptedAt; !last.IsZero() && now.Sub(last) < s.jwks.kidInterval {
		return false
	}
	if !s.jwks.claim(orgID, now) {
		return false
	}
	r, err := s.refreshOrgKeys(ctx, org, orgJWKSActor)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(r.Added, func(k KeyRef) bool { return k.KeyID == kid })
}

// RunOrgKeyRefresh fetches the JWKS URL of every org whose keys come from
// one, every interval (DefaultOrgJWKSRefresh when zero), until ctx ends. An
// org fetched less than an interval ago (by another replica, or for an
// unknown kid) is left for the next round. Each failure is recorded on its
// org and logged; the loop goes on.
func (s *Service) RunOrgKeyRefresh(ctx context.Context, interval time.Duration) error {
	if s.jwks.fetch == nil {
		<-ctx.Done()
		return nil
	}
	if interval <= 0 {
		interval = DefaultOrgJWKSRefresh
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		s.refreshDueOrgKeys(ctx, interval)
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

func (s *Service) refreshDueOrgKeys(ctx context.Context, interval time.Duration) {
	orgs, err := s.store.OrgsWithJWKSURL(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.jwks.log.ErrorContext(ctx, "list orgs with a JWKS URL", slog.Any("error", err))
		}
		return
	}
	for _, org := range orgs {
		if ctx.Err() != nil {
			return
		}
		// Slightly less than the interval, so ticks that drift a little
		// still refresh every round.
		if org.IdentityRevoked() || (!org.JWKSFetch.AttemptedAt.IsZero() && s.Now().Sub(org.JWKSFetch.AttemptedAt) < interval*9/10) {
			continue
		}
		if _, err := s.refreshOrgKeys(ctx, org, orgJWKSActor); err != nil && ctx.Err() == nil {
			s.jwks.log.ErrorContext(ctx, "refresh org keys", slog.String("org_id", org.ID), slog.Any("error", err))
		}
	}
}

// refreshOrgKeys fetches org's JWKS URL and, when the set is valid, brings
// the org's keys in force in line with it in one transaction: each key
// added or removed is recorded in the key history (recordOrgKeys) and
// listed on one org_keys_fetched event, whose actor is actor: the on-call
// principal who asked for the fetch, or orgJWKSActor for the ledger's own.
// A fetch that fails, or a set that is not valid, changes no key: the
// error is recorded on the org, logged and counted. The returned error is
// the database's only.
func (s *Service) refreshOrgKeys(ctx context.Context, org Org, actor string) (KeyRefresh, error) {
	raw, fetchErr := s.jwks.fetch(ctx, org.JWKSURL)
	if fetchErr == nil {
		if err := s.validateJWKS(raw); err != nil {
			fetchErr = fmt.Errorf("the URL serves an invalid JWK Set: %w", err)
		}
	}
	var out KeyRefresh
	err := s.store.InTx(ctx, func(tx Tx) error {
		out = KeyRefresh{}
		now := s.Now()
		current, err := tx.Admin().OrgForUpdate(ctx, org.ID)
		if err != nil {
			return err
		}
		if current.JWKSURL != org.JWKSURL {
			return nil // the key source changed while fetching
		}
		f := current.JWKSFetch
		f.AttemptedAt = now
		if fetchErr != nil {
			f.Error = StorableTruncated(fetchErr.Error(), maxFetchErrorLen)
			return tx.Admin().RecordOrgJWKSFetch(ctx, current.ID, current.JWKSURL, f)
		}
		added, removed, err := recordOrgKeys(ctx, tx, current.ID, raw, now)
		if err != nil {
			return err
		}
		f.Set, f.FetchedAt, f.Error = raw, now, ""
		if err := tx.Admin().RecordOrgJWKSFetch(ctx, current.ID, current.JWKSURL, f); err != nil {
			return err
		}
		out = KeyRefresh{Added: added, Removed: removed}
		if !out.Changed() {
			return nil
		}
		data := OrgKeysFetchedData{JWKSURL: current.JWKSURL, KeysAdded: added, KeysRemoved: removed}
		_, err = Append(ctx, tx, Event{Stream: "org:" + current.ID, Type: EventTypeOrgKeysFetched, At: now, Actor: actor}, data)
		return err
	})
	switch {
	case err != nil:
		return KeyRefresh{}, fmt.Errorf("record org %s JWKS fetch: %w", org.ID, err)
	case fetchErr != nil:
		s.jwks.observe(JWKSFetchFailed)
		s.jwks.log.WarnContext(ctx, "org JWKS URL fetch failed; the keys in force stay",
			slog.String("org_id", org.ID), slog.String("jwks_url", org.JWKSURL), slog.Any("error", fetchErr))
	case out.Changed():
		s.jwks.observe(JWKSFetchChanged)
		s.jwks.log.InfoContext(ctx, "org keys changed at its JWKS URL",
			slog.String("org_id", org.ID), slog.Int("keys_added", len(out.Added)), slog.Int("keys_removed", len(out.Removed)))
	default:
		s.jwks.observe(JWKSFetchUnchanged)
	}
	return out, nil
}

// orgJWKS is how the Service reaches orgs' JWKS URLs.
type orgJWKS struct {
	fetch       func(ctx context.Context, url string) ([]byte, error)
	validateURL func(string) error
	kidInterval time.Duration
	observe     func(outcome string)
	log         *slog.Logger

	mu sync.Mutex
	// kidFetches is when each org was last fetched for an unknown kid on
	// this replica, so that requests arriving together fetch once.
	kidFetches map[string]time.Time
}

// recent reports whether orgID was fetched for an unknown kid on this
// replica less than the interval before now, so a burst of such tokens
// costs no database read either.
func (j *orgJWKS) recent(orgID string, now time.Time) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	last, ok := j.kidFetches[orgID]
	return ok && now.Sub(last) < j.kidInterval
}

// claim reports whether orgID may be fetched for an unknown kid at now,
// and if so records it.
func (j *orgJWKS) claim(orgID string, now time.Time) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	if last, ok := j.kidFetches[orgID]; ok && now.Sub(last) < j.kidInterval {
		return false // another request claimed it meanwhile
	}
	if j.kidFetches == nil {
		j.kidFetches = make(map[string]time.Time)
	}
	j.kidFetches[orgID] = now
	return true
}
