package pgstore

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

// TestKeyedReadsNameTheirRows sends every statement of keyedReads through
// the generated code and checks that rowsRead finds the rows its caller
// asked for: a statement renamed, or whose arguments sqlc reorders, fails
// here instead of making the buffers judge it by the wrong argument.
func TestKeyedReadsNameTheirRows(t *testing.T) {
	ctx := context.Background()
	id := uuid.New()
	task := "task-7"
	want := map[string]readRows{}
	rec := &planRecorder{}
	q := dbsqlc.New(rec)
	send := func(name string, r readRows, call func()) {
		want[name] = r
		call()
	}
	byID := readRows{kind: byDelegation, id: id}
	send("DelegationGetByID", byID, func() { _, _ = q.DelegationGetByID(ctx, id) })
	send("DelegationGetByIDForUpdate", byID, func() { _, _ = q.DelegationGetByIDForUpdate(ctx, id) })
	send("DelegationGetByIDForUpdateWithDispatch", byID, func() { _, _ = q.DelegationGetByIDForUpdateWithDispatch(ctx, id) })
	send("EvidenceFactsGet", byID, func() { _, _ = q.EvidenceFactsGet(ctx, id) })
	send("CompensationEvidenceGet", byID, func() { _, _ = q.CompensationEvidenceGet(ctx, id) })
	send("GatePolicy", byID, func() {
		_, _ = q.GatePolicy(ctx, dbsqlc.GatePolicyParams{DelegationID: id, Tenant: "t", TaskClass: "c", OrgID: "org"})
	})
	send("DelegationGetByOperation", readRows{kind: byOperation, pair: [2]string{"t", "op-1"}}, func() {
		_, _ = q.DelegationGetByOperation(ctx, dbsqlc.DelegationGetByOperationParams{Tenant: "t", BusinessOperationID: "op-1"})
	})
	onTask := readRows{kind: byRemoteTask, pair: [2]string{"org", task}}
	send("DelegationGetByRemoteTask", onTask, func() {
		_, _ = q.DelegationGetByRemoteTask(ctx, dbsqlc.DelegationGetByRemoteTaskParams{OrgID: "org", RemoteTaskID: &task, Tenant: "t"})
	})
	send("DelegationListByRemoteTaskForUpdate", onTask, func() {
		_, _ = q.DelegationListByRemoteTaskForUpdate(ctx, dbsqlc.DelegationListByRemoteTaskForUpdateParams{OrgID: "org", RemoteTaskID: &task})
	})
	send("UsedTokenGet", readRows{kind: byUsedToken, pair: [2]string{"org", "jti-1"}}, func() {
		_, _ = q.UsedTokenGet(ctx, dbsqlc.UsedTokenGetParams{OrgID: "org", Jti: "jti-1"})
	})
	if len(want) != len(keyedReads) {
		t.Errorf("the test sends %d statements, keyedReads has %d: send each", len(want), len(keyedReads))
	}
	for _, s := range rec.statements {
		name := statementName(s.sql)
		got, ok := rowsRead(s.sql, s.args)
		if !ok || got != want[name] {
			t.Errorf("%s: rowsRead = %+v, %v; want %+v", name, got, ok, want[name])
		}
	}
}

// TestBuffersWaitOnlyForTheRowsAKeyedReadNames: a keyed read makes a
// buffer be written first only when the buffer holds a row it names; a
// read that names nothing waits for every buffer it concerns.
func TestBuffersWaitOnlyForTheRowsAKeyedReadNames(t *testing.T) {
	ctx := context.Background()
	rec := &planRecorder{}
	q := dbsqlc.New(rec)
	mine, other := uuid.New(), uuid.New()
	task := "task-1"
	d := ledger.Delegation{ID: mine, Tenant: "t", BusinessOperationID: "op-1", OrgID: "org"}
	d.Remote.TaskID = task
	var inserts insertBatch
	inserts.add(1, d)
	var updates updateBatch
	updates.add(1, d)
	var evidence evidenceBatch
	evidence.add(1, ledger.StoredEvidence{DelegationID: mine})
	var tokens tokenBatch
	tokens.add(1, compensation.UsedToken{OrgID: "org", JTI: "jti-1", DelegationID: mine})

	_, _ = q.DelegationGetByIDForUpdate(ctx, mine)
	_, _ = q.DelegationGetByIDForUpdate(ctx, other)
	_, _ = q.DelegationGetByOperation(ctx, dbsqlc.DelegationGetByOperationParams{Tenant: "t", BusinessOperationID: "op-1"})
	_, _ = q.DelegationGetByOperation(ctx, dbsqlc.DelegationGetByOperationParams{Tenant: "t", BusinessOperationID: "op-2"})
	_, _ = q.DelegationListByRemoteTaskForUpdate(ctx, dbsqlc.DelegationListByRemoteTaskForUpdateParams{OrgID: "org", RemoteTaskID: &task})
	_, _ = q.EvidenceFactsGet(ctx, mine)
	_, _ = q.EvidenceFactsGet(ctx, other)
	_, _ = q.UsedTokenGet(ctx, dbsqlc.UsedTokenGetParams{OrgID: "org", Jti: "jti-1"})
	_, _ = q.UsedTokenGet(ctx, dbsqlc.UsedTokenGetParams{OrgID: "org", Jti: "jti-2"})
	_, _ = q.DelegationList(ctx, dbsqlc.DelegationListParams{})
	// inserts, updates, evidence, tokens: whether each must be written first.
	want := [][4]bool{
		{true, true, false, false},   // the buffered delegation, locked
		{false, false, false, false}, // another one
		{true, true, false, false},   // the buffered delegation's business operation
		{false, false, false, false}, // another operation
		{true, true, false, false},   // the buffered delegation's remote task
		{true, true, true, false},    // the buffered delegation's facts
		{false, false, false, false}, // another delegation's
		{false, false, false, true},  // the buffered token id
		{false, false, false, false}, // another token id
		{true, true, false, false},   // a read of any delegation
	}
	if len(rec.statements) != len(want) {
		t.Fatalf("sent %d statements, want %d", len(rec.statements), len(want))
	}
	for i, s := range rec.statements {
		got := [4]bool{inserts.mustPrecede(s.sql, s.args), updates.mustPrecede(s.sql, s.args),
			evidence.mustPrecede(s.sql, s.args), tokens.mustPrecede(s.sql, s.args)}
		if got != want[i] {
			t.Errorf("statement %d (%s): inserts, updates, evidence, tokens wait = %v, want %v", i, statementName(s.sql), got, want[i])
		}
	}
}
