package audit_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/audit"
)

// TestStoredTokens: how each event that stores a token says how the ledger
// accepted it. Events written before token_kind and token_accepted_at are
// read from what they hold — evidence applied or found unused later is
// accepted when its evidence_received was, a conflict and an extra task's
// receipt as what they assert —; events written since must date the
// acceptance within the slack before themselves, or where the first event
// storing the same token did.
func TestStoredTokens(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	data := func(m map[string]any) json.RawMessage {
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	at := func(d time.Duration) string { return t0.Add(d).Format(time.RFC3339Nano) }
	seq := int32(0)
	ev := func(typ ledger.EventType, d time.Duration, token string, m map[string]any) ledger.Event {
		seq++
		return ledger.Event{StreamSeq: seq, Type: typ, At: t0.Add(d), Evidence: token, Data: data(m)}
	}
	old := []ledger.Event{
		ev(ledger.EventTypeDelegationCreated, 0, "", map[string]any{}),
		ev(ledger.EventTypeEvidenceReceived, time.Minute, "early", map[string]any{"kind": ledger.TokenKindAck, "jti": "j1", "channel": "http"}),
		ev(ledger.EventTypeTaskStatusChanged, time.Hour, "early", map[string]any{
			"obligation_event": "task_ended_acked", "evidence_channel": "http", "evidence_data": map[string]any{"kind": ledger.TokenKindAck, "jti": "j1"},
		}),
		ev(ledger.EventTypeEvidenceConflict, 2*time.Hour, "second", map[string]any{"kind": "compensation_ack", "channel": "http"}),
		ev(ledger.EventTypeExtraTaskCompensationRequired, 3*time.Hour, "", map[string]any{"task_id": "kt-1"}),
		ev(ledger.EventTypeExtraTaskCompensated, 3*time.Hour, "extra", map[string]any{"task_id": "kt-1", "resolution": "no_effects"}),
		ev(ledger.EventTypeExtraTaskCompensated, 3*time.Hour, "other", map[string]any{"task_id": "kt-2", "resolution": "no_effects"}),
		ev(ledger.EventTypeEarlyEvidenceUnused, 4*time.Hour, "unused", map[string]any{"evidence_data": map[string]any{"kind": ledger.TokenKindDeclaration}}),
		ev(ledger.EventTypeTaskStatusChanged, 5*time.Hour, "nameless", map[string]any{"state": "canceled"}),
	}
	got := audit.StoredTokens(old, time.Minute)
	want := []struct {
		kind     string
		accepted time.Time
		extra    string
		problem  string
	}{
		{ledger.TokenKindAck, t0.Add(time.Minute), "", ""},
		{ledger.TokenKindAck, t0.Add(time.Minute), "", ""},
		{ledger.TokenKindAck, t0.Add(2 * time.Hour), "", ""},
		{ledger.TokenKindDeclaration, t0.Add(3 * time.Hour), "kt-1", ""},
		{ledger.TokenKindDeclaration, time.Time{}, "kt-2", "no earlier event required compensation"},
		{ledger.TokenKindDeclaration, t0.Add(4 * time.Hour), "", ""},
		{"", time.Time{}, "", "does not say which kind"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d tokens, want %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Kind != w.kind || !g.AcceptedAt.Equal(w.accepted) || g.ExtraTaskID != w.extra || !g.Derived ||
			(w.problem == "") != (g.Problem == "") || !strings.Contains(g.Problem, w.problem) {
			t.Errorf("event %d (%s): %+v, want kind %q accepted %s extra %q problem %q", g.Event.StreamSeq, g.Event.Type, g, w.kind, w.accepted, w.extra, w.problem)
		}
	}
	if got[1].JTI != "j1" || got[1].Channel != ledger.ChannelHTTP {
		t.Errorf("the applying event's record of its token: jti %q, channel %q", got[1].JTI, got[1].Channel)
	}

	// Events that record the acceptance.
	seq = 0
	accepted := func(kind, when string) map[string]any {
		return map[string]any{ledger.TokenKindKey: kind, ledger.TokenAcceptedAtKey: when}
	}
	recorded := []ledger.Event{
		ev(ledger.EventTypeDelegationCreated, 0, "", map[string]any{}),
		ev(ledger.EventTypeEvidenceReceived, time.Hour, "a", accepted(ledger.TokenKindAck, at(time.Hour-time.Second))),
		ev(ledger.EventTypeTaskStatusChanged, 2*time.Hour, "a", accepted(ledger.TokenKindAck, at(time.Hour-time.Second))),
		ev(ledger.EventTypeEarlyEvidenceUnused, 3*time.Hour, "a", accepted(ledger.TokenKindAck, at(2*time.Hour))),
		ev(ledger.EventTypeEvidenceConflict, 4*time.Hour, "b", accepted(ledger.TokenKindAck, at(4*time.Hour-2*time.Minute))),
		ev(ledger.EventTypeEvidenceConflict, 5*time.Hour, "c", accepted(ledger.TokenKindAck, at(5*time.Hour+time.Millisecond))),
		ev(ledger.EventTypeEvidenceConflict, 6*time.Hour, "d", accepted("jwt", at(6*time.Hour))),
		ev(ledger.EventTypeEvidenceConflict, 7*time.Hour, "e", accepted(ledger.TokenKindAck, "yesterday")),
	}
	got = audit.StoredTokens(recorded, time.Minute)
	for i, problem := range []string{"", "", "when event 2 accepted the same token", "not within 1m0s before", "not within 1m0s before", "not a kind of token", "not a time"} {
		g := got[i]
		if (problem == "") != (g.Problem == "") || !strings.Contains(g.Problem, problem) || g.Derived {
			t.Errorf("event %d (%s): problem %q, want %q", g.Event.StreamSeq, g.Event.Type, g.Problem, problem)
		}
	}
	if !got[1].AcceptedAt.Equal(t0.Add(time.Hour-time.Second)) || got[1].Kind != ledger.TokenKindAck {
		t.Errorf("held evidence applied later: %+v", got[1])
	}
}
