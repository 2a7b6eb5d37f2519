package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

// InvariantReport is what CheckInvariants found in the database.
type InvariantReport struct {
	// Violations describes every broken invariant, one readable sentence
	// each, naming the budget, delegation, stream or event concerned. It is
	// empty when the database is consistent.
	Violations []string
	// Budgets is the number of budgets checked.
	Budgets int
	// Delegations maps every delegation checked to its obligation state as
	// the row records it.
	Delegations map[uuid.UUID]ledger.ObligationState
	// Events is the number of events checked.
	Events int
	// Streams is the number of event streams checked.
	Streams int
}

// fail records a violation.
func (r *InvariantReport) fail(format string, args ...any) {
	r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
}

// CheckInvariants re-checks the invariants of ledger/DESIGN.md §2.2 straight from
// the rows in pool's database, trusting none of the application's code
// paths:
//   - per budget: available + held + spent + written_off = funded, no
//     column is negative, held is the sum of the active holds, spent the sum
//     of what the settled delegations spent (their settled amounts) and
//     the compensated ones spent (the unreversed part of their holds),
//     written_off the sum of the written-off holds, and the budget journal
//     adds up to every column;
//   - per delegation: its journal starts with its hold, and the entries
//     add up to its amounts (checkDelegationJournal): while active, it
//     holds its hold; once ended, nothing, having spent the settled amount
//     or the unreversed part and written off the hold or nothing, as its
//     state says; the settled and reversed amounts are set exactly in
//     their states;
//   - per delegation: pending_write_off_id names its write-off awaiting
//     approval, and is empty when it has none; it is written_off exactly
//     when it has an executed write-off, one, of its amount;
//   - per delegation: its stream has events, the first is
//     delegation_created, and the events carrying an obligation transition
//     form a path of allowed transitions (ledger.NextObligation on the
//     event's obligation_event) from held to the row's state, so no hold
//     left active without its evidence event;
//   - per delegation: no hold left active without a matching evidence row,
//     and no evidence row was applied without moving one
//     (checkEvidence, which defines "matching");
//   - per release on a revoked identity: one acknowledged has its
//     revoked_release_acknowledged event (written in the same transaction);
//   - every event stream's hash chain verifies (ledger.VerifyChain), each
//     event's jsonb data equals the data its hash covers (hashed_data),
//     and every delegation stream belongs to an existing delegation.
//
// Broken invariants are reported in the report's Violations; the error is
// non-nil only when the database could not be read, and the report then
// holds what was found before the failure. CheckInvariants reads every
// event into memory: it is meant for tests and offline checks, not for a
// serving path.
func CheckInvariants(ctx context.Context, pool *pgxpool.Pool) (InvariantReport, error) {
	rep := InvariantReport{Delegations: map[uuid.UUID]ledger.ObligationState{}}
	// One snapshot for every read, so a write committing meanwhile cannot
	// show as a violation between two of them.
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return rep, fmt.Errorf("begin invariant check: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
	q := newQueries(tx)
	if err := checkBudgets(ctx, q, &rep); err != nil {
		return rep, err
	}
	delegations, err := checkJournal(ctx, q, &rep)
	if err != nil {
		return rep, err
	}
	mismatches, err := q.DelegationPendingWriteOffMismatches(ctx)
	if err != nil {
		return rep, fmt.Errorf("list pending write-offs: %w", err)
	}
	for _, m := range mismatches {
		rep.fail("delegation %s: pending_write_off_id is %s, its write-off awaiting approval is %s",
			m.ID, nullID(m.PendingWriteOffID), nullID(m.PendingID))
	}
	writeOffs, err := q.DelegationWriteOffMismatches(ctx)
	if err != nil {
		return rep, fmt.Errorf("list executed write-offs: %w", err)
	}
	for _, m := range writeOffs {
		rep.fail("delegation %s (%s, %d): %d executed write-offs of %d in total, want one of the hold exactly when written off",
			m.ID, m.ObligationState, m.AmountMinor, m.Executed, m.ExecutedMinor)
	}
	unannounced, err := q.RevokedReleaseListAcknowledgedWithoutEvent(ctx)
	if err != nil {
		return rep, fmt.Errorf("list acknowledged releases on revoked identities: %w", err)
	}
	for _, r := range unannounced {
		rep.fail("delegation %s: its release on a revoked identity is acknowledged (at %s) with no revoked_release_acknowledged event",
			r.DelegationID, r.AcknowledgedAt.UTC().Format(time.RFC3339Nano))
	}
	rows, err := q.EventListAll(ctx)
	if err != nil {
		return rep, fmt.Errorf("list events: %w", err)
	}
	streams := map[string][]ledger.Event{}
	for _, row := range rows {
		e := toEvent(row.Event)
		streams[e.Stream] = append(streams[e.Stream], e)
		if !row.DataMatchesHashed {
			rep.fail("%v", &ledger.ChainError{Stream: e.Stream, StreamSeq: e.StreamSeq, Problem: "data does not equal the data its hash covers"})
		}
	}
	rep.Events, rep.Streams = len(rows), len(streams)
	checkTransitions(delegations, streams, &rep)
	if err := checkHoldEvidence(ctx, q, streams, &rep); err != nil {
		return rep, err
	}
	checkChains(streams, &rep)
	return rep, nil
}

// activeStates returns the obligation states whose hold is active, as the
// state machine defines them.
func activeStates() []string {
	var out []string
	for _, s := range ledger.ObligationStates {
		if s.Hold() == ledger.HoldActive {
			out = append(out, string(s))
		}
	}
	return out
}

// checkBudgets checks every budget's columns against each other, against
// its delegations and against its journal.
func checkBudgets(ctx context.Context, q *dbsqlc.Queries, rep *InvariantReport) error {
	rows, err := q.BudgetListWithTotals(ctx, activeStates())
	if err != nil {
		return fmt.Errorf("list budgets: %w", err)
	}
	for _, b := range rows {
		rep.Budgets++
		if b.AvailableMinor+b.HeldMinor+b.SpentMinor+b.WrittenOffMinor != b.FundedMinor {
			rep.fail("budget %s: available %d + held %d + spent %d + written_off %d != funded %d",
				b.ID, b.AvailableMinor, b.HeldMinor, b.SpentMinor, b.WrittenOffMinor, b.FundedMinor)
		}
		if b.AvailableMinor < 0 || b.HeldMinor < 0 || b.SpentMinor < 0 || b.WrittenOffMinor < 0 {
			rep.fail("budget %s: a negative column: available %d, held %d, spent %d, written_off %d",
				b.ID, b.AvailableMinor, b.HeldMinor, b.SpentMinor, b.WrittenOffMinor)
		}
		if b.HeldMinor != b.ActiveSum {
			rep.fail("budget %s: held %d != sum of active holds %d", b.ID, b.HeldMinor, b.ActiveSum)
		}
		if b.SpentMinor != b.SettledSum {
			rep.fail("budget %s: spent %d != what its settled and compensated delegations spent, %d", b.ID, b.SpentMinor, b.SettledSum)
		}
		if b.WrittenOffMinor != b.WrittenOffSum {
			rep.fail("budget %s: written_off %d != sum of written-off delegations %d", b.ID, b.WrittenOffMinor, b.WrittenOffSum)
		}
		if b.JournalFunded != b.FundedMinor || b.JournalHeld != b.HeldMinor || b.JournalSpent != b.SpentMinor || b.JournalWrittenOff != b.WrittenOffMinor {
			rep.fail("budget %s: journal (funded %d, held %d, spent %d, written_off %d) disagrees with the row (%d, %d, %d, %d)",
				b.ID, b.JournalFunded, b.JournalHeld, b.JournalSpent, b.JournalWrittenOff,
				b.FundedMinor, b.HeldMinor, b.SpentMinor, b.WrittenOffMinor)
		}
	}
	return nil
}

// checkJournal checks every delegation's journal entries against its hold
// state, records the delegation in rep, and returns the delegation ids in
// id order.
func checkJournal(ctx context.Context, q *dbsqlc.Queries, rep *InvariantReport) ([]uuid.UUID, error) {
	rows, err := q.DelegationListWithEntries(ctx)
	if err != nil {
		return nil, fmt.Errorf("list delegations: %w", err)
	}
	ids := make([]uuid.UUID, 0, len(rows))
	for _, d := range rows {
		st := ledger.ObligationState(d.ObligationState)
		rep.Delegations[d.ID] = st
		ids = append(ids, d.ID)
		checkDelegationJournal(d, st, rep)
	}
	return ids, nil
}

// checkDelegationJournal checks one delegation's journal entries against
// the amounts its row records (ledger/DESIGN.md §2.3): the first entry is its
// hold; while the hold is active, later holds and returns only raise and
// cut it, and what it holds net is its hold; once it left active, nothing
// is held, what was spent is the settled amount (settled) or the
// unreversed part of the hold (compensated) and nothing otherwise, and
// what was written off is the hold (written_off) or nothing.
func checkDelegationJournal(d dbsqlc.DelegationListWithEntriesRow, st ledger.ObligationState, rep *InvariantReport) {
	if len(d.EntryKinds) == 0 || d.EntryKinds[0] != string(ledger.MoveHold) {
		rep.fail("delegation %s (%s): journal entries %v, want a hold first", d.ID, st, d.EntryKinds)
		return
	}
	var net, spent, writtenOff int64
	for i, kind := range d.EntryKinds {
		a := d.EntryAmounts[i]
		if a <= 0 {
			rep.fail("delegation %s: journal entry %d (%s) of %d, want a positive amount", d.ID, i, kind, a)
		}
		switch ledger.BudgetMoveKind(kind) {
		case ledger.MoveHold:
			net += a
		case ledger.MoveSpend:
			net -= a
			spent += a
		case ledger.MoveReturn:
			net -= a
		case ledger.MoveWriteOff:
			net -= a
			writtenOff += a
		case ledger.MoveFund:
			rep.fail("delegation %s: a fund entry in its journal", d.ID)
		}
		if net < 0 {
			rep.fail("delegation %s: journal entry %d (%s) takes out more than is held", d.ID, i, kind)
		}
	}
	var wantNet, wantSpent, wantWrittenOff int64
	switch st.Hold() {
	case ledger.HoldActive:
		wantNet = d.AmountMinor
	case ledger.HoldConsumed:
		wantSpent = d.SettledAmountMinor.Int64
	case ledger.HoldReturned:
		if st == ledger.ObligationCompensated {
			wantSpent = d.AmountMinor - d.ReversedAmountMinor.Int64
		}
	case ledger.HoldLost:
		wantWrittenOff = d.AmountMinor
	}
	if net != wantNet || spent != wantSpent || writtenOff != wantWrittenOff {
		rep.fail("delegation %s (%s, hold %d, settled %v, reversed %v): journal holds %d, spent %d, wrote off %d; want %d, %d, %d",
			d.ID, st, d.AmountMinor, nullAmount(d.SettledAmountMinor), nullAmount(d.ReversedAmountMinor),
			net, spent, writtenOff, wantNet, wantSpent, wantWrittenOff)
	}
	if (st == ledger.ObligationSettled) != d.SettledAmountMinor.Valid || (st == ledger.ObligationCompensated) != d.ReversedAmountMinor.Valid {
		rep.fail("delegation %s (%s): settled amount %v, reversed amount %v, want each set exactly in its state",
			d.ID, st, nullAmount(d.SettledAmountMinor), nullAmount(d.ReversedAmountMinor))
	}
}

// nullAmount is an amount as text, or "none".
func nullAmount(a pgtype.Int8) string {
	if !a.Valid {
		return "none"
	}
	return fmt.Sprint(a.Int64)
}

// checkTransitions checks that each delegation's events form a path of
// allowed obligation transitions from held to the state rep records for it.
func checkTransitions(delegations []uuid.UUID, streams map[string][]ledger.Event, rep *InvariantReport) {
	for _, id := range delegations {
		events := streams[ledger.DelegationStream(id)]
		if len(events) == 0 {
			rep.fail("delegation %s has no events", id)
			continue
		}
		if events[0].Type != ledger.EventTypeDelegationCreated {
			rep.fail("delegation %s: first event is %s, not %s", id, events[0].Type, ledger.EventTypeDelegationCreated)
		}
		state := ledger.ObligationHeld
		for _, ev := range events {
			if ev.ObligationFrom == "" && ev.ObligationTo == "" {
				continue
			}
			var data struct {
				ObligationEvent ledger.ObligationEvent `json:"obligation_event"`
			}
			_ = json.Unmarshal(ev.Data, &data) // a missing event fails NextObligation below
			next, _, err := ledger.NextObligation(ev.ObligationFrom, data.ObligationEvent)
			switch {
			case ev.ObligationFrom != state:
				rep.fail("delegation %s event %d: transition from %s, but the obligation was %s", id, ev.StreamSeq, ev.ObligationFrom, state)
			case err != nil || next != ev.ObligationTo:
				rep.fail("delegation %s event %d: %s -%s-> %s is not an allowed transition", id, ev.StreamSeq, ev.ObligationFrom, data.ObligationEvent, ev.ObligationTo)
			}
			state = ev.ObligationTo
		}
		if want := rep.Delegations[id]; state != want {
			rep.fail("delegation %s: its events lead to %s, the row says %s", id, state, want)
		}
	}
}

// CheckHoldEvidence re-checks one of CheckInvariants' invariants alone: no
// hold left active without a matching evidence row, and no applied
// evidence row discharged nothing (checkEvidence). It reads the evidence
// rows and only the events that carry a transition, in one snapshot, so a
// test can afford it after every step. As CheckInvariants, it reports the
// violations and errs only when the database could not be read.
func CheckHoldEvidence(ctx context.Context, pool *pgxpool.Pool) ([]string, error) {
	var rep InvariantReport
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("begin evidence check: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
	q := newQueries(tx)
	rows, err := q.EventListTransitions(ctx)
	if err != nil {
		return nil, fmt.Errorf("list transitions: %w", err)
	}
	streams := map[string][]ledger.Event{}
	for _, row := range rows {
		e := toEvent(row)
		streams[e.Stream] = append(streams[e.Stream], e)
	}
	err = checkHoldEvidence(ctx, q, streams, &rep)
	return rep.Violations, err
}

// checkHoldEvidence runs checkEvidence on every delegation, with its
// stream's events from streams (all of them, or those with a transition).
func checkHoldEvidence(ctx context.Context, q *dbsqlc.Queries, streams map[string][]ledger.Event, rep *InvariantReport) error {
	evidence, err := q.DelegationEvidenceList(ctx)
	if err != nil {
		return fmt.Errorf("list evidence: %w", err)
	}
	for _, d := range evidence {
		checkEvidence(d, streams[ledger.DelegationStream(d.ID)], rep)
	}
	return nil
}

// checkEvidence checks that d's hold did not leave active without a
// matching evidence row (ledger/DESIGN.md §2.2 invariant 1). The hold leaves
// active at its exit: the one event of d's stream whose transition goes
// from an active state to one that is not. An evidence row is what the
// ledger keeps of the evidence: the compensation_evidence row for an ack
// or a declaration (a posted token or an A2A receipt, migration 00013),
// the executed write_offs row for a write-off, and for a terminal status —
// which has no other row — the append-only status event itself. The exit
// matches its evidence row when, by the state d ended in:
//   - settled: the exit is a task_status_changed event with state
//     completed and obligation_event task_completed, and its
//     settled_amount_minor (the whole hold on events written before
//     migration 00017, which had none) is d's;
//   - released on rejected_before_work: the exit is a task_status_changed
//     event with state rejected;
//   - released on gate_not_required: the exit is a task_status_changed
//     event with state canceled or failed and gate_applies false;
//   - released on no_compensation_declared, or compensated: d's
//     compensation_evidence row is of kind declaration_verified
//     (compensation_ack) with status applied, decided at the exit's time;
//     the exit is the no_compensation_declared (compensation_acked) event,
//     or the task_status_changed event that applied evidence received
//     early; and, compensated, the row's reversed amount (the whole hold
//     when it names none, at most the hold) is d's reversed_amount_minor;
//   - written_off: the exit is a write_off_executed event naming, as
//     write_off_id, one of d's executed write-offs.
//
// Conversely an applied evidence row belongs to a delegation it
// discharged: one compensated on an ack, or released on a declaration.
func checkEvidence(d dbsqlc.DelegationEvidenceListRow, events []ledger.Event, rep *InvariantReport) {
	st := ledger.ObligationState(d.ObligationState)
	applied := d.EvidenceStatus == string(ledger.EvidenceApplied)
	if st.Hold() == ledger.HoldActive {
		if applied {
			rep.fail("delegation %s (%s): an applied %s evidence row, but its hold is active", d.ID, st, d.EvidenceKind)
		}
		return
	}
	exit := holdExit(events)
	if exit == nil {
		rep.fail("delegation %s (%s): its hold left active, and no event of its stream moved it", d.ID, st)
		return
	}
	var data exitData
	_ = json.Unmarshal(exit.Data, &data) // missing members fail the checks below
	if problem := exitMismatch(d, exit, data); problem != "" {
		rep.fail("delegation %s (%s): its hold left active at event %d (%s) without a matching evidence row: %s",
			d.ID, st, exit.StreamSeq, exit.Type, problem)
	}
	if applied && st != ledger.ObligationCompensated && !(st == ledger.ObligationReleased && data.Reason == ledger.ReasonNoCompensationDeclared) {
		rep.fail("delegation %s (%s): an applied %s evidence row, but it was not discharged on it", d.ID, st, d.EvidenceKind)
	}
}

// holdExit is the last event of a delegation's stream that moved its
// hold out of active, or nil.
func holdExit(events []ledger.Event) *ledger.Event {
	var exit *ledger.Event
	for i, e := range events {
		if e.ObligationFrom != "" && e.ObligationFrom.Hold() == ledger.HoldActive && e.ObligationTo.Hold() != ledger.HoldActive {
			exit = &events[i]
		}
	}
	return exit
}

// exitData is what checkEvidence reads of the data of the event that
// moved a hold out of active.
type exitData struct {
	State              ledger.TaskStatus      `json:"state"`
	ObligationEvent    ledger.ObligationEvent `json:"obligation_event"`
	Reason             string                 `json:"reason"`
	GateApplies        *bool                  `json:"gate_applies"`
	SettledAmountMinor *int64                 `json:"settled_amount_minor"`
	WriteOffID         string                 `json:"write_off_id"`
}

// exitMismatch says how the event exit that moved d's hold out of active
// (its data in data) does not match d's state and evidence row, or ""
// when it matches (the cases of checkEvidence).
func exitMismatch(d dbsqlc.DelegationEvidenceListRow, exit *ledger.Event, data exitData) string {
	st := ledger.ObligationState(d.ObligationState)
	applied := d.EvidenceStatus == string(ledger.EvidenceApplied)
	problem := ""
	mismatch := func(format string, args ...any) {
		if problem == "" {
			problem = fmt.Sprintf(format, args...)
		}
	}
	status := exit.Type == ledger.EventTypeTaskStatusChanged
	// discharged checks the evidence row of an ack or a declaration.
	discharged := func(kind ledger.ObligationEvent, typ ledger.EventType) {
		switch {
		case d.EvidenceKind != string(kind) || !applied:
			mismatch("no applied %s evidence row (its row: %q, %q)", kind, d.EvidenceKind, d.EvidenceStatus)
		case d.EvidenceDecidedAt == nil || !d.EvidenceDecidedAt.Equal(exit.At):
			mismatch("its %s evidence row was decided at %v, not at the exit's time", kind, d.EvidenceDecidedAt)
		case exit.Type != typ && !(status && ledger.UsesHeldEvidence(data.ObligationEvent)):
			mismatch("the exit is a %s event, not %s nor a status applying early evidence", exit.Type, typ)
		}
	}
	switch {
	case st == ledger.ObligationSettled:
		settled := settledAmount(data.SettledAmountMinor, d.AmountMinor)
		switch {
		case !status || data.State != ledger.StatusCompleted || data.ObligationEvent != ledger.EventTaskCompleted:
			mismatch("settled by a %s event (state %q, %s), not a completed status", exit.Type, data.State, data.ObligationEvent)
		case !d.SettledAmountMinor.Valid || settled != d.SettledAmountMinor.Int64:
			mismatch("its status event settled %d, the row says %s", settled, nullAmount(d.SettledAmountMinor))
		}
	case st == ledger.ObligationReleased && data.Reason == ledger.ReasonRejectedBeforeWork:
		if !status || data.State != ledger.StatusRejected {
			mismatch("released as rejected by a %s event with state %q", exit.Type, data.State)
		}
	case st == ledger.ObligationReleased && data.Reason == ledger.ReasonGateNotRequired:
		if !status || (data.State != ledger.StatusCanceled && data.State != ledger.StatusFailed) || data.GateApplies == nil || *data.GateApplies {
			mismatch("released as ungated by a %s event with state %q, gate_applies %v", exit.Type, data.State, data.GateApplies)
		}
	case st == ledger.ObligationReleased && data.Reason == ledger.ReasonNoCompensationDeclared:
		discharged(ledger.EventDeclarationVerified, ledger.EventTypeNoCompensationDeclared)
	case st == ledger.ObligationCompensated:
		discharged(ledger.EventCompensationAck, ledger.EventTypeCompensationAcked)
		reversed, err := ledger.StoredEvidence{DelegationID: d.ID, Data: d.EvidenceData}.ReversedAmountMinor(d.AmountMinor)
		want := d.AmountMinor
		if reversed != nil {
			want = *reversed
		}
		if err != nil || !d.ReversedAmountMinor.Valid || d.ReversedAmountMinor.Int64 != want {
			mismatch("its evidence row reversed %d (%v), the row says %s", want, err, nullAmount(d.ReversedAmountMinor))
		}
	case st == ledger.ObligationWrittenOff:
		if exit.Type != ledger.EventTypeWriteOffExecuted || !slices.Contains(d.ExecutedWriteOffs, data.WriteOffID) {
			mismatch("written off by a %s event naming write-off %q, not one of its executed write-offs %v", exit.Type, data.WriteOffID, d.ExecutedWriteOffs)
		}
	default:
		mismatch("released with reason %q, which no evidence explains", data.Reason)
	}
	return problem
}

// checkChains verifies every stream's hash chain, and that every delegation
// stream names an existing delegation, in stream order.
func checkChains(streams map[string][]ledger.Event, rep *InvariantReport) {
	for _, stream := range slices.Sorted(maps.Keys(streams)) {
		if err := ledger.VerifyChain(streams[stream]); err != nil {
			rep.fail("%v", err)
		}
		raw, ok := strings.CutPrefix(stream, "delegation:")
		if !ok {
			continue
		}
		id, err := uuid.Parse(raw)
		if err != nil {
			rep.fail("stream %s: not a delegation id", stream)
			continue
		}
		if _, ok := rep.Delegations[id]; !ok {
			rep.fail("stream %s: no such delegation", stream)
		}
	}
}

// nullID is id as text, or "none".
func nullID(id uuid.NullUUID) string {
	if !id.Valid {
		return "none"
	}
	return id.UUID.String()
}
