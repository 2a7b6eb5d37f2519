package report

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/quittance/quittance/ledger"

	"github.com/google/uuid"
)

// Limits of case handling input.
const (
	maxOwnerLen    = 200
	maxNoteLen     = 4096
	maxSnooze      = 365 * 24 * time.Hour
	maxBulk        = 200
	maxQueueLimit  = 200
	defaultQueueLn = 50
)

// Case is the case-handling state of one delegation's obligation.
type Case struct {
	DelegationID uuid.UUID
	// Owner is who handles the obligation; empty when nobody does.
	Owner string
	// SnoozedUntil hides the obligation from the needs-action queue until
	// then; zero when it is not snoozed.
	SnoozedUntil time.Time
	// Notes is how many notes were added.
	Notes     int
	UpdatedAt time.Time
}

// Snoozed reports whether the needs-action entry is snoozed at now.
func (c Case) Snoozed(now time.Time) bool { return c.SnoozedUntil.After(now) }

// CaseStore is the persistence case handling needs.
//
// Error contract: as Store. Case returns a Case with only DelegationID set
// when the delegation has no case row yet.
type CaseStore interface {
	ledger.Reader
	// InTx runs fn in one transaction, as Store.InTx.
	InTx(ctx context.Context, fn func(CaseTx) error) error
	// Case returns the delegation's case.
	Case(ctx context.Context, id uuid.UUID) (Case, error)
	// Queue returns one page of obligations with their cases, in ascending
	// (sort key, id) order after q.After; the sort key is the one q.Sort
	// names, negated for descending sorts.
	Queue(ctx context.Context, q QueueQuery, now time.Time) ([]QueueRow, error)
}

// CaseTx is a transaction of case handling, of the size it needs: lock the
// delegation (ledger.LockVisible), read and write its case, and record the
// change's event (ledger.Record). Case handling never moves a hold or an
// obligation (ledger/DESIGN.md §5), so it has no ledger.ChangeTx.
type CaseTx interface {
	ledger.DelegationLocker
	ledger.EventAppender
	// Case returns the delegation's case (see CaseStore.Case).
	Case(ctx context.Context, id uuid.UUID) (Case, error)
	// PutCase writes the delegation's case.
	PutCase(ctx context.Context, c Case) error
}

// Cases is case handling on obligations: owners, notes, snoozes, the
// needs-action queue and bulk changes. Every change is an event on the
// delegation's stream, appended in the transaction that writes the case.
type Cases struct {
	store CaseStore
	storedClock
}

// CasesConfig wires Cases.
type CasesConfig struct {
	Store CaseStore
	Clock ledger.Clock
}

// NewCases returns Cases.
func NewCases(cfg CasesConfig) *Cases {
	return &Cases{store: cfg.Store, storedClock: newStoredClock(cfg.Clock)}
}

// Get returns the case of a delegation the principal may see.
func (c *Cases) Get(ctx context.Context, p ledger.Principal, id uuid.UUID) (Case, error) {
	if err := ledger.Authorize(p, ledger.ActionReadReports); err != nil {
		return Case{}, err
	}
	if _, err := ledger.Visible(ctx, c.store, p, id); err != nil {
		return Case{}, err
	}
	return c.store.Case(ctx, id)
}

// CaseChange is one change of case handling, as a single or bulk request
// asks for it.
type CaseChange struct {
	// Kind is what changes.
	Kind CaseChangeKind
	// Owner is the new owner of an assignment; empty unassigns.
	Owner string
	// Note is the text of a note.
	Note string
	// Until is the end of a snooze; zero wakes the entry.
	Until time.Time
	// Reason optionally says why an entry is snoozed.
	Reason string
}

// CaseChangeKind names a kind of case change.
type CaseChangeKind string

// The case change kinds.
const (
	CaseAssign CaseChangeKind = "assign"
	CaseNote   CaseChangeKind = "note"
	CaseSnooze CaseChangeKind = "snooze"
)

