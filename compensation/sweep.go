package compensation

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/failpoint"
)

// Sweep moves every delegation in revocation_pending_compensation whose
// compensation deadline is at or before now to compensation_unconfirmed,
// through ledger.Apply; the hold stays active (ledger/DESIGN.md §2.2
// invariant 2). Batches are claimed with FOR UPDATE SKIP LOCKED, so
// replicas never move one twice. It first announces backfilled releases
// (announceBackfilledReleases) and returns how many it moved; its events
// are system:sweep's, SweepNow's the asking principal's.
func (s *Service) Sweep(ctx context.Context, now time.Time) (int, error) {
	return s.sweep(ctx, now, sweepActor)
}

// sweepActor is the actor of the events of the periodic sweep.
const sweepActor = "system:sweep"

// sweep is Sweep with its events recorded as actor's.
func (s *Service) sweep(ctx context.Context, now time.Time, actor string) (int, error) {
	now = now.UTC().Truncate(time.Microsecond)
	if n, err := s.announceBackfilledReleases(ctx, now, actor); err != nil {
		return 0, err
	} else if n > 0 {
		s.log.InfoContext(ctx, "releases on identities revoked before migration 00018 announced", slog.Int("announced", n))
	}
	moved := 0
	for {
		n := 0
		err := s.store.InTx(ctx, func(tx Tx) error {
			n = 0
			due, err := tx.ClaimPastDeadline(ctx, now, s.batch)
			if err != nil {
				return err
			}
			for _, d := range due {
				if _, _, err := ledger.Apply(ctx, tx, d, ledger.Change{
					Type: ledger.EventTypeDeadlinePassed, Actor: actor, At: now,
					Obligation: ledger.EventCompensationUnconfirmed,
					Data: ledger.DeadlinePassedData{
						Deadline:       d.Compensation.Deadline.UTC().Format(time.RFC3339Nano),
						IdempotencyKey: d.Compensation.IdempotencyKey,
						HoldAmount:     d.Hold.AmountMinor,
					},
				}); err != nil {
					return fmt.Errorf("mark delegation %s unconfirmed: %w", d.ID, err)
				}
				n++
			}
			return nil
		})
		if err != nil {
			return moved, err
		}
		moved += n
		if n < s.batch {
			return moved, nil
		}
		failpoint.Inject("mid-sweep") // crash tests: one batch committed, more to come
	}
}

// SweepNow runs Sweep at the service clock's current time, for an on-call
// principal (POST /admin/v1/compensation/sweep). The events it causes name
// that principal as their actor: the audit log says who moved an
// obligation early, not only that the sweep did.
func (s *Service) SweepNow(ctx context.Context, p ledger.Principal) (int, error) {
	if err := ledger.Authorize(p, ledger.ActionRunSweep); err != nil {
		return 0, err
	}
	return s.sweep(ctx, s.now(), p.Actor())
}

// Sweeper runs a sweep periodically.
type Sweeper struct {
	// Interval is the time between the end of one sweep and the start of
	// the next.
	Interval time.Duration
	// Clock gives the time each sweep runs at.
	Clock ledger.Clock
	// Sweep is the work to run; Service.Sweep in production.
	Sweep func(ctx context.Context, now time.Time) (int, error)
	// Log receives failures and the count of each sweep that moved something.
	Log *slog.Logger
}

// Sweeper returns the service's periodic sweeper.
func (s *Service) Sweeper(interval time.Duration) *Sweeper {
	return &Sweeper{Interval: interval, Clock: s.clock, Sweep: s.Sweep, Log: s.log}
}

// Run sweeps once immediately and then every Interval until ctx ends; it
// returns nil then. A failed sweep is logged and retried at the next tick:
// the obligation rows are the source of truth, so a missed sweep only delays
// the move to compensation_unconfirmed, and never moves money.
func (w *Sweeper) Run(ctx context.Context) error {
	if w.Interval <= 0 {
		return fmt.Errorf("sweep interval must be positive, got %s", w.Interval)
	}
	log := w.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	clock := w.Clock
	if clock == nil {
		clock = ledger.SystemClock{}
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		n, err := w.Sweep(ctx, clock.Now())
		switch {
		case err != nil && ctx.Err() != nil:
			return nil
		case err != nil:
			log.ErrorContext(ctx, "compensation sweep failed", slog.Any("error", err))
		case n > 0:
			log.InfoContext(ctx, "compensation sweep moved obligations to compensation_unconfirmed", slog.Int("moved", n))
		}
		timer.Reset(w.Interval)
	}
}
