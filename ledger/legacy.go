package ledger

import "encoding/json"

// This file holds the code that exists only for data recorded before a
// migration changed what is recorded. Each piece names its migration; once
// no database holds such data, the piece can go.

// registeredBeforeKeyHistory reports whether an org's stream starts with
// the registration of an org that had keys before the key history existed
// (migration 00016, which backfilled their keys from the org's creation):
// its first event says jwks_registered but records no keys_added.
// CheckOrgKeys takes a key in force from that event's time as one it
// registered.
func registeredBeforeKeyHistory(stream []Event) bool {
	if len(stream) == 0 || stream[0].StreamSeq != 1 || stream[0].Type != EventTypeOrgUpdated {
		return false
	}
	var first struct {
		JWKSRegistered bool            `json:"jwks_registered"`
		KeysAdded      json.RawMessage `json:"keys_added"`
	}
	_ = json.Unmarshal(stream[0].Data, &first)
	return first.JWKSRegistered && first.KeysAdded == nil
}
