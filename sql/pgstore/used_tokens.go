package pgstore

import (
	"context"
	"fmt"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

func (t *tx) UsedToken(ctx context.Context, orgID, jti string) (compensation.UsedToken, error) {
	row, err := t.q.UsedTokenGet(ctx, dbsqlc.UsedTokenGetParams{OrgID: orgID, Jti: jti})
	if err != nil {
		return compensation.UsedToken{}, notFound(err, "used token id of org "+orgID, "(jti)")
	}
	return compensation.UsedToken{
		OrgID: row.OrgID, JTI: row.Jti, DelegationID: row.DelegationID, TokenSHA256: row.TokenSha256, UsedAt: row.UsedAt,
	}, nil
}

func (t *tx) InsertUsedToken(ctx context.Context, u compensation.UsedToken) (bool, error) {
	n, err := t.q.UsedTokenInsert(ctx, dbsqlc.UsedTokenInsertParams{
		OrgID: u.OrgID, Jti: u.JTI, DelegationID: u.DelegationID, TokenSha256: u.TokenSHA256, UsedAt: u.UsedAt,
	})
	if err != nil {
		return false, fmt.Errorf("record used token id of org %s: %w", u.OrgID, err)
	}
	return n == 1, nil
}
