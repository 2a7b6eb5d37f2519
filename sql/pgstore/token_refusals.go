package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/quittance/quittance/ledger/report"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

// RecordTokenRefusal counts r for its (org, reason) and keeps it as the
// sample in the slot its number takes in the ring of
// report.TokenRefusalSampleSize.
func (t *tx) RecordTokenRefusal(ctx context.Context, r report.TokenRefusal) error {
	n, err := t.q.TokenRefusalCount(ctx, dbsqlc.TokenRefusalCountParams{OrgID: r.OrgID, Reason: r.Reason, At: r.At})
	if err != nil {
		return fmt.Errorf("count refused token (%q, %s): %w", r.OrgID, r.Reason, err)
	}
	err = t.q.TokenRefusalSamplePut(ctx, dbsqlc.TokenRefusalSamplePutParams{
		OrgID: r.OrgID, Reason: r.Reason, Slot: int32(n % report.TokenRefusalSampleSize), Kind: r.Kind,
		TokenSha256: r.TokenSHA256, TokenBytes: int32(r.TokenBytes), ClaimedIssuer: r.ClaimedIssuer,
		ClientAddress: r.ClientAddress, At: r.At,
	})
	if err != nil {
		return fmt.Errorf("sample refused token (%q, %s): %w", r.OrgID, r.Reason, err)
	}
	return nil
}

// TokenRefusalTotals implements report.TokenRefusalReader.
func (r *Reports) TokenRefusalTotals(ctx context.Context, since time.Time) ([]report.TokenRefusalTotal, error) {
	var p *time.Time
	if !since.IsZero() {
		p = &since
	}
	rows, err := r.store.reader.q.TokenRefusalList(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("list token refusals: %w", err)
	}
	samples, err := r.store.reader.q.TokenRefusalSampleList(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("list token refusal samples: %w", err)
	}
	type key struct{ org, reason string }
	byKey := map[key][]report.TokenRefusal{}
	for _, s := range samples {
		k := key{s.OrgID, s.Reason}
		byKey[k] = append(byKey[k], report.TokenRefusal{
			OrgID: s.OrgID, Reason: s.Reason, Kind: s.Kind, TokenSHA256: s.TokenSha256, TokenBytes: int(s.TokenBytes),
			ClaimedIssuer: s.ClaimedIssuer, ClientAddress: s.ClientAddress, At: s.At.UTC(),
		})
	}
	out := make([]report.TokenRefusalTotal, len(rows))
	for i, row := range rows {
		out[i] = report.TokenRefusalTotal{
			OrgID: row.OrgID, Reason: row.Reason, Refused: row.Refused, FirstAt: row.FirstAt.UTC(), LastAt: row.LastAt.UTC(),
			Samples: byKey[key{row.OrgID, row.Reason}],
		}
	}
	return out, nil
}

// SharedRemoteTasks implements report.TokenRefusalReader.
func (r *Reports) SharedRemoteTasks(ctx context.Context, limit int) ([]report.SharedRemoteTask, error) {
	rows, err := r.store.reader.q.SharedRemoteTaskList(ctx, int32(limit))
	if err != nil {
		return nil, fmt.Errorf("list shared remote tasks: %w", err)
	}
	out := make([]report.SharedRemoteTask, len(rows))
	for i, row := range rows {
		out[i] = report.SharedRemoteTask{
			OrgID: row.OrgID, RemoteTaskID: row.RemoteTaskID, DelegationIDs: row.DelegationIds, Tenants: row.Tenants,
			LastCreatedAt: row.LastCreatedAt.UTC(),
		}
	}
	return out, nil
}