func (ch CaseChange) validate(now time.Time) (CaseChange, error) {
	switch ch.Kind {
	case CaseAssign:
		ch.Owner = strings.TrimSpace(ch.Owner)
		if len(ch.Owner) > maxOwnerLen {
			return ch, ledger.Invalid("owner", "is at most %d characters", maxOwnerLen)
		}
	case CaseNote:
		if strings.TrimSpace(ch.Note) == "" || len(ch.Note) > maxNoteLen {
			return ch, ledger.Invalid("note", "is required, at most %d characters", maxNoteLen)
		}
	case CaseSnooze:
		if len(ch.Reason) > maxNoteLen {
			return ch, ledger.Invalid("reason", "is at most %d characters", maxNoteLen)
		}
		if ch.Until.IsZero() {
			break
		}
		ch.Until = ledger.StoredTime(ch.Until)
		if !ch.Until.After(now) {
			return ch, ledger.Invalid("until", "must be in the future")
		}
		if ch.Until.Sub(now) > maxSnooze {
			return ch, ledger.Invalid("until", "is at most a year ahead")
		}
	default:
		return ch, ledger.Invalid("kind", "must be assign, note or snooze")
	}
	return ch, nil
}

// AssignOwner makes owner the obligation's owner; an empty owner unassigns it.
func (c *Cases) AssignOwner(ctx context.Context, p ledger.Principal, id uuid.UUID, owner string) (Case, error) {
	return c.Change(ctx, p, id, CaseChange{Kind: CaseAssign, Owner: owner})
}

// AddNote adds a note to the obligation.
func (c *Cases) AddNote(ctx context.Context, p ledger.Principal, id uuid.UUID, note string) (Case, error) {
	return c.Change(ctx, p, id, CaseChange{Kind: CaseNote, Note: note})
}

// Snooze hides the obligation's needs-action entry until until; a zero
// until wakes it. Only an obligation in the needs-action states (the
// pending states) can be snoozed. The hold never moves.
func (c *Cases) Snooze(ctx context.Context, p ledger.Principal, id uuid.UUID, until time.Time, reason string) (Case, error) {
	return c.Change(ctx, p, id, CaseChange{Kind: CaseSnooze, Until: until, Reason: reason})
}

// Change applies one case change and appends its event. A change that
// changes nothing (the same owner again) records nothing.
func (c *Cases) Change(ctx context.Context, p ledger.Principal, id uuid.UUID, ch CaseChange) (Case, error) {
	if err := ledger.Authorize(p, ledger.ActionHandleCase); err != nil {
		return Case{}, err
	}
	now := c.Now()
	ch, err := ch.validate(now)
	if err != nil {
		return Case{}, err
	}
	var out Case
	err = c.store.InTx(ctx, func(tx CaseTx) error {
		d, err := ledger.LockVisible(ctx, tx, p, id)
		if err != nil {
			return err
		}
		out, _, err = applyCaseChange(ctx, tx, p, d, ch, now)
		return err
	})
	return out, err
}

// applyCaseChange applies ch to d's case in tx. d is locked.
func applyCaseChange(ctx context.Context, tx CaseTx, p ledger.Principal, d ledger.Delegation, ch CaseChange, now time.Time) (Case, bool, error) {
	cs, err := tx.Case(ctx, d.ID)
	if err != nil {
		return Case{}, false, err
	}
	next, data, changed, err := nextCase(cs, d, ch, now)
	if err != nil || !changed {
		return cs, false, err
	}
	next.UpdatedAt = now
	if err := tx.PutCase(ctx, next); err != nil {
		return Case{}, false, err
	}
	typ := map[CaseChangeKind]ledger.EventType{CaseAssign: ledger.EventTypeCaseOwnerAssigned, CaseNote: ledger.EventTypeCaseNoteAdded, CaseSnooze: ledger.EventTypeCaseSnoozed}[ch.Kind]
	if _, err := ledger.Record(ctx, tx, d, ledger.Change{Type: typ, Actor: p.Actor(), At: now, Data: data}); err != nil {
		return Case{}, false, err
	}
	return next, true, nil
}

