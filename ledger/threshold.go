package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// ChangeWriteOffThreshold changes the write-off approval threshold: the
// largest amount one on-call principal may write off alone.
const ChangeWriteOffThreshold ChangeKind = "write_off_threshold_update"

// WriteOffThreshold is the write-off approval threshold in force.
type WriteOffThreshold struct {
	// Minor is the threshold in minor units: a write-off above it waits for
	// a second on-call principal.
	Minor int64
	// Configured is true while no change was ever approved: the threshold
	// is the configured initial value
	// (QUITTANCE_WRITE_OFF_APPROVAL_THRESHOLD_MINOR).
	Configured bool
	// UpdatedAt, UpdatedBy and PendingChangeID say which change set it,
	// once one did.
	UpdatedAt       time.Time
	UpdatedBy       uuid.UUID
	PendingChangeID uuid.UUID
}

// ThresholdReader reads the stored write-off threshold; found is false
// while no change was ever applied.
type ThresholdReader interface {
	StoredWriteOffThreshold(ctx context.Context) (t WriteOffThreshold, found bool, err error)
}

// EffectiveWriteOffThreshold is the one rule for which threshold is in
// force: the last approved change, or the configured initial value before
// any.
func EffectiveWriteOffThreshold(ctx context.Context, r ThresholdReader, configured int64) (WriteOffThreshold, error) {
	t, found, err := r.StoredWriteOffThreshold(ctx)
	if err != nil {
		return WriteOffThreshold{}, fmt.Errorf("load write-off threshold: %w", err)
	}
	if !found {
		return WriteOffThreshold{Minor: configured, Configured: true}, nil
	}
	return t, nil
}

type thresholdPayload struct {
	Minor int64 `json:"threshold_minor"`
}

// GetWriteOffThreshold returns the threshold in force, to on-call and
// finance.
func (s *Service) GetWriteOffThreshold(ctx context.Context, p Principal) (WriteOffThreshold, error) {
	if err := require(p, RoleOncall, RoleFinance); err != nil {
		return WriteOffThreshold{}, err
	}
	return EffectiveWriteOffThreshold(ctx, s.store, s.configuredThreshold)
}

// RequestWriteOffThreshold asks for the write-off approval threshold to
// become minor. Like every privileged change it is recorded as pending and
// returned as an *ApprovalRequiredError; it takes effect when a different
// on-call principal approves it (under dev, the bootstrap principal's
// applies at once). It returns the threshold as it is (or, applied at
// once, as it became). Asking for the threshold in force changes nothing.
func (s *Service) RequestWriteOffThreshold(ctx context.Context, p Principal, minor int64) (WriteOffThreshold, error) {
	if err := require(p, RoleOncall); err != nil {
		return WriteOffThreshold{}, err
	}
	if minor < 0 {
		return WriteOffThreshold{}, Invalid("threshold_minor", "must be zero or a positive integer number of minor units")
	}
	var (
		out     WriteOffThreshold
		pending *PendingChange
	)
	err := s.store.InTx(ctx, func(tx Tx) error {
		pending = nil
		now := s.Now()
		var err error
		if out, err = EffectiveWriteOffThreshold(ctx, tx, s.configuredThreshold); err != nil {
			return err
		}
		if out.Minor == minor {
			return nil
		}
		if s.access.immediate(p) {
			out, err = s.applyWriteOffThreshold(ctx, tx, p, thresholdPayload{Minor: minor}, now, uuid.Nil)
			return err
		}
		pc, err := s.requestChange(ctx, tx, p, now, ChangeWriteOffThreshold, "write_off_threshold", thresholdPayload{Minor: minor},
			fmt.Sprintf("set the write-off approval threshold from %d to %d minor units", out.Minor, minor))
		pending = &pc
		return err
	})
	if err == nil && pending != nil {
		err = &ApprovalRequiredError{Change: *pending}
	}
	return out, err
}

// applyWriteOffThreshold stores the threshold in tx, with its
// write_off_threshold_changed event on the stream "write_off_threshold".
func (s *Service) applyWriteOffThreshold(ctx context.Context, tx Tx, p Principal, pl thresholdPayload, now time.Time, change uuid.UUID) (WriteOffThreshold, error) {
	before, err := EffectiveWriteOffThreshold(ctx, tx, s.configuredThreshold)
	if err != nil {
		return WriteOffThreshold{}, err
	}
	t := WriteOffThreshold{Minor: pl.Minor, UpdatedAt: now, UpdatedBy: p.ID, PendingChangeID: change}
	if err := tx.PutWriteOffThreshold(ctx, t); err != nil {
		return WriteOffThreshold{}, err
	}
	data := map[string]any{"threshold_minor": pl.Minor, "previous_threshold_minor": before.Minor}
	if change != uuid.Nil {
		data["pending_change_id"] = change.String()
	}
	_, err = Append(ctx, tx, Event{Stream: "write_off_threshold", Type: EventTypeWriteOffThresholdChanged, At: now, Actor: p.Actor()}, data)
	return t, err
}

// applyThresholdChange applies an approved write_off_threshold_update.
func (s *Service) applyThresholdChange(ctx context.Context, tx Tx, p Principal, c PendingChange, now time.Time) error {
	var pl thresholdPayload
	if err := json.Unmarshal(c.Payload, &pl); err != nil {
		return fmt.Errorf("decode pending change %s: %w", c.ID, err)
	}
	if pl.Minor < 0 {
		return Invalid("threshold_minor", "must not be negative")
	}
	_, err := s.applyWriteOffThreshold(ctx, tx, p, pl, now, c.ID)
	return err
}
