package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/access"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

// credentialsChannel is notified, by a trigger, at the commit of every
// transaction that revokes, expires or disables a credential or principal.
const credentialsChannel = "quittance_credentials"

func (r reader) CredentialByHash(ctx context.Context, hash []byte) (ledger.Token, ledger.PrincipalRecord, error) {
	row, err := r.q.CredentialAuthenticate(ctx, hash)
	if err != nil {
		return ledger.Token{}, ledger.PrincipalRecord{}, notFound(err, "token", "(hash)")
	}
	r2 := toPrincipal(row.Principal)
	r2.Aliases = row.Aliases
	return toToken(row.ApiToken), r2, nil
}

// TokenByHash returns the credential whose secret hashes to hash.
func (r reader) TokenByHash(ctx context.Context, hash []byte) (ledger.Token, error) {
	t, _, err := r.CredentialByHash(ctx, hash)
	return t, err
}

func (r reader) TouchCredential(ctx context.Context, id uuid.UUID, at time.Time) error {
	stale := at.Add(-time.Minute)
	if err := r.q.CredentialTouch(ctx, dbsqlc.CredentialTouchParams{UsedAt: &at, ID: id, StaleBefore: &stale}); err != nil {
		return fmt.Errorf("touch token %s: %w", id, interpretError(err))
	}
	return nil
}

func (r reader) PrincipalByID(ctx context.Context, id uuid.UUID) (ledger.PrincipalRecord, error) {
	row, err := r.q.PrincipalGetByID(ctx, id)
	if err != nil {
		return ledger.PrincipalRecord{}, notFound(err, "principal", id)
	}
	idents, err := r.q.OIDCIdentityListByPrincipal(ctx, id)
	if err != nil {
		return ledger.PrincipalRecord{}, fmt.Errorf("list OIDC identities of %s: %w", id, interpretError(err))
	}
	out := toPrincipal(row.Principal)
	out.Aliases, out.CreatedByIdentityProvider = row.Aliases, row.RecordedByIdp
	for _, o := range idents {
		out.OIDC = append(out.OIDC, toOIDCIdentity(o))
	}
	return out, nil
}

func (r reader) ListPrincipals(ctx context.Context) ([]ledger.PrincipalRecord, error) {
	rows, err := r.q.PrincipalList(ctx)
	if err != nil {
		return nil, fmt.Errorf("list principals: %w", interpretError(err))
	}
	idents, err := r.q.OIDCIdentityList(ctx)
	if err != nil {
		return nil, fmt.Errorf("list OIDC identities: %w", interpretError(err))
	}
	of := map[uuid.UUID][]ledger.OIDCIdentity{}
	for _, o := range idents {
		of[o.PrincipalID] = append(of[o.PrincipalID], toOIDCIdentity(o))
	}
	out := make([]ledger.PrincipalRecord, len(rows))
	for i, row := range rows {
		out[i] = toPrincipal(row.Principal)
		out[i].Aliases, out[i].OIDC, out[i].CreatedByIdentityProvider = row.Aliases, of[row.Principal.ID], row.RecordedByIdp
	}
	return out, nil
}

func (r reader) ListCredentials(ctx context.Context, principalID uuid.UUID) ([]ledger.Token, error) {
	rows, err := r.q.CredentialList(ctx, nullUUID(principalID))
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", interpretError(err))
	}
	out := make([]ledger.Token, len(rows))
	for i, row := range rows {
		out[i] = toToken(row)
	}
	return out, nil
}

func (r reader) Credential(ctx context.Context, id uuid.UUID) (ledger.Token, error) {
	row, err := r.q.CredentialGetByID(ctx, id)
	if err != nil {
		return ledger.Token{}, notFound(err, "token", id)
	}
	return toToken(row), nil
}

func (r reader) PendingChange(ctx context.Context, id uuid.UUID) (ledger.PendingChange, error) {
	row, err := r.q.PendingChangeGetByID(ctx, id)
	if err != nil {
		return ledger.PendingChange{}, notFound(err, "pending change", id)
	}
	return toPendingChange(row), nil
}

