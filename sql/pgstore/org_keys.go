package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

// OrgKeys returns the org's key history by valid_from, then kid.
func (r reader) OrgKeys(ctx context.Context, orgID string) ([]ledger.OrgKey, error) {
	rows, err := r.q.OrgKeyList(ctx, orgID)
	if err != nil {
		return nil, fmt.Errorf("org %s keys: %w", orgID, interpretError(err))
	}
	out := make([]ledger.OrgKey, len(rows))
	for i, row := range rows {
		out[i] = ledger.OrgKey{
			OrgID: row.OrgID, KeyID: row.Kid, Thumbprint: row.Thumbprint, JWK: row.Jwk,
			ValidFrom: row.ValidFrom.UTC(), ValidUntil: derefTime(row.ValidUntil).UTC(),
		}
	}
	return out, nil
}

func (t *tx) InsertOrgKey(ctx context.Context, k ledger.OrgKey) error {
	err := t.q.OrgKeyInsert(ctx, dbsqlc.OrgKeyInsertParams{
		OrgID: k.OrgID, Kid: k.KeyID, Thumbprint: k.Thumbprint, Jwk: k.JWK, ValidFrom: k.ValidFrom,
	})
	if err != nil {
		return fmt.Errorf("record org %s key %s: %w", k.OrgID, k.KeyID, interpretError(err))
	}
	return nil
}

func (t *tx) EndOrgKey(ctx context.Context, k ledger.OrgKey, until time.Time) error {
	err := t.q.OrgKeyEnd(ctx, dbsqlc.OrgKeyEndParams{
		OrgID: k.OrgID, Kid: k.KeyID, Thumbprint: k.Thumbprint, ValidFrom: k.ValidFrom, ValidUntil: &until,
	})
	if err != nil {
		return fmt.Errorf("end org %s key %s: %w", k.OrgID, k.KeyID, interpretError(err))
	}
	return nil
}
