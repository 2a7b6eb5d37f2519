package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

func (t *tx) OrgFailures(ctx context.Context, orgID string) (int, error) {
	row, err := t.q.OrgBackoffGet(ctx, orgID)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("load backoff of org %s: %w", orgID, err)
	}
	return int(row.Failures), nil
}

func (t *tx) FailOrg(ctx context.Context, orgID string, retryAt time.Time, lastError string, now time.Time) error {
	if err := t.q.OrgBackoffFail(ctx, dbsqlc.OrgBackoffFailParams{OrgID: orgID, RetryAt: retryAt, LastError: lastError, Now: now}); err != nil {
		return fmt.Errorf("back off org %s: %w", orgID, err)
	}
	return nil
}

func (t *tx) ClearOrgFailures(ctx context.Context, orgID string) error {
	if err := t.q.OrgBackoffClear(ctx, orgID); err != nil {
		return fmt.Errorf("clear backoff of org %s: %w", orgID, err)
	}
	return nil
}