func (r reader) ListPendingChanges(ctx context.Context, status ledger.PendingStatus) ([]ledger.PendingChange, error) {
	rows, err := r.q.PendingChangeList(ctx, optional(string(status)))
	if err != nil {
		return nil, fmt.Errorf("list pending changes: %w", interpretError(err))
	}
	out := make([]ledger.PendingChange, len(rows))
	for i, row := range rows {
		out[i] = toPendingChange(row)
	}
	return out, nil
}

func (t *tx) LockPrincipals(ctx context.Context) error {
	if err := t.q.PrincipalLockRegistry(ctx); err != nil {
		return fmt.Errorf("lock principals: %w", interpretError(err))
	}
	return nil
}

func (t *tx) CountBootstrapSpent(ctx context.Context) (int64, error) {
	n, err := t.q.PrincipalCountBootstrapSpent(ctx)
	if err != nil {
		return 0, fmt.Errorf("count on-call principals: %w", interpretError(err))
	}
	return n, nil
}

func (t *tx) TenantInUse(ctx context.Context, tenant string) (bool, error) {
	used, err := t.q.PrincipalTenantInUse(ctx, tenant)
	if err != nil {
		return false, fmt.Errorf("look up tenant %s: %w", tenant, interpretError(err))
	}
	return used, nil
}

func (t *tx) InsertPrincipal(ctx context.Context, p ledger.PrincipalRecord) error {
	err := t.q.PrincipalInsert(ctx, dbsqlc.PrincipalInsertParams{
		ID: p.ID, Kind: string(p.Kind), DisplayName: p.Name, NameKey: access.NameKey(p.Name), Role: string(p.Role),
		Tenant: optional(p.Tenant), Bootstrap: p.Bootstrap, CreatedBy: nullUUID(p.CreatedBy), CreatedAt: p.CreatedAt,
	})
	if err != nil {
		return fmt.Errorf("insert principal %s: %w", p.ID, interpretError(err))
	}
	return nil
}

func (t *tx) PrincipalForUpdate(ctx context.Context, id uuid.UUID) (ledger.PrincipalRecord, error) {
	row, err := t.q.PrincipalGetByIDForUpdate(ctx, id)
	if err != nil {
		return ledger.PrincipalRecord{}, notFound(err, "principal", id)
	}
	return toPrincipal(row), nil
}

func (t *tx) PrincipalByNameForUpdate(ctx context.Context, nameKey string) (ledger.PrincipalRecord, error) {
	row, err := t.q.PrincipalGetByNameKeyForUpdate(ctx, nameKey)
	if err != nil {
		return ledger.PrincipalRecord{}, notFound(err, "principal named", nameKey)
	}
	return toPrincipal(row), nil
}

func (t *tx) UpdatePrincipal(ctx context.Context, p ledger.PrincipalRecord) error {
	err := t.q.PrincipalUpdate(ctx, dbsqlc.PrincipalUpdateParams{
		ID: p.ID, Role: string(p.Role), Tenant: optional(p.Tenant), Bootstrap: p.Bootstrap,
		DisabledAt: optionalTime(p.DisabledAt), DisabledBy: nullUUID(p.DisabledBy), DisabledReason: optional(p.DisabledReason),
	})
	if err != nil {
		return fmt.Errorf("update principal %s: %w", p.ID, interpretError(err))
	}
	return nil
}

func (t *tx) InsertToken(ctx context.Context, tok ledger.Token) error {
	err := t.q.CredentialInsert(ctx, dbsqlc.CredentialInsertParams{
		ID: tok.ID, PrincipalID: tok.PrincipalID, Name: tok.Name, Role: string(tok.Role), Tenant: optional(tok.Tenant),
		TokenHash: tok.Hash, CreatedAt: tok.CreatedAt, ExpiresAt: optionalTime(tok.ExpiresAt),
	})
	if err != nil {
		return fmt.Errorf("insert token %s: %w", tok.ID, interpretError(err))
	}
	return nil
}

func (t *tx) TokenForUpdate(ctx context.Context, id uuid.UUID) (ledger.Token, error) {
	row, err := t.q.CredentialGetByIDForUpdate(ctx, id)
	if err != nil {
		return ledger.Token{}, notFound(err, "token", id)
	}
	return toToken(row), nil
}

