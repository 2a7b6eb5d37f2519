package pgstore

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

// CheckServedReads compares, for every delegation in the database (up to
// a thousand), each read a flush's pre-read serves (served.go) with the
// answer of the statement itself, decoded alike: the served columns must
// be the statement's, in its order.
func CheckServedReads(ctx context.Context, pool *pgxpool.Pool) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read only
	rows, err := tx.Query(ctx, `SELECT id, org_id, coalesce(remote_task_id, '') FROM delegations ORDER BY id LIMIT 1000`)
	if err != nil {
		return err
	}
	var p dbsqlc.DelegationsServedForFlushParams
	p.Ids, p.OrgIds, p.TaskIds = []uuid.UUID{}, []string{}, []string{}
	for rows.Next() {
		var id uuid.UUID
		var org, task string
		if err := rows.Scan(&id, &org, &task); err != nil {
			return err
		}
		if task == "" || len(p.Ids)%2 == 0 { // half of those recording a task found by it alone
			p.Ids = append(p.Ids, id)
		} else {
			p.OrgIds, p.TaskIds = append(p.OrgIds, org), append(p.TaskIds, task)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	rec := &planRecorder{}
	_, _ = newQueries(rec).DelegationsServedForFlush(ctx, p)
	servedRows, err := tx.Query(ctx, rec.statements[0].sql, rec.statements[0].args...)
	if err != nil {
		return err
	}
	r := &servedReads{}
	if err := r.readRows(servedRows); err != nil {
		return err
	}
	own, served := dbsqlc.New(tx), dbsqlc.New(servedDB{r})
	for id, row := range r.rows {
		checks := []struct {
			name string
			read func(q *dbsqlc.Queries) (any, error)
		}{
			{"DelegationGetByIDForUpdateWithDispatch", func(q *dbsqlc.Queries) (any, error) {
				return q.DelegationGetByIDForUpdateWithDispatch(ctx, id)
			}},
			{"EvidenceFactsGet", func(q *dbsqlc.Queries) (any, error) { return q.EvidenceFactsGet(ctx, id) }},
			{"GatePolicy", func(q *dbsqlc.Queries) (any, error) {
				return q.GatePolicy(ctx, dbsqlc.GatePolicyParams{DelegationID: id, Tenant: row.tenant, TaskClass: row.taskClass, OrgID: row.orgID})
			}},
			{"OrgGetByID", func(q *dbsqlc.Queries) (any, error) { return q.OrgGetByID(ctx, row.orgID) }},
		}
		if row.recordsTask {
			task := row.taskID
			checks = append(checks, struct {
				name string
				read func(q *dbsqlc.Queries) (any, error)
			}{"DelegationListByRemoteTaskForUpdate", func(q *dbsqlc.Queries) (any, error) {
				return q.DelegationListByRemoteTaskForUpdate(ctx, dbsqlc.DelegationListByRemoteTaskForUpdateParams{OrgID: row.orgID, RemoteTaskID: &task})
			}})
		}
		for _, c := range checks {
			want, err := c.read(own)
			if err != nil {
				return fmt.Errorf("%s of %s: %w", c.name, id, err)
			}
			got, err := c.read(served)
			if err != nil {
				return fmt.Errorf("%s of %s, served: %w", c.name, id, err)
			}
			if !reflect.DeepEqual(got, want) {
				return fmt.Errorf("%s of %s: served %+v, the statement's %+v", c.name, id, got, want)
			}
		}
	}
	return checkServedPairs(ctx, tx)
}

// checkServedPairs compares the served CreationReferences of every
// delegation's org and budget, and UsedTokenGet of every used token id,
// each with one pair that names no row, with the statements' answers.
func checkServedPairs(ctx context.Context, tx pgx.Tx) error {
	own := dbsqlc.New(tx)
	pairs := func(sql string) (firsts, seconds []string, err error) {
		rows, err := tx.Query(ctx, sql)
		if err != nil {
			return nil, nil, err
		}
		for rows.Next() {
			var a, b string
			if err := rows.Scan(&a, &b); err != nil {
				return nil, nil, err
			}
			firsts, seconds = append(firsts, a), append(seconds, b)
		}
		return append(firsts, "no-such-org"), append(seconds, "no-such-row"), rows.Err()
	}
	checks := []struct {
		pairs string
		queue func(q *dbsqlc.Queries, a, b []string)
		read  func(q *dbsqlc.Queries, a, b string) (any, error)
	}{
		{`SELECT DISTINCT org_id, budget_id FROM delegations LIMIT 200`,
			func(q *dbsqlc.Queries, a, b []string) {
				_, _ = q.CreationReferencesForFlush(ctx, dbsqlc.CreationReferencesForFlushParams{OrgIds: a, BudgetIds: b})
			},
			func(q *dbsqlc.Queries, a, b string) (any, error) {
				return q.CreationReferences(ctx, dbsqlc.CreationReferencesParams{OrgID: a, BudgetID: b})
			}},
		{`SELECT org_id, jti FROM used_token_ids LIMIT 200`,
			func(q *dbsqlc.Queries, a, b []string) {
				_, _ = q.UsedTokensForFlush(ctx, dbsqlc.UsedTokensForFlushParams{OrgIds: a, Jtis: b})
			},
			func(q *dbsqlc.Queries, a, b string) (any, error) {
				return q.UsedTokenGet(ctx, dbsqlc.UsedTokenGetParams{OrgID: a, Jti: b})
			}},
	}
	for _, c := range checks {
		firsts, seconds, err := pairs(c.pairs)
		if err != nil {
			return err
		}
		rec := &planRecorder{}
		c.queue(newQueries(rec), firsts, seconds)
		a := newPairAnswers(firsts, seconds, nil)
		rows, err := tx.Query(ctx, rec.statements[0].sql, rec.statements[0].args...)
		if err != nil {
			return err
		}
		if err := a.readRows(rows); err != nil {
			return err
		}
		served := dbsqlc.New(servedDB{a})
		for i := range firsts {
			want, wantErr := c.read(own, firsts[i], seconds[i])
			got, gotErr := c.read(served, firsts[i], seconds[i])
			if !errors.Is(gotErr, wantErr) && (gotErr == nil || wantErr == nil || gotErr.Error() != wantErr.Error()) {
				return fmt.Errorf("%s of %s, %s: served error %v, the statement's %v", statementName(rec.statements[0].sql), firsts[i], seconds[i], gotErr, wantErr)
			}
			if !reflect.DeepEqual(got, want) {
				return fmt.Errorf("%s of %s, %s: served %+v, the statement's %+v", statementName(rec.statements[0].sql), firsts[i], seconds[i], got, want)
			}
		}
	}
	return nil
}

// servedDB answers the reads the pre-read serves from r, and nothing else.
type servedDB struct{ r servedSource }

var errNotServed = errors.New("not served")

func (d servedDB) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, errNotServed
}

func (d servedDB) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
	res, _, ok := d.r.answer(sql, args)
	if !ok {
		return nil, errNotServed
	}
	return &keptRows{res: res}, nil
}

func (d servedDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := d.Query(ctx, sql, args...)
	if err != nil {
		return errRow{err}
	}
	return keptRow{rows: rows.(*keptRows)}
}
