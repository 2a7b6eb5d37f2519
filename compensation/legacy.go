package compensation

import (
	"context"
	"fmt"
	"time"

	"github.com/quittance/quittance/ledger"
)

// This file holds the code that exists only for data recorded before a
// change of what is recorded, each piece naming the change; once no
// database holds such data, the piece can go. RevocationTx's
// UnannouncedRevokedReleasesForUpdate and RevokedReleaseAnnounced serve
// announceBackfilledReleases only.

// announceBackfilledReleases appends the released_on_revoked_identity
// event to each delegation whose release on a revoked identity has none:
// those of identities revoked before migration 00018, which migration
// 00020 surfaced as rows (a migration appends no event to a hash chain).
// The sweep runs it, with actor; once all are announced it finds nothing.
// It returns how many it announced.
func (s *Service) announceBackfilledReleases(ctx context.Context, now time.Time, actor string) (int, error) {
	announced := 0
	for {
		n, last := 0, false
		err := s.store.InTx(ctx, func(tx Tx) error {
			n = 0
			due, err := tx.Revocation().UnannouncedRevokedReleasesForUpdate(ctx, s.batch)
			if err != nil {
				return err
			}
			for _, d := range due {
				// Another replica may have announced it between the query's
				// snapshot and the lock.
				done, err := tx.Revocation().RevokedReleaseAnnounced(ctx, d.ID)
				if err != nil {
					return err
				}
				if done {
					continue
				}
				r, err := tx.Revocation().RevokedReleaseForUpdate(ctx, d.ID)
				if err != nil {
					return err
				}
				org, err := tx.Org(ctx, d.OrgID)
				if err != nil {
					return err
				}
				if _, err := ledger.Record(ctx, tx, d, ledger.Change{
					Type: ledger.EventTypeReleasedOnRevokedIdentity, Actor: actor, At: now,
					Data: ledger.ReleasedOnRevokedIdentityData{
						OrgID: org.ID, RevocationReason: org.IdentityRevokedReason,
						AmountMinor: r.AmountMinor, Currency: r.Currency,
						IdentityRevokedAt: r.IdentityRevokedAt.Format(time.RFC3339Nano), SurfacedBy: "migration 00020",
					},
				}); err != nil {
					return fmt.Errorf("announce release of delegation %s: %w", d.ID, err)
				}
				n++
			}
			last = len(due) < s.batch
			return nil
		})
		if err != nil {
			return announced, err
		}
		announced += n
		if last {
			return announced, nil
		}
	}
}

// acceptanceBeforeRowsSaidIt is how the ledger accepted the token of
// evidence stored before its row recorded token_kind and
// token_accepted_at (the change that made stored tokens record them, with
// no migration): as the kind the evidence proves, when it was received.
func acceptanceBeforeRowsSaidIt(stored ledger.StoredEvidence) ledger.TokenAcceptance {
	kind := KindAck
	if stored.Kind == ledger.EventDeclarationVerified {
		kind = KindDeclaration
	}
	return ledger.NewTokenAcceptance(string(kind), stored.ReceivedAt)
}
