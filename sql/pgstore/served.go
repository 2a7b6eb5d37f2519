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

// A flush's operations read before they write: a task status reads its
// delegation with its dispatch, its gate policy and its evidence facts; a
// piece of evidence the delegations recording its remote task, their org,
// their evidence facts and whether its token id is used; a creation its
// org and budget. The pre-read has just locked those delegations, and the
// operations' write keys name the rest (ledger.WriteKeys), so statements
// after its locks (queueServed) answer those reads for the whole flush,
// and an operation's read is answered from them rather than sent: at 12
// operations a flush, some 30 statements fewer, and the round trips they
// waited for (cmd/quittance-bench/BENCHMARK.md).
//
// The answer is what the read would have read, provided nothing in the
// transaction changed its rows since the pre-read. A pipelined flush
// guarantees that (pipeline.go) when the operation reading has written
// nothing yet, names every delegation (and remote task) the answer is
// of, and every operation before it in the flush names rows, none of
// them: operations that name no common row touch no common row, an
// operation naming a row runs after every one before it that names it,
// and one naming none (which may write anything) runs alone. Otherwise
// the read is sent, as before (mayServe). An org, a budget or a used
// token id is no partition key: only an operation naming none changes an
// org; a budget's movements wait for the flush's end (checkFunds); and a
// token id whose use the transaction buffered is not answered.

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

// servedSource answers some reads of a flush from its pre-read.
type servedSource interface {
	// ready: the pre-read's result is in.
	ready() bool
	// answer is the answer to sql sent with args, and the partition keys
	// of the rows it is of; ok is false when it has none.
	answer(sql string, args []any) (res *keptResult, keys []string, ok bool)
}

// serve registers r as the source of the reads it answers.
func serve(served map[string]servedSource, r servedSource, statements ...string) {
	for _, name := range statements {
		served[name] = r
	}
}

// servedReads are the pre-read's answers about the delegations it locked,
// once its result is in.
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

func (r *servedReads) ready() bool { return r.answered }

// answer is the pre-read's answer to sql sent with args (servedSource).
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
	return answered(r.fields[cols[0]:cols[1]], rows, r.typeMap), keys, true
}

// answered is a read's answer: rows of fields.
func answered(fields []pgconn.FieldDescription, rows [][][]byte, typeMap *pgtype.Map) *keptResult {
	return &keptResult{
		answered: true,
		tag:      pgconn.NewCommandTag(fmt.Sprintf("SELECT %d", len(rows))),
		fields:   fields,
		rows:     rows,
		typeMap:  typeMap,
	}
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

// pairAnswers are a pre-read statement's answers to one read whose first
// two arguments name its row (CreationReferences, UsedTokenGet): each row
// is the pair, then the read's columns. A pair asked and not returned is
// answered with no row, as the read would be; one not asked is not
// answered, nor one changed says the transaction may have written.
type pairAnswers struct {
	answered bool
	asked    map[[2]string]bool
	typeMap  *pgtype.Map
	fields   []pgconn.FieldDescription
	rows     map[[2]string][][]byte
	changed  func(pair [2]string) bool
}

// newPairAnswers is the answers to the pairs firsts[i], seconds[i], as
// stored (storable).
func newPairAnswers(firsts, seconds []string, changed func([2]string) bool) *pairAnswers {
	a := &pairAnswers{asked: make(map[[2]string]bool, len(firsts)), changed: changed}
	for i := range firsts {
		a.asked[[2]string{storable(firsts[i]), storable(seconds[i])}] = true
	}
	return a
}

func (a *pairAnswers) ready() bool { return a.answered }

// read reads the statement's result.
func (a *pairAnswers) read(br pgx.BatchResults) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	return a.readRows(rows)
}

// readRows reads the statement's rows.
func (a *pairAnswers) readRows(rows pgx.Rows) error {
	defer rows.Close()
	fields := rows.FieldDescriptions()
	if len(fields) < 2 {
		return fmt.Errorf("the pre-read's answers have %d columns", len(fields))
	}
	a.fields, a.typeMap, a.rows = slices.Clone(fields[2:]), rows.Conn().TypeMap(), map[[2]string][][]byte{}
	for rows.Next() {
		raw := rows.RawValues()
		values := make([][]byte, len(raw)-2)
		for i, v := range raw[2:] {
			values[i] = bytes.Clone(v)
		}
		a.rows[[2]string{string(raw[0]), string(raw[1])}] = values
	}
	if err := rows.Err(); err != nil {
		return err
	}
	a.answered = true
	return nil
}

// answer answers the read of the pair its first two arguments are (as
// cleaned before they reach the transaction: storableDB).
func (a *pairAnswers) answer(_ string, args []any) (*keptResult, []string, bool) {
	if len(args) < 2 {
		return nil, nil, false
	}
	first, ok1 := args[0].(string)
	second, ok2 := args[1].(string)
	pair := [2]string{first, second}
	if !ok1 || !ok2 || !a.asked[pair] || (a.changed != nil && a.changed(pair)) {
		return nil, nil, false
	}
	var rows [][][]byte
	if row, found := a.rows[pair]; found {
		rows = [][][]byte{row}
	}
	return answered(a.fields, rows, a.typeMap), nil, true
}

// servedReadNames are the reads servedReads answers.
var servedReadNames = func() []string {
	names := []string{servedByRemoteTask, servedOrg}
	for _, n := range servedStatements {
		names = append(names, n)
	}
	return names
}()
