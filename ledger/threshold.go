package ledger

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
)

// ChangeWriteOffThreshold changes a write-off approval threshold: the
// largest amount one on-call principal may write off alone, by default or
// for one currency.
const ChangeWriteOffThreshold ChangeKind = "write_off_threshold_update"

// WriteOffThreshold is a write-off approval threshold in force.
type WriteOffThreshold struct {
	// Currency is the ISO 4217 code the threshold is for; empty for the
	// default, which applies to every currency without one of its own.
	Currency string
	// Minor is the threshold in minor units: a write-off above it waits for
	// a second on-call principal.
	Minor int64
	// Configured is true while no change was ever approved for it: the
	// threshold is the configured value
	// (QUITTANCE_WRITE_OFF_APPROVAL_THRESHOLD_MINOR, or the currency's entry
	// of QUITTANCE_WRITE_OFF_APPROVAL_THRESHOLDS_MINOR).
	Configured bool
	// UpdatedAt, UpdatedBy and PendingChangeID say which change set it,
	// once one did.
	UpdatedAt       time.Time
	UpdatedBy       uuid.UUID
	PendingChangeID uuid.UUID
}

// WriteOffThresholds are the thresholds in force: the default and those of
// the currencies that have their own.
type WriteOffThresholds struct {
	Default WriteOffThreshold
	// Currencies are the currencies' own thresholds, by currency code.
	Currencies []WriteOffThreshold
}

// For is the threshold a write-off in currency is decided by: the
// currency's own, else the default.
func (t WriteOffThresholds) For(currency string) WriteOffThreshold {
	for _, c := range t.Currencies {
		if c.Currency == currency {
			return c
		}
	}
	return t.Default
}

// ThresholdConfig is the configured write-off approval thresholds, in force
// until approved changes set others.
type ThresholdConfig struct {
	// DefaultMinor applies to every currency without an entry.
	DefaultMinor int64
	// Currencies are thresholds of their own, by ISO 4217 code.
	Currencies map[string]int64
}

// ThresholdReader reads the stored write-off thresholds.
type ThresholdReader interface {
	// StoredWriteOffThreshold returns the default threshold the last
	// approved change set; found is false while none was ever applied.
	StoredWriteOffThreshold(ctx context.Context) (t WriteOffThreshold, found bool, err error)
	// StoredCurrencyWriteOffThresholds returns the currencies' thresholds
	// approved changes set.
	StoredCurrencyWriteOffThresholds(ctx context.Context) ([]WriteOffThreshold, error)
}

// EffectiveWriteOffThresholds is the one rule for which thresholds are in
// force: for the default and for each currency, the last approved change,
// or the configured value before any.
func EffectiveWriteOffThresholds(ctx context.Context, r ThresholdReader, cfg ThresholdConfig) (WriteOffThresholds, error) {
	def, found, err := r.StoredWriteOffThreshold(ctx)
	if err != nil {
		return WriteOffThresholds{}, fmt.Errorf("load write-off threshold: %w", err)
	}
	if !found {
		def = WriteOffThreshold{Minor: cfg.DefaultMinor, Configured: true}
	}
	stored, err := r.StoredCurrencyWriteOffThresholds(ctx)
	if err != nil {
		return WriteOffThresholds{}, fmt.Errorf("load write-off thresholds: %w", err)
	}
	out := WriteOffThresholds{Default: def}
	for _, cur := range slices.Sorted(maps.Keys(cfg.Currencies)) {
		if !slices.ContainsFunc(stored, func(t WriteOffThreshold) bool { return t.Currency == cur }) {
			out.Currencies = append(out.Currencies, WriteOffThreshold{Currency: cur, Minor: cfg.Currencies[cur], Configured: true})
		}
	}
	out.Currencies = append(out.Currencies, stored...)
	slices.SortFunc(out.Currencies, func(a, b WriteOffThreshold) int { return strings.Compare(a.Currency, b.Currency) })
	return out, nil
}

var currencyCode = regexp.MustCompile(`^[A-Z]{3}$`)

// CheckThresholdConfig refuses a configuration with a negative threshold or
// a currency that is not an ISO 4217 code.
func CheckThresholdConfig(cfg ThresholdConfig) error {
	if cfg.DefaultMinor < 0 {
		return fmt.Errorf("the write-off approval threshold must not be negative")
	}
	for cur, minor := range cfg.Currencies {
		if !currencyCode.MatchString(cur) {
			return fmt.Errorf("write-off approval threshold for %q: not an ISO 4217 currency code", cur)
		}
		if minor < 0 {
			return fmt.Errorf("write-off approval threshold for %s must not be negative", cur)
		}
	}
	return nil
}

type thresholdPayload struct {
	Minor int64 `json:"threshold_minor"`
	// Currency is empty for the default threshold (changes asked for
	// before thresholds per currency have none).
	Currency string `json:"currency,omitempty"`
}