// nextCase is the case after ch, the data of its event, and whether
// anything changes. It is the one place that decides what a case change
// does: single changes, bulk previews and bulk changes all use it.
func nextCase(cs Case, d ledger.Delegation, ch CaseChange, now time.Time) (Case, ledger.EventPayload, bool, error) {
	next := cs
	next.DelegationID = d.ID
	var data ledger.EventPayload
	switch ch.Kind {
	case CaseAssign:
		if cs.Owner == ch.Owner {
			return cs, nil, false, nil
		}
		next.Owner = ch.Owner
		data = ledger.CaseOwnerAssignedData{Owner: ch.Owner, PreviousOwner: cs.Owner}
	case CaseNote:
		next.Notes++
		data = ledger.CaseNoteAddedData{Note: ch.Note}
	case CaseSnooze:
		if !slices.Contains(PendingObligationStates, d.ObligationState) && !ch.Until.IsZero() {
			return cs, nil, false, ledger.Conflict("not_in_queue", "an obligation in state %s is not in the needs-action queue; only revocation_pending_compensation, compensation_unconfirmed and escalated ones can be snoozed", d.ObligationState)
		}
		wasSnoozed := cs.Snoozed(now)
		if ch.Until.IsZero() && !wasSnoozed {
			return cs, nil, false, nil
		}
		if !ch.Until.IsZero() && cs.SnoozedUntil.Equal(ch.Until) {
			return cs, nil, false, nil
		}
		next.SnoozedUntil = ch.Until
		snoozed := ledger.CaseSnoozedData{Reason: ch.Reason, ObligationState: string(d.ObligationState)}
		if !ch.Until.IsZero() {
			until := ch.Until.Format(time.RFC3339Nano)
			snoozed.Until = &until
		}
		if wasSnoozed {
			snoozed.PreviousUntil = cs.SnoozedUntil.UTC().Format(time.RFC3339Nano)
		}
		data = snoozed
	}
	return next, data, true, nil
}

// BulkItem is what a bulk change does to one delegation: its case before
// and after, or why it is left alone.
type BulkItem struct {
	Delegation ledger.Delegation
	Before     Case
	After      Case
	// Changes is false when the change would change nothing here.
	Changes bool
	// Refused is set when the change is not allowed for this delegation
	// (a snooze of an obligation that is not in the queue).
	Refused error
}

// checkBulk validates a bulk request: at most maxBulk distinct ids, and a
// change that bulk allows (assign and snooze; never a note).
func checkBulk(ids []uuid.UUID, ch CaseChange) ([]uuid.UUID, error) {
	if ch.Kind != CaseAssign && ch.Kind != CaseSnooze {
		return nil, ledger.Invalid("kind", "bulk changes are assign or snooze")
	}
	ids = slices.Compact(slices.SortedFunc(slices.Values(ids), func(a, b uuid.UUID) int { return strings.Compare(a.String(), b.String()) }))
	if len(ids) == 0 {
		return nil, ledger.Invalid("ids", "select at least one obligation")
	}
	if len(ids) > maxBulk {
		return nil, ledger.Invalid("ids", "at most %d obligations at once", maxBulk)
	}
	return ids, nil
}

// prepareBulk refuses a bulk change p may not make, or one whose change
// or ids are invalid at now, and returns them as the change applies them.
func prepareBulk(p ledger.Principal, ids []uuid.UUID, ch CaseChange, now time.Time) ([]uuid.UUID, CaseChange, error) {
	if err := ledger.Authorize(p, ledger.ActionHandleCase); err != nil {
		return nil, ch, err
	}
	ch, err := ch.validate(now)
	if err != nil {
		return nil, ch, err
	}
	ids, err = checkBulk(ids, ch)
	return ids, ch, err
}

