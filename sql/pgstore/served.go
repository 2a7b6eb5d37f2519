package pgstore

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// A flush's operations read their delegations before they change them: a
// task status reads the delegation with its dispatch, its gate policy and
// its evidence facts, a piece of evidence the delegations recording its
// remote task, their org and their evidence facts. The pre-read has just
// locked those delegations, so one statement after its lock
// (DelegationsServedForFlush) answers those reads for each delegation it
// locked, and an operation's read is answered from it rather than sent:
// at 12 operations a flush, some 25 statements fewer, and the round trips
// they waited for (cmd/quittance-bench/BENCHMARK.md).
//
// The answer is what the read would have read, provided nothing in the
// transaction changed its rows since the pre-read. A pipelined flush
// guarantees that (pipeline.go) when the operation reading has written
// nothing yet, names every delegation (and remote task) the answer is
// of, and every operation before it in the flush names rows, none of
// them: operations that name no common row touch no common row, an
// operation naming a row runs after every one before it that names it,
// and one naming none (which may write anything) runs alone. Otherwise
// the read is sent, as before (mayServe).

// servedStatements are the reads the pre-read answers, by the marker
// column that begins their columns in its rows.
var servedStatements = map[string]string{
	"served_delegation_get_by_id_for_update_with_dispatch": "DelegationGetByIDForUpdateWithDispatch",
	"served_evidence_facts_get":                            "EvidenceFactsGet",
	"served_gate_policy":                                   "GatePolicy",
}

// Two more reads are answered from the columns of a table within those:
// the delegations recording a remote task (the delegation's own columns
// of DelegationGetByIDForUpdateWithDispatch's) and an org (the org's own
// of GatePolicy's).
const (
	servedByRemoteTask = "DelegationListByRemoteTaskForUpdate"
	servedOrg          = "OrgGetByID"
)

// servable: the pre-read may answer the statement named.
func servable(name string) bool {
	for _, n := range servedStatements {
		if n == name {
			return true
		}
	}
	return name == servedByRemoteTask || name == servedOrg
}

// servedReads are the pre-read's answers, once its result is in.
type servedReads struct {
	answered bool
	typeMap  *pgtype.Map
	fields   []pgconn.FieldDescription
	// columns are each served statement's columns of a row, [from, to).
	columns map[string][2]int
	rows    map[uuid.UUID]servedRow
}

// servedRow is one locked delegation's row of the pre-read: its raw
// values, and the delegation's keys the reads are asked by.
type servedRow struct {
	values                           [][]byte
	orgID, taskID, tenant, taskClass string
	recordsTask                      bool
}

// layout finds the served statements' columns among fields: from each
// marker to the next, and the two reads within them.
func (r *servedReads) layout(fields []pgconn.FieldDescription) error {
	r.fields, r.columns = slices.Clone(fields), map[string][2]int{}
	start, name := -1, ""
	for i := 0; i <= len(fields); i++ {
		next, marker := "", false
		if i < len(fields) {
			next, marker = servedStatements[fields[i].Name]
		}
		if i < len(fields) && !marker {
			continue
		}
		if name != "" {
			r.columns[name] = [2]int{start, i}
		}
		start, name = i+1, next
	}
	if len(r.columns) != len(servedStatements) {
		return fmt.Errorf("the pre-read serves %d reads, not %d", len(r.columns), len(servedStatements))
	}
	r.columns[servedByRemoteTask] = r.ownColumns("DelegationGetByIDForUpdateWithDispatch")
	r.columns[servedOrg] = r.ownColumns("GatePolicy")
	return nil
}

// ownColumns are the leading columns of a served statement's that come
// from one table: those of the row it reads first.
func (r *servedReads) ownColumns(statement string) [2]int {
	c := r.columns[statement]
	end := c[0]
	for end < c[1] && r.fields[end].TableOID != 0 && r.fields[end].TableOID == r.fields[c[0]].TableOID {
		end++
	}
	return [2]int{c[0], end}
}