// GetWriteOffThresholds returns the thresholds in force, to on-call and
// finance.
func (s *Service) GetWriteOffThresholds(ctx context.Context, p Principal) (WriteOffThresholds, error) {
	if err := Authorize(p, ActionReadConfiguration); err != nil {
		return WriteOffThresholds{}, err
	}
	return EffectiveWriteOffThresholds(ctx, s.store, s.thresholds)
}

// RequestWriteOffThreshold asks for the write-off approval threshold of
// currency (empty: the default) to become minor. Like every privileged
// change it is recorded as pending and returned as an
// *ApprovalRequiredError; it takes effect when a different on-call
// principal approves it (under dev, the bootstrap principal's applies at
// once). It returns the threshold as it is (or, applied at once, as it
// became). Asking for the threshold in force changes nothing.
func (s *Service) RequestWriteOffThreshold(ctx context.Context, p Principal, currency string, minor int64) (WriteOffThreshold, error) {
	if err := Authorize(p, ActionAdminister); err != nil {
		return WriteOffThreshold{}, err
	}
	if minor < 0 {
		return WriteOffThreshold{}, Invalid("threshold_minor", "must be zero or a positive integer number of minor units")
	}
	if currency != "" && !currencyCode.MatchString(currency) {
		return WriteOffThreshold{}, Invalid("currency", "must be an ISO 4217 currency code (three capital letters), or absent for the default")
	}
	var (
		out     WriteOffThreshold
		pending *PendingChange
	)
	err := s.store.InTx(ctx, func(tx Tx) error {
		pending = nil
		now := s.Now()
		var err error
		if out, err = s.thresholdOf(ctx, tx.Admin(), currency); err != nil {
			return err
		}
		if out.Minor == minor && out.Currency == currency {
			return nil
		}
		pl := thresholdPayload{Minor: minor, Currency: currency}
		what := "the write-off approval threshold"
		if currency != "" {
			what += " for " + currency
		}
		req := ChangeRequest{By: p, At: now, Kind: ChangeWriteOffThreshold, Target: "write_off_threshold", Payload: pl,
			Summary: fmt.Sprintf("set %s from %d to %d minor units", what, out.Minor, minor)}
		pending, err = s.ApplyOrRequest(ctx, tx, p, req, func() (err error) {
			out, err = s.applyWriteOffThreshold(ctx, tx, p, pl, now, uuid.Nil)
			return err
		})
		return err
	})
	return out, AwaitingApproval(pending, err)
}

// thresholdOf is the threshold in force for currency (empty: the default).
func (s *Service) thresholdOf(ctx context.Context, r ThresholdReader, currency string) (WriteOffThreshold, error) {
	all, err := EffectiveWriteOffThresholds(ctx, r, s.thresholds)
	if err != nil {
		return WriteOffThreshold{}, err
	}
	if currency == "" {
		return all.Default, nil
	}
	return all.For(currency), nil
}

// applyWriteOffThreshold stores the threshold in tx, with its
// write_off_threshold_changed event on the stream "write_off_threshold".
func (s *Service) applyWriteOffThreshold(ctx context.Context, tx Tx, p Principal, pl thresholdPayload, now time.Time, change uuid.UUID) (WriteOffThreshold, error) {
	before, err := s.thresholdOf(ctx, tx.Admin(), pl.Currency)
	if err != nil {
		return WriteOffThreshold{}, err
	}
	t := WriteOffThreshold{Currency: pl.Currency, Minor: pl.Minor, UpdatedAt: now, UpdatedBy: p.ID, PendingChangeID: change}
	if pl.Currency == "" {
		err = tx.Admin().PutWriteOffThreshold(ctx, t)
	} else {
		err = tx.Admin().PutCurrencyWriteOffThreshold(ctx, t)
	}
	if err != nil {
		return WriteOffThreshold{}, err
	}
	data := WriteOffThresholdChangedData{ThresholdMinor: pl.Minor, PreviousThresholdMinor: before.Minor, Currency: pl.Currency}
	if change != uuid.Nil {
		data.PendingChangeID = change.String()
	}
	_, err = Append(ctx, tx, Event{Stream: "write_off_threshold", Type: EventTypeWriteOffThresholdChanged, At: now, Actor: p.Actor()}, data)
	return t, err
}

// applyThresholdChange applies an approved write_off_threshold_update.
func (s *Service) applyThresholdChange(ctx context.Context, tx Tx, p Principal, c PendingChange, now time.Time) (string, error) {
	pl, err := DecodeChangePayload[thresholdPayload](c)
	if err != nil {
		return "", err
	}
	if pl.Minor < 0 {
		return "", Invalid("threshold_minor", "must not be negative")
	}
	if pl.Currency != "" && !currencyCode.MatchString(pl.Currency) {
		return "", Invalid("currency", "must be an ISO 4217 currency code")
	}
	_, err = s.applyWriteOffThreshold(ctx, tx, p, pl, now, c.ID)
	return "", err
}