// PreviewBulk says exactly what a bulk change would do to each of ids,
// without changing anything.
func (c *Cases) PreviewBulk(ctx context.Context, p ledger.Principal, ids []uuid.UUID, ch CaseChange) ([]BulkItem, error) {
	now := c.Now()
	ids, ch, err := prepareBulk(p, ids, ch, now)
	if err != nil {
		return nil, err
	}
	out := make([]BulkItem, 0, len(ids))
	for _, id := range ids {
		d, err := ledger.Visible(ctx, c.store, p, id)
		if err != nil {
			return nil, err
		}
		cs, err := c.store.Case(ctx, id)
		if err != nil {
			return nil, err
		}
		next, _, changed, err := nextCase(cs, d, ch, now)
		out = append(out, BulkItem{Delegation: d, Before: cs, After: next, Changes: changed, Refused: err})
	}
	return out, nil
}

// ApplyBulk applies a bulk change to each of ids, in one transaction: one
// event for each delegation it changes, none for those it leaves alone. A
// delegation the change is refused for refuses the whole request, so what
// was previewed is what happens.
func (c *Cases) ApplyBulk(ctx context.Context, p ledger.Principal, ids []uuid.UUID, ch CaseChange) ([]BulkItem, error) {
	now := c.Now()
	ids, ch, err := prepareBulk(p, ids, ch, now)
	if err != nil {
		return nil, err
	}
	var out []BulkItem
	err = c.store.InTx(ctx, func(tx CaseTx) error {
		out = out[:0]
		for _, id := range ids {
			d, err := ledger.LockVisible(ctx, tx, p, id)
			if err != nil {
				return err
			}
			before, err := tx.Case(ctx, id)
			if err != nil {
				return err
			}
			after, changed, err := applyCaseChange(ctx, tx, p, d, ch, now)
			if err != nil {
				return fmt.Errorf("delegation %s: %w", id, err)
			}
			out = append(out, BulkItem{Delegation: d, Before: before, After: after, Changes: changed})
		}
		return nil
	})
	return out, err
}

// QueueSort orders the needs-action queue.
type QueueSort string

// The queue orders.
const (
	SortOldest     QueueSort = "oldest"
	SortNewest     QueueSort = "newest"
	SortAmountDesc QueueSort = "amount_desc"
	SortAmountAsc  QueueSort = "amount_asc"
	SortDeadline   QueueSort = "deadline"
)

// QueueSorts lists the queue orders, the default first.
var QueueSorts = []QueueSort{SortOldest, SortNewest, SortAmountDesc, SortAmountAsc, SortDeadline}

// SnoozeFilter says what the queue does with snoozed entries.
type SnoozeFilter string

// The snooze filters.
const (
	SnoozedHide SnoozeFilter = "hide"
	SnoozedShow SnoozeFilter = "show"
	SnoozedOnly SnoozeFilter = "only"
)

// QueueCursor is the position after which a queue page starts.
type QueueCursor struct {
	Key int64
	ID  uuid.UUID
}

// IsZero reports whether the cursor is unset.
func (c QueueCursor) IsZero() bool { return c.ID == uuid.Nil }

// String encodes the cursor for a URL.
func (c QueueCursor) String() string {
	if c.IsZero() {
		return ""
	}
	return strconv.FormatInt(c.Key, 10) + "." + c.ID.String()
}

// ParseQueueCursor decodes a cursor made by QueueCursor.String.
func ParseQueueCursor(raw string) (QueueCursor, error) {
	if raw == "" {
		return QueueCursor{}, nil
	}
	k, id, ok := strings.Cut(raw, ".")
	key, err1 := strconv.ParseInt(k, 10, 64)
	uid, err2 := uuid.Parse(id)
	if !ok || err1 != nil || err2 != nil || uid == uuid.Nil {
		return QueueCursor{}, ledger.Invalid("after", "is not a cursor this service issued")
	}
	return QueueCursor{Key: key, ID: uid}, nil
}

