package audit

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/quittance/quittance/ledger"
)

// StoredToken is a signed token stored on an event of a delegation's
// stream, with what the events say of how the ledger accepted it: what
// verify-chain, verify-pack and the console verify it as
// (compensation.VerifyStoredTokens).
type StoredToken struct {
	// Event is the event that stores it.
	Event ledger.Event
	// Kind is the kind it was accepted as (ledger.TokenKindAck or
	// ledger.TokenKindDeclaration); "" when the event does not say.
	Kind string
	// AcceptedAt is when it was accepted: its keys in force and its expiry
	// are judged at this time.
	AcceptedAt time.Time
	// ExtraTaskID is the extra remote task an extra task's receipt
	// (extra_task_compensated) is about; "" for a token about the
	// delegation's own remote task.
	ExtraTaskID string
	// Channel is how the evidence arrived, as the event records it.
	Channel ledger.EvidenceChannel
	// Recorded is the key the event says verified the token (empty on
	// events written before the ledger named it), and JTI and SHA256 what
	// it records of the token ("" when it does not).
	Recorded    ledger.KeyRef
	JTI, SHA256 string
	// Derived says the event predates token_kind and token_accepted_at:
	// Kind and AcceptedAt were derived from the rest of the stream.
	Derived bool
	// Problem says why what the event records of its token cannot be
	// true, when it cannot; the token is then not verified.
	Problem string
}

// tokenRecord is what an event's data may say of the token it stores: at
// its top level, or (an event that applies, or marks unused, evidence
// received earlier) under evidence_data.
type tokenRecord struct {
	TokenKind       string          `json:"token_kind"`
	TokenAcceptedAt string          `json:"token_accepted_at"`
	Kind            string          `json:"kind"`
	Channel         string          `json:"channel"`
	EvidenceChannel string          `json:"evidence_channel"`
	KeyID           string          `json:"kid"`
	KeyThumbprint   string          `json:"key_thumbprint"`
	JTI             string          `json:"jti"`
	TokenSHA256     string          `json:"token_sha256"`
	ObligationEvent string          `json:"obligation_event"`
	Resolution      string          `json:"resolution"`
	TaskID          string          `json:"task_id"`
	EvidenceData    json.RawMessage `json:"evidence_data"`
}

// StoredTokens reads every signed token stored on events, one delegation's
// stream in stream order. An event written since events record it carries
// its token's kind and acceptance time (ledger.TokenKindKey, ledger.TokenAcceptedAtKey):
// the first event that stores a token must be dated no earlier than its
// acceptance and at most slack (the event-time slack) after it, and every
// later event storing the same token must record the same acceptance, so
// an acceptance time cannot reach back further than the event's own date
// could. An extra task's receipt must answer an extra task whose
// compensation an earlier event required. An event written before events
// recorded the token's kind is read as well as its data allows
// (derivedTokenKind, in legacy.go).
func StoredTokens(events []ledger.Event, slack time.Duration) []StoredToken {
	var out []StoredToken
	first := map[string]StoredToken{} // token -> its first event's reading
	required := map[string]bool{}     // extra tasks whose compensation was required
	for _, e := range events {
		if e.Type == ledger.EventTypeExtraTaskCompensationRequired {
			var rec ledger.ExtraTaskCompensationRequiredData
			if json.Unmarshal(e.Data, &rec) == nil {
				required[rec.TaskID] = true
			}
		}
		if e.Evidence == "" {
			continue
		}
		st := readStoredToken(e)
		earlier, seen := first[e.Evidence]
		switch {
		case st.Problem != "":
		case st.ExtraTaskID != "" && !required[st.ExtraTaskID]:
			st.Problem = fmt.Sprintf("no earlier event required compensation of extra task %q", st.ExtraTaskID)
		case st.Derived && seen:
			st.AcceptedAt = earlier.AcceptedAt
		case st.Derived:
			st.AcceptedAt = e.At
		case seen && !st.AcceptedAt.Equal(earlier.AcceptedAt):
			st.Problem = fmt.Sprintf("token_accepted_at %s is not %s, when event %d accepted the same token",
				st.AcceptedAt.UTC().Format(time.RFC3339Nano), earlier.AcceptedAt.UTC().Format(time.RFC3339Nano), earlier.Event.StreamSeq)
		case !seen && (st.AcceptedAt.After(e.At) || e.At.Sub(st.AcceptedAt) > slack):
			st.Problem = fmt.Sprintf("token_accepted_at %s is not within %s before the event's time %s, and no earlier event stores the token",
				st.AcceptedAt.UTC().Format(time.RFC3339Nano), slack, e.At.UTC().Format(time.RFC3339Nano))
		}
		if !seen && st.Problem == "" {
			first[e.Evidence] = st
		}
		out = append(out, st)
	}
	return out
}

// readStoredToken reads what e's data says of the token e stores.
func readStoredToken(e ledger.Event) StoredToken {
	st := StoredToken{Event: e}
	var top, nested tokenRecord
	if err := json.Unmarshal(e.Data, &top); err != nil {
		st.Problem = "the event's data does not parse"
		return st
	}
	if len(top.EvidenceData) > 0 {
		_ = json.Unmarshal(top.EvidenceData, &nested)
	}
	// The token's record: the event's own members, else those of the
	// evidence it applies.
	rec := top
	if rec.JTI == "" && rec.TokenSHA256 == "" && rec.KeyID == "" {
		rec = nested
	}
	st.Recorded = ledger.KeyRef{KeyID: rec.KeyID, Thumbprint: rec.KeyThumbprint}
	st.JTI, st.SHA256 = rec.JTI, rec.TokenSHA256
	st.Channel = ledger.EvidenceChannel(firstOf(top.EvidenceChannel, top.Channel, nested.Channel))
	if e.Type == ledger.EventTypeExtraTaskCompensated {
		st.ExtraTaskID = top.TaskID
		if st.ExtraTaskID == "" {
			st.Problem = "the extra task's receipt does not name its task"
			return st
		}
	}
	if top.TokenKind != "" || top.TokenAcceptedAt != "" {
		at, err := time.Parse(time.RFC3339Nano, top.TokenAcceptedAt)
		if err != nil {
			st.Problem = fmt.Sprintf("token_accepted_at %q is not a time", top.TokenAcceptedAt)
			return st
		}
		st.Kind, st.AcceptedAt = top.TokenKind, at
		if !validTokenKind(st.Kind) {
			st.Problem = fmt.Sprintf("token_kind %q is not a kind of token", st.Kind)
		}
		return st
	}
	st.Derived = true
	st.Kind = derivedTokenKind(e.Type, top, nested)
	if st.Kind == "" {
		st.Problem = "the event does not say which kind of token it stores"
	}
	return st
}

func validTokenKind(k string) bool {
	return k == ledger.TokenKindAck || k == ledger.TokenKindDeclaration
}

func firstOf(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