func (t *tx) RevokeToken(ctx context.Context, id uuid.UUID, at time.Time, by uuid.UUID, reason string) (bool, error) {
	n, err := t.q.CredentialRevoke(ctx, dbsqlc.CredentialRevokeParams{ID: id, RevokedAt: &at, RevokedBy: nullUUID(by), RevokeReason: optional(reason)})
	if err != nil {
		return false, fmt.Errorf("revoke token %s: %w", id, interpretError(err))
	}
	return n == 1, nil
}

func (t *tx) RevokePrincipalTokens(ctx context.Context, principalID uuid.UUID, at time.Time, by uuid.UUID, reason string) ([]uuid.UUID, error) {
	ids, err := t.q.CredentialRevokeAllOfPrincipal(ctx, dbsqlc.CredentialRevokeAllOfPrincipalParams{
		PrincipalID: principalID, RevokedAt: &at, RevokedBy: nullUUID(by), RevokeReason: optional(reason),
	})
	if err != nil {
		return nil, fmt.Errorf("revoke tokens of principal %s: %w", principalID, interpretError(err))
	}
	return ids, nil
}

func (t *tx) InsertPendingChange(ctx context.Context, c ledger.PendingChange) error {
	err := t.q.PendingChangeInsert(ctx, dbsqlc.PendingChangeInsertParams{
		ID: c.ID, Kind: string(c.Kind), Target: c.Target, Payload: c.Payload, Summary: c.Summary,
		RequestedBy: c.RequestedBy, RequestedAt: c.RequestedAt, ExpiresAt: c.ExpiresAt,
	})
	if err != nil {
		return fmt.Errorf("insert pending change %s: %w", c.ID, interpretError(err))
	}
	return nil
}

func (t *tx) PendingChangeForUpdate(ctx context.Context, id uuid.UUID) (ledger.PendingChange, error) {
	row, err := t.q.PendingChangeGetByIDForUpdate(ctx, id)
	if err != nil {
		return ledger.PendingChange{}, notFound(err, "pending change", id)
	}
	return toPendingChange(row), nil
}

func (t *tx) DecidePendingChange(ctx context.Context, c ledger.PendingChange) error {
	err := t.q.PendingChangeDecide(ctx, dbsqlc.PendingChangeDecideParams{
		ID: c.ID, Status: string(c.Status), DecidedBy: nullUUID(c.DecidedBy), DecidedAt: optionalTime(c.DecidedAt),
		DecisionReason: optional(c.DecisionReason),
	})
	if err != nil {
		return fmt.Errorf("decide pending change %s: %w", c.ID, interpretError(err))
	}
	return nil
}

func (t *tx) OpenPendingChangesOfRequesterForUpdate(ctx context.Context, requester uuid.UUID) ([]ledger.PendingChange, error) {
	rows, err := t.q.PendingChangeOpenByRequesterForUpdate(ctx, requester)
	if err != nil {
		return nil, fmt.Errorf("lock open pending changes of %s: %w", requester, interpretError(err))
	}
	out := make([]ledger.PendingChange, len(rows))
	for i, row := range rows {
		out[i] = toPendingChange(row)
	}
	return out, nil
}

func (t *tx) ExpiredPendingChangesForUpdate(ctx context.Context, now time.Time) ([]ledger.PendingChange, error) {
	rows, err := t.q.PendingChangeExpiredForUpdate(ctx, now)
	if err != nil {
		return nil, fmt.Errorf("load expired pending changes: %w", interpretError(err))
	}
	out := make([]ledger.PendingChange, len(rows))
	for i, row := range rows {
		out[i] = toPendingChange(row)
	}
	return out, nil
}

func (t *tx) OIDCIdentityForUpdate(ctx context.Context, issuer, subject string) (ledger.OIDCIdentity, error) {
	row, err := t.q.OIDCIdentityGetForUpdate(ctx, dbsqlc.OIDCIdentityGetForUpdateParams{Issuer: issuer, Subject: subject})
	if err != nil {
		return ledger.OIDCIdentity{}, notFound(err, "OIDC identity", subject)
	}
	return toOIDCIdentity(row), nil
}