// QueueQuery selects obligations for the needs-action queue and the
// console's obligation listing. Empty fields match all.
type QueueQuery struct {
	// States defaults to PendingObligationStates (the needs-action queue).
	States []ledger.ObligationState
	OrgID  string
	Tenant string
	// Owner keeps obligations with this owner; Unassigned keeps those
	// with none.
	Owner      string
	Unassigned bool
	Currency   string
	// MinAmountMinor and MaxAmountMinor bound the held amount; zero is no bound.
	MinAmountMinor int64
	MaxAmountMinor int64
	// OlderThan and YoungerThan bound the age (from creation).
	OlderThan   time.Duration
	YoungerThan time.Duration
	// DeadlineBefore keeps obligations whose compensation deadline is
	// before it.
	DeadlineBefore time.Time
	// Snoozed defaults to SnoozedHide.
	Snoozed SnoozeFilter
	// Sort defaults to SortOldest.
	Sort  QueueSort
	After QueueCursor
	// Limit defaults to 50, at most 200.
	Limit int
}

// QueueRow is one obligation of the queue, with its case.
type QueueRow struct {
	ObligationRow
	Case              Case
	PendingWriteOffID uuid.UUID
	// Cursor is the position just after this row.
	Cursor QueueCursor
}

// QueuePage is one page of the queue.
type QueuePage struct {
	Rows []QueueRow
	// Next is the cursor of the next page; zero on the last page.
	Next QueueCursor
	// AsOf is the time ages and snoozes are measured at.
	AsOf time.Time
}

// Validate checks q and fills in its defaults.
func (q QueueQuery) Validate() (QueueQuery, error) {
	var err error
	if q.States, err = checkStates("state", q.States, PendingObligationStates); err != nil {
		return q, err
	}
	if q.Currency != "" {
		if err := ledger.CheckCurrency("currency", q.Currency); err != nil {
			return q, err
		}
	}
	switch {
	case q.MinAmountMinor < 0:
		return q, ledger.Invalid("min_amount", "must not be negative")
	case q.MaxAmountMinor < 0:
		return q, ledger.Invalid("max_amount", "must not be negative")
	case q.MaxAmountMinor > 0 && q.MinAmountMinor > q.MaxAmountMinor:
		return q, ledger.Invalid("max_amount", "must not be below the minimum")
	case q.OlderThan < 0:
		return q, ledger.Invalid("older_than", "must not be negative")
	case q.YoungerThan < 0:
		return q, ledger.Invalid("younger_than", "must not be negative")
	case len(q.Owner) > maxOwnerLen:
		return q, ledger.Invalid("owner", "is at most %d characters", maxOwnerLen)
	}
	switch q.Snoozed {
	case "":
		q.Snoozed = SnoozedHide
	case SnoozedHide, SnoozedShow, SnoozedOnly:
	default:
		return q, ledger.Invalid("snoozed", "must be hide, show or only")
	}
	if q.Sort == "" {
		q.Sort = SortOldest
	} else if !slices.Contains(QueueSorts, q.Sort) {
		return q, ledger.Invalid("sort", "must be one of oldest, newest, amount_desc, amount_asc, deadline")
	}
	switch {
	case q.Limit == 0:
		q.Limit = defaultQueueLn
	case q.Limit < 1 || q.Limit > maxQueueLimit:
		return q, ledger.Invalid("limit", "must be between 1 and %d", maxQueueLimit)
	}
	return q, nil
}

// Queue returns one page of obligations with their cases. Orchestrators
// may not read it (finance and on-call only).
func (c *Cases) Queue(ctx context.Context, p ledger.Principal, q QueueQuery) (QueuePage, error) {
	if err := ledger.Authorize(p, ledger.ActionReadReports); err != nil {
		return QueuePage{}, err
	}
	q, err := q.Validate()
	if err != nil {
		return QueuePage{}, err
	}
	now := c.Now()
	rows, err := c.store.Queue(ctx, q, now)
	if err != nil {
		return QueuePage{}, err
	}
	page := QueuePage{Rows: rows, AsOf: now}
	if len(rows) == q.Limit {
		page.Next = rows[len(rows)-1].Cursor
	}
	return page, nil
}
