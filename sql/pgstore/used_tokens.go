package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

// UsedToken reads one org's used token id; in a flush, one read as unused
// may then be recorded without asking (InsertUsedToken).
func (t *tx) UsedToken(ctx context.Context, orgID, jti string) (compensation.UsedToken, error) {
	row, err := t.q.UsedTokenGet(ctx, dbsqlc.UsedTokenGetParams{OrgID: orgID, Jti: jti})
	if err != nil {
		err = notFound(err, "used token id of org "+orgID, "(jti)")
		if errors.Is(err, ledger.ErrNotFound) && t.conn.flush != nil {
			t.conn.conn.fresh.freshToken(usedTokenKey(orgID, jti))
		}
		return compensation.UsedToken{}, err
	}
	return compensation.UsedToken{
		OrgID: row.OrgID, JTI: row.Jti, DelegationID: row.DelegationID, TokenSHA256: row.TokenSha256, UsedAt: row.UsedAt,
	}, nil
}

// InsertUsedToken buffers the token id (insertbatch.go) and answers it
// inserted at once when the transaction is a flush that read it as unused
// and recorded it in no insert since; it sends the insert at once
// otherwise. A use that raced the read is found when the buffer is
// written: the operation then runs again alone and is answered as a
// replay, as the insert sent at once would have answered it.
func (t *tx) InsertUsedToken(ctx context.Context, u compensation.UsedToken) (bool, error) {
	if fresh := t.conn.conn.fresh.claimToken(usedTokenKey(u.OrgID, u.JTI)); fresh && t.conn.flush != nil {
		t.conn.wrote = true
		return true, t.conn.conn.bufferToken(t.conn.owner, u)
	}
	n, err := t.q.UsedTokenInsert(ctx, dbsqlc.UsedTokenInsertParams{
		OrgID: u.OrgID, Jti: u.JTI, DelegationID: u.DelegationID, TokenSha256: u.TokenSHA256, UsedAt: u.UsedAt,
	})
	if err != nil {
		return false, fmt.Errorf("record used token id of org %s: %w", u.OrgID, err)
	}
	return n == 1, nil
}
