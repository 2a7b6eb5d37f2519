package pgstore

import (
	"encoding/json"

	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

// This file holds the code that exists only for rows written before a
// migration changed what is recorded. Each piece names its migration; once
// no database holds such rows, the piece can go.

// hashedOrJSONB is the data an event's hash was computed over:
// hashed_data, the exact text the ledger hashed, kept since migration
// 00010; for an event stored before it, the jsonb data as it reads back,
// which is what its hash was computed over then. A row whose jsonb no
// longer equals its hashed_data was edited, and reads as its jsonb so the
// chain breaks where it is read.
func hashedOrJSONB(r dbsqlc.Event) json.RawMessage {
	if r.HashedData != nil && jsonbEqual(r.HashedData, r.Data) {
		return r.HashedData
	}
	return json.RawMessage(r.Data)
}

// settledAmount is what a completed task's status event settled: its
// settled_amount_minor, which events carry since migration 00017; before
// it, a completed task settled the whole hold.
func settledAmount(recorded *int64, hold int64) int64 {
	if recorded != nil {
		return *recorded
	}
	return hold
}
