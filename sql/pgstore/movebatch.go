package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

// pendingMove is a budget movement kept by MoveBudget until its
// transaction's end, with the operation (owner) that made it.
type pendingMove struct {
	move  ledger.BudgetMove
	owner int
}

// queueMoves queues the transaction's kept movements one statement each
// (BudgetMoveBatch of one movement), sorted by budget (stable: one
// budget's in the order they were made), so that the CHECK constraints
// judge every movement as it is made and no overdraft can hide behind a
// later credit. It serves where the movements were not played against the
// budgets' locked amounts first: a transaction alone, which would pay a
// round trip for that lock before its COMMIT, and a read of a budget
// mid-transaction (BudgetForUpdate). A flush's movements are checked and
// sent in one statement instead (checkFunds, queueMoveBatch).
func (t *tx) queueMoves() error {
	moves := t.moves
	t.moves = nil
	conn := t.conn.conn
	if len(moves) > 0 && conn.closed {
		return errors.New("transaction already closed")
	}
	slices.SortStableFunc(moves, func(a, b pendingMove) int { return strings.Compare(a.move.BudgetID, b.move.BudgetID) })
	for _, m := range moves {
		one := []pendingMove{m}
		conn.queueMoveStatement(one, func(r dbsqlc.BudgetMoveBatchRow, err error) error {
			if err != nil {
				return moveError(m.move, err)
			}
			if r.Budgets != 1 || r.Entries != 1 {
				// The statement cannot succeed without moving the budget
				// (its journal's foreign key); this is the last guard,
				// should it ever change.
				return fmt.Errorf("%s %d on budget %s: moved %d budgets, journaled %d movements",
					m.move.Kind, m.move.AmountMinor, m.move.BudgetID, r.Budgets, r.Entries)
			}
			return nil
		}, nil)
	}
	return nil
}

// queueMoveBatch queues moves, a flush's in arrival order (checkFunds), in
// one statement: one journal row each, one update of each budget by the
// net of its movements. checkFunds has locked the budgets (locked holds
// each one that exists) and played the movements one by one against them,
// refusing every operation a movement of which its budget could not
// cover, so the net change of each budget is one the movements made one at
// a time would have reached without taking a column below zero. A budget
// that does not exist fails the journal's foreign key: the operation that
// moved it is refused when it is the only one to have moved a budget
// missing from locked; else no one operation is (the flush replays its
// operations one at a time).
func (b *txConn) queueMoveBatch(moves []pendingMove, locked map[string]*fundsBalance) {
	all := make(owners, 0, len(moves))
	var missing owners
	var first ledger.BudgetMove
	budgets := map[string]bool{}
	for _, m := range moves {
		all = append(all, m.owner)
		budgets[m.move.BudgetID] = true
		if locked[m.move.BudgetID] == nil {
			if len(missing) == 0 {
				first = m.move
			}
			missing = append(missing, m.owner)
		}
	}
	culprit := all.sole()
	b.queueMoveStatement(moves, func(r dbsqlc.BudgetMoveBatchRow, err error) error {
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr) && pgErr.ConstraintName == "budget_entries_budget_id_fkey" && len(missing) > 0:
			if culprit = missing.sole(); culprit > 0 {
				return moveError(first, err)
			}
			return fmt.Errorf("move %d budgets by %d movements: %w", len(budgets), len(moves), err)
		case err != nil:
			return fmt.Errorf("move %d budgets by %d movements: %w", len(budgets), len(moves), err)
		case int(r.Budgets) != len(budgets) || int(r.Entries) != len(moves):
			return fmt.Errorf("move %d budgets by %d movements: moved %d, journaled %d", len(budgets), len(moves), r.Budgets, r.Entries)
		}
		return nil
	}, func() int { return culprit })
}

// queueMoveStatement queues the BudgetMoveBatch of moves, refused by an
// error, so that the COMMIT may ride with it: check judges its row (or
// its error), and a refusal is blame's operation's, or, without blame,
// that of the operation that made every movement (owners.sole).
func (b *txConn) queueMoveStatement(moves []pendingMove, check func(dbsqlc.BudgetMoveBatchRow, error) error, blame func() int) {
	var p dbsqlc.BudgetMoveBatchParams
	o := make(owners, 0, len(moves))
	for _, pm := range moves {
		m := pm.move
		o = append(o, pm.owner)
		p.BudgetIds = append(p.BudgetIds, m.BudgetID)
		p.Kinds = append(p.Kinds, string(m.Kind))
		p.Amounts = append(p.Amounts, m.AmountMinor)
		id := ""
		if m.DelegationID != uuid.Nil {
			id = m.DelegationID.String()
		}
		p.DelegationIds = append(p.DelegationIds, id)
		p.Ats = append(p.Ats, m.At)
	}
	var row dbsqlc.BudgetMoveBatchRow
	st := queuedStatement{
		refusal: refusedByError,
		read: func(br pgx.BatchResults) error {
			return br.QueryRow().Scan(&row.Budgets, &row.Entries)
		},
		check: func(_ pgconn.CommandTag, err error) error { return check(row, err) },
		blame: blame,
	}
	b.queueBuffered(o, func(q *dbsqlc.Queries) { _, _ = q.BudgetMoveBatch(context.Background(), p) }, st)
}

