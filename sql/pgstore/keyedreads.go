package pgstore

import (
	"github.com/google/uuid"

	"github.com/quittance/quittance/ledger"
)

// A transaction buffers the inserts and updates of its delegations, their
// evidence, its events and its used token ids, and writes each buffer as
// one statement (ledger/DESIGN.md §5, "The write path"). A statement that
// may see or conflict with a buffer's rows has the buffer written before
// it runs; each buffer says which statements concern it (its
// mustPrecede). Most of them are judged by what they name, conservatively.
// The reads below name their rows by their arguments, so a buffer they
// concern waits for them only when it holds a row they name: keyedReads is
// the one list of them, and each buffer's holds says which rows it holds.
// Writing a buffer early is never wrong, only dearer: it splits a flush's
// rows into one statement for each of its operations.

// readKey is what names the rows a keyed read reads.
type readKey int

const (
	// byDelegation: the first argument is a delegation's id.
	byDelegation readKey = iota + 1
	// byOperation: the first two are a tenant and a business operation id.
	byOperation
	// byRemoteTask: the first two are an org and its remote task id.
	byRemoteTask
	// byUsedToken: the first two are an org and a token id.
	byUsedToken
)

// keyedReads are the statements whose arguments name the rows they read,
// by sqlc name.
var keyedReads = map[string]readKey{
	"DelegationGetByID":                      byDelegation,
	"DelegationGetByIDForUpdate":             byDelegation,
	"DelegationGetByIDForUpdateWithDispatch": byDelegation,
	"EvidenceFactsGet":                       byDelegation,
	"CompensationEvidenceGet":                byDelegation,
	// GatePolicy reads its delegation's dispatch (a2a_delegations) by id.
	"GatePolicy":                          byDelegation,
	"DelegationGetByOperation":            byOperation,
	"DelegationGetByRemoteTask":           byRemoteTask,
	"DelegationListByRemoteTaskForUpdate": byRemoteTask,
	"UsedTokenGet":                        byUsedToken,
}

// readRows is what a keyed read's arguments name: its kind and the key
// (id for byDelegation, pair for the others).
type readRows struct {
	kind readKey
	id   uuid.UUID
	pair [2]string
}

// operation, task and token are the pair as the key of its kind.
func (r readRows) operation() ledger.OperationKey {
	return ledger.OperationKey{Tenant: r.pair[0], ID: r.pair[1]}
}
func (r readRows) task() remoteTaskKey { return remoteTaskKey{org: r.pair[0], task: r.pair[1]} }
func (r readRows) token() tokenKey     { return tokenKey{org: r.pair[0], jti: r.pair[1]} }

// rowsRead are the rows sql, sent with args, reads; ok is false when it is
// no keyed read, or its arguments are not what keyedReads says (then it
// counts as a read of anything). The arguments are the statements'
// cleaned ones, as the buffers' keys are (operationKey, taskKey).
func rowsRead(sql string, args []any) (r readRows, ok bool) {
	kind, keyed := keyedReads[statementName(sql)]
	if !keyed {
		return r, false
	}
	r.kind = kind
	if kind == byDelegation {
		if len(args) == 0 {
			return r, false
		}
		r.id, ok = args[0].(uuid.UUID)
		return r, ok
	}
	for i := range r.pair {
		if i >= len(args) {
			return r, false
		}
		switch v := args[i].(type) {
		case string:
			r.pair[i] = v
		case *string:
			if v == nil {
				return r, false
			}
			r.pair[i] = *v
		default:
			return r, false
		}
	}
	return r, true
}

// delegationKeys are the keys of the delegations whose inserts or updates
// a buffer holds: what a keyed read may name them by.
type delegationKeys struct {
	ids        map[uuid.UUID]bool
	operations map[ledger.OperationKey]bool
	tasks      map[remoteTaskKey]bool
}

// add notes d's keys, as stored (operationKey, taskKey).
func (k *delegationKeys) add(d ledger.Delegation) {
	if k.ids == nil {
		k.ids, k.operations, k.tasks = map[uuid.UUID]bool{}, map[ledger.OperationKey]bool{}, map[remoteTaskKey]bool{}
	}
	k.ids[d.ID] = true
	k.operations[operationKey(d.Tenant, d.BusinessOperationID)] = true
	if d.Remote.TaskID != "" {
		k.tasks[taskKey(d.OrgID, d.Remote.TaskID)] = true
	}
}

// holds: the buffer holds a delegation r names. A used token id names
// none of them: the token ids are a buffer of their own, written after
// the inserts (queueTokens), and an update writes none.
func (k *delegationKeys) holds(r readRows) bool {
	switch r.kind {
	case byDelegation:
		return k.ids[r.id]
	case byOperation:
		return k.operations[r.operation()]
	case byRemoteTask:
		return k.tasks[r.task()]
	case byUsedToken:
		return false
	}
	return true
}

// mustPrecedeRead is a buffer's mustPrecede from what concerns it and what
// it holds: a statement that concerns the buffer waits for it, a keyed
// read only when the buffer holds a row it names.
func mustPrecedeRead(sql string, args []any, concerns func(string) bool, holds func(readRows) bool) bool {
	if !concerns(sql) {
		return false
	}
	if r, ok := rowsRead(sql, args); ok {
		return holds(r)
	}
	return true
}
