package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

func (r reader) DelegationLinks(ctx context.Context, id uuid.UUID) ([]ledger.DelegationLink, error) {
	from, err := r.q.LinkListFrom(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("list links of delegation %s: %w", id, err)
	}
	to, err := r.q.LinkListTo(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("list links to delegation %s: %w", id, err)
	}
	out := make([]ledger.DelegationLink, 0, len(from)+len(to))
	for _, l := range from {
		out = append(out, ledger.DelegationLink{From: l.DelegationID, To: l.LinkedID, Kind: ledger.LinkKind(l.Kind)})
	}
	for _, l := range to {
		out = append(out, ledger.DelegationLink{From: l.DelegationID, To: l.LinkedID, Kind: ledger.LinkKind(l.Kind)})
	}
	return out, nil
}

func (t *tx) InsertDelegationLink(ctx context.Context, l ledger.DelegationLink, at time.Time) error {
	if err := t.q.LinkInsert(ctx, dbsqlc.LinkInsertParams{DelegationID: l.From, LinkedID: l.To, Kind: string(l.Kind), Now: at}); err != nil {
		return fmt.Errorf("insert %s link %s -> %s: %w", l.Kind, l.From, l.To, err)
	}
	return nil
}