// moveError is the refusal of m, alone in its statement, that PostgreSQL
// answered with err.
func moveError(m ledger.BudgetMove, err error) error {
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && (pgErr.ConstraintName == "budgets_available_minor_check" || pgErr.ConstraintName == "budgets_held_minor_check"):
		return moveRefused(m, pgErr.ConstraintName == "budgets_available_minor_check")
	case errors.As(err, &pgErr) && pgErr.ConstraintName == "budget_entries_budget_id_fkey":
		return fmt.Errorf("%s %d on budget %s: no such budget", m.Kind, m.AmountMinor, m.BudgetID)
	}
	return fmt.Errorf("%s %d on budget %s: %w", m.Kind, m.AmountMinor, m.BudgetID, err)
}

// moveRefused is the refusal of a movement that would take a budget's
// available amount (available) or another of its amounts below zero.
func moveRefused(m ledger.BudgetMove, available bool) error {
	if available && m.Kind == ledger.MoveHold {
		return fmt.Errorf("hold %d on budget %s: %w", m.AmountMinor, m.BudgetID, ledger.ErrInsufficientFunds)
	}
	return fmt.Errorf("%s %d on budget %s: the amount is not there to move", m.Kind, m.AmountMinor, m.BudgetID)
}

// fundsBalance is a budget's amounts, as movements change them (or the
// signs with which a kind of movement does: moveSigns).
type fundsBalance struct{ funded, available, held, spent, writtenOff int64 }

// moveSigns are the signs with which a movement of kind k changes a
// budget's amounts: BudgetMoveBatch's table, which is the rule.
func moveSigns(k ledger.BudgetMoveKind) fundsBalance {
	switch k {
	case ledger.MoveFund:
		return fundsBalance{funded: 1, available: 1}
	case ledger.MoveHold:
		return fundsBalance{available: -1, held: 1}
	case ledger.MoveSpend:
		return fundsBalance{held: -1, spent: 1}
	case ledger.MoveReturn:
		return fundsBalance{available: 1, held: -1}
	case ledger.MoveWriteOff:
		return fundsBalance{held: -1, writtenOff: 1}
	}
	return fundsBalance{}
}

// moved is b after the movement m.
func (b fundsBalance) moved(m ledger.BudgetMove) fundsBalance {
	s, a := moveSigns(m.Kind), m.AmountMinor
	return fundsBalance{
		funded: b.funded + s.funded*a, available: b.available + s.available*a, held: b.held + s.held*a,
		spent: b.spent + s.spent*a, writtenOff: b.writtenOff + s.writtenOff*a,
	}
}

// overdrawn: an amount is below zero, which the budget's CHECK constraints
// refuse.
func (b fundsBalance) overdrawn() bool {
	return b.funded < 0 || b.available < 0 || b.held < 0 || b.spent < 0 || b.writtenOff < 0
}

// playMoves applies moves, grouped by operation in the order they were
// made, to balances, and returns the refusal of each operation (by its
// index) a movement of which would take an amount below zero; a refused
// operation's movements are not applied. A budget missing from balances is
// left to the statement (its journal's foreign key).
func playMoves(moves []pendingMove, balances map[string]*fundsBalance) map[int]error {
	byOwner := map[int][]ledger.BudgetMove{}
	var order []int
	for _, m := range moves {
		if _, ok := byOwner[m.owner]; !ok {
			order = append(order, m.owner)
		}
		byOwner[m.owner] = append(byOwner[m.owner], m.move)
	}
	refusals := map[int]error{}
	for _, owner := range order {
		trial := map[string]fundsBalance{}
		var refusal error
		for _, m := range byOwner[owner] {
			b, ok := balances[m.BudgetID]
			if !ok {
				continue
			}
			cur, ok := trial[m.BudgetID]
			if !ok {
				cur = *b
			}
			cur = cur.moved(m)
			if cur.overdrawn() {
				refusal = moveRefused(m, cur.available < 0)
				break
			}
			trial[m.BudgetID] = cur
		}
		if refusal != nil {
			refusals[owner-1] = refusal
			continue
		}
		for id, b := range trial {
			*balances[id] = b
		}
	}
	return refusals
}