func (t *tx) InsertOIDCIdentity(ctx context.Context, o ledger.OIDCIdentity) (bool, error) {
	n, err := t.q.OIDCIdentityInsert(ctx, dbsqlc.OIDCIdentityInsertParams{
		Issuer: o.Issuer, Subject: o.Subject, PrincipalID: o.PrincipalID, RecordedPrincipalID: nullUUID(o.RecordedPrincipalID),
		LinkedBy: nullUUID(o.LinkedBy), LinkedAt: o.LinkedAt,
	})
	if err != nil {
		return false, fmt.Errorf("insert OIDC identity: %w", interpretError(err))
	}
	return n == 1, nil
}

func (t *tx) RelinkOIDCIdentities(ctx context.Context, from, to, by uuid.UUID, at time.Time) error {
	_, err := t.q.OIDCIdentityRelink(ctx, dbsqlc.OIDCIdentityRelinkParams{FromPrincipal: from, ToPrincipal: to, LinkedBy: nullUUID(by), LinkedAt: at})
	if err != nil {
		return fmt.Errorf("relink OIDC identities of %s: %w", from, interpretError(err))
	}
	return nil
}

func (t *tx) InsertPrincipalIfAbsent(ctx context.Context, p ledger.PrincipalRecord) (bool, error) {
	params := dbsqlc.PrincipalInsertIfAbsentParams{
		ID: p.ID, Kind: string(p.Kind), DisplayName: p.Name, NameKey: access.NameKey(p.Name), Role: string(p.Role),
		Tenant: optional(p.Tenant), CreatedAt: p.CreatedAt,
	}
	for attempt := 0; attempt < 2; attempt++ {
		n, err := t.q.PrincipalInsertIfAbsent(ctx, params)
		if err != nil {
			return false, fmt.Errorf("insert principal %s: %w", p.ID, interpretError(err))
		}
		if n == 1 {
			return true, nil
		}
		if _, err := t.q.PrincipalGetByIDForUpdate(ctx, p.ID); err == nil {
			return false, nil
		} else if !errors.Is(err, pgx.ErrNoRows) {
			return false, fmt.Errorf("look up principal %s: %w", p.ID, interpretError(err))
		}
		// The name is another principal's: the id in the key keeps both.
		params.NameKey = access.NameKey(p.Name) + "#" + p.ID.String()
	}
	return false, fmt.Errorf("insert principal %s: neither its id nor its name key is free", p.ID)
}

func (t *tx) PrincipalAliases(ctx context.Context, id uuid.UUID) ([]uuid.UUID, error) {
	ids, err := t.q.PrincipalAliases(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("aliases of principal %s: %w", id, interpretError(err))
	}
	return ids, nil
}

// UnaccountedIdentityPair reports whether a and b may be one human that
// Quittance cannot tell apart (principals_unaccounted_pair).
func (t *tx) UnaccountedIdentityPair(ctx context.Context, a, b uuid.UUID) (bool, error) {
	pair, err := t.q.PrincipalsUnaccountedPair(ctx, dbsqlc.PrincipalsUnaccountedPairParams{A: a, B: b})
	if err != nil {
		return false, fmt.Errorf("persons of principals %s and %s: %w", a, b, interpretError(err))
	}
	return pair, nil
}

func (t *tx) MarkNoIdentityProviderAccount(ctx context.Context, id, by uuid.UUID, at time.Time) (bool, error) {
	n, err := t.q.PrincipalMarkNoIdentityProviderAccount(ctx, dbsqlc.PrincipalMarkNoIdentityProviderAccountParams{
		ID: id, By: uuid.NullUUID{UUID: by, Valid: true}, At: &at,
	})
	if err != nil {
		return false, fmt.Errorf("mark principal %s: %w", id, interpretError(err))
	}
	return n == 1, nil
}

func (t *tx) PrincipalPerson(ctx context.Context, id uuid.UUID) (uuid.UUID, error) {
	person, err := t.q.PrincipalPerson(ctx, id)
	if err != nil {
		return uuid.Nil, fmt.Errorf("person of principal %s: %w", id, interpretError(err))
	}
	return person, nil
}