// add keeps a locked delegation's row, raw (copied: pgx reuses its
// buffers).
func (r *servedReads) add(id uuid.UUID, raw [][]byte) {
	row := servedRow{values: make([][]byte, len(raw))}
	for i, v := range raw {
		row.values[i] = bytes.Clone(v)
	}
	own := r.columns[servedByRemoteTask]
	for i := own[0]; i < own[1]; i++ {
		v := string(row.values[i])
		switch r.fields[i].Name {
		case "org_id":
			row.orgID = v
		case "remote_task_id":
			row.taskID, row.recordsTask = v, row.values[i] != nil
		case "tenant":
			row.tenant = v
		case "task_class":
			row.taskClass = v
		}
	}
	if r.rows == nil {
		r.rows = map[uuid.UUID]servedRow{}
	}
	r.rows[id] = row
}

// answer is the pre-read's answer to sql sent with args, and the partition
// keys of the rows it is of; ok is false when it has none.
func (r *servedReads) answer(sql string, args []any) (res *keptResult, keys []string, ok bool) {
	name := statementName(sql)
	cols, served := r.columns[name]
	if !served {
		return nil, nil, false
	}
	var rows [][][]byte
	switch name {
	case servedByRemoteTask:
		read, ok := rowsRead(sql, args)
		if !ok {
			return nil, nil, false
		}
		task := read.task()
		keys = append(keys, remoteTaskLock(task.org, task.task))
		ids := make([]uuid.UUID, 0, 1)
		for id, row := range r.rows {
			if row.recordsTask && row.orgID == task.org && row.taskID == task.task {
				ids = append(ids, id)
			}
		}
		slices.SortFunc(ids, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
		for _, id := range ids {
			keys = append(keys, delegationKey(id))
			rows = append(rows, r.rows[id].values[cols[0]:cols[1]])
		}
	case servedOrg:
		org, ok := firstText(args)
		if !ok {
			return nil, nil, false
		}
		for _, row := range r.rows {
			if row.orgID == org {
				rows = [][][]byte{row.values[cols[0]:cols[1]]}
				break
			}
		}
		if rows == nil {
			return nil, nil, false
		}
	default:
		read, ok := rowsRead(sql, args)
		row, locked := r.rows[read.id]
		if !ok || !locked || (name == "GatePolicy" && !row.gatePolicyOf(args)) {
			return nil, nil, false
		}
		keys = []string{delegationKey(read.id)}
		rows = [][][]byte{row.values[cols[0]:cols[1]]}
	}
	return &keptResult{
		answered: true,
		tag:      pgconn.NewCommandTag(fmt.Sprintf("SELECT %d", len(rows))),
		fields:   r.fields[cols[0]:cols[1]],
		rows:     rows,
		typeMap:  r.typeMap,
	}, keys, true
}

// gatePolicyOf: GatePolicy's args (delegation, tenant, task class, org)
// are this delegation's, as its row in the pre-read has them.
func (row servedRow) gatePolicyOf(args []any) bool {
	if len(args) != 4 {
		return false
	}
	want := []string{row.tenant, row.taskClass, row.orgID}
	for i, w := range want {
		if s, ok := args[i+1].(string); !ok || s != w {
			return false
		}
	}
	return true
}

// firstText is args' first, when it is a text.
func firstText(args []any) (string, bool) {
	if len(args) == 0 {
		return "", false
	}
	s, ok := args[0].(string)
	return s, ok
}

// read reads the result of DelegationsServedForFlush.
func (r *servedReads) read(br pgx.BatchResults) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	return r.readRows(rows)
}

// readRows reads the rows of DelegationsServedForFlush.
func (r *servedReads) readRows(rows pgx.Rows) error {
	defer rows.Close()
	fields := rows.FieldDescriptions()
	if err := r.layout(fields); err != nil {
		return err
	}
	r.typeMap = rows.Conn().TypeMap()
	for rows.Next() {
		raw := rows.RawValues()
		var id uuid.UUID
		if err := pgx.ScanRow(r.typeMap, fields[:1], raw[:1], &id); err != nil {
			return err
		}
		r.add(id, raw)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	r.answered = true
	return nil
}