func toOIDCIdentity(r dbsqlc.OidcIdentity) ledger.OIDCIdentity {
	return ledger.OIDCIdentity{
		Issuer: r.Issuer, Subject: r.Subject, PrincipalID: r.PrincipalID, RecordedPrincipalID: r.RecordedPrincipalID.UUID,
		LinkedBy: r.LinkedBy.UUID, LinkedAt: r.LinkedAt,
	}
}

// WatchCredentials holds a LISTEN connection on the credentials channel
// until ctx ends or the connection fails. A connection can die silently
// (a half-open TCP connection delivers nothing and reports nothing), so
// it waits for a notification at most access.CredentialWatchInterval at a
// time and then pings: a ping unanswered within a second ends the watch.
// (The authentication cache stops answering a second after the last proof
// anyway.)
func (s *Store) WatchCredentials(ctx context.Context, alive, changed func()) error {
	conn, err := pgx.ConnectConfig(ctx, s.listenConfig(credentialsChannel))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+credentialsChannel); err != nil {
		return err
	}
	alive()
	for {
		// A wait that times out leaves the connection usable (pgx's
		// default handler sets a read deadline; it does not close).
		waitCtx, cancel := context.WithTimeout(ctx, access.CredentialWatchInterval)
		_, err := conn.WaitForNotification(waitCtx)
		cancel()
		switch {
		case err == nil:
			changed()
			alive()
			continue
		case ctx.Err() != nil:
			return ctx.Err()
		case waitCtx.Err() == nil:
			return err
		}
		pingCtx, cancel := context.WithTimeout(ctx, time.Second)
		err = conn.Ping(pingCtx)
		cancel()
		if err != nil {
			return fmt.Errorf("ping the credentials listener: %w", err)
		}
		// A notification that arrived during the ping waits in pgx's
		// buffer, which a done context still reads: it is handled before
		// the connection counts as proven, so the proof never vouches for
		// a cache a revocation has outdated.
		done, cancel := context.WithCancel(ctx)
		cancel()
		for {
			if _, err := conn.WaitForNotification(done); err != nil {
				break
			}
			changed()
		}
		alive()
	}
}

func toToken(r dbsqlc.ApiToken) ledger.Token {
	return ledger.Token{
		ID: r.ID, PrincipalID: r.PrincipalID, Name: r.Name, Role: ledger.Role(r.Role), Tenant: deref(r.Tenant),
		Hash: r.TokenHash, CreatedAt: r.CreatedAt, ExpiresAt: derefTime(r.ExpiresAt), LastUsedAt: derefTime(r.LastUsedAt),
		RevokedAt: derefTime(r.RevokedAt), RevokedBy: r.RevokedBy.UUID, RevokeReason: deref(r.RevokeReason),
	}
}

func toPrincipal(r dbsqlc.Principal) ledger.PrincipalRecord {
	return ledger.PrincipalRecord{
		ID: r.ID, Kind: ledger.PrincipalKind(r.Kind), Name: r.DisplayName, Role: ledger.Role(r.Role), Tenant: deref(r.Tenant),
		Bootstrap: r.Bootstrap, CreatedBy: r.CreatedBy.UUID, CreatedAt: r.CreatedAt, DisabledAt: derefTime(r.DisabledAt),
		DisabledBy: r.DisabledBy.UUID, DisabledReason: deref(r.DisabledReason),
		NoIdentityProviderAccountAt: derefTime(r.NoIdentityProviderAccountAt), NoIdentityProviderAccountBy: r.NoIdentityProviderAccountBy.UUID,
	}
}

func toPendingChange(r dbsqlc.PendingChange) ledger.PendingChange {
	return ledger.PendingChange{
		ID: r.ID, Kind: ledger.ChangeKind(r.Kind), Target: r.Target, Payload: r.Payload, Summary: r.Summary,
		Status: ledger.PendingStatus(r.Status), RequestedBy: r.RequestedBy, RequestedAt: r.RequestedAt, ExpiresAt: r.ExpiresAt,
		DecidedBy: r.DecidedBy.UUID, DecidedAt: derefTime(r.DecidedAt), DecisionReason: deref(r.DecisionReason),
	}
}
