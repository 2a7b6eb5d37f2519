package ledger

import (
	"encoding/json"
	"testing"
	"time"
)

// TestJudgeCard: the rule of ObserveAgentCard, case by case
// (ledger/DESIGN.md §4.1).
func TestJudgeCard(t *testing.T) {
	t.Parallel()
	params := json.RawMessage(`{"atomicCancel":true}`)
	pin := CardPin{KeyID: "k1", Thumbprint: "tp1", CompensationParams: params, PinnedAt: time.Unix(1, 0)}
	verified := func(tp string, p json.RawMessage) CardObservation {
		return CardObservation{Signed: true, Verified: true, KeyID: "k-" + tp, Thumbprint: tp, CompensationParams: p}
	}
	for _, c := range []struct {
		name   string
		org    Org
		obs    CardObservation
		status CardStatus
		used   bool
		pins   bool
		typ    EventType
	}{
		{"unsigned, not required", Org{}, CardObservation{}, CardUnsigned, true, false, EventTypeOrgCardChecked},
		{"unsigned, required", Org{RequireSignedCard: true}, CardObservation{}, CardUnsigned, false, false, EventTypeOrgCardChecked},
		{"failed, not required", Org{}, CardObservation{Signed: true, Reason: "bad"}, CardFailed, false, false, EventTypeOrgCardChecked},
		{"first verified pins", Org{}, verified("tp1", params), CardVerified, true, true, EventTypeOrgCardChecked},
		{"pinned key and params", Org{CardPin: pin}, verified("tp1", json.RawMessage(`{ "atomicCancel": true }`)), CardVerified, true, false, EventTypeOrgCardChecked},
		{"another key", Org{CardPin: pin}, verified("tp2", params), CardChangeAwaitingApproval, false, false, EventTypeOrgCardChangeDetected},
		{"other params", Org{CardPin: pin}, verified("tp1", nil), CardChangeAwaitingApproval, false, false, EventTypeOrgCardChangeDetected},
		{"no longer signed", Org{CardPin: pin}, CardObservation{CompensationParams: params}, CardChangeAwaitingApproval, false, false, EventTypeOrgCardChangeDetected},
		{"failed while pinned", Org{CardPin: pin}, CardObservation{Signed: true, Reason: "bad"}, CardFailed, false, false, EventTypeOrgCardChecked},
		{"unsigned accepted", Org{CardPin: CardPin{CompensationParams: params, PinnedAt: time.Unix(1, 0)}}, CardObservation{CompensationParams: params}, CardUnsigned, true, false, EventTypeOrgCardChecked},
	} {
		check, pins, typ := judgeCard(c.org, c.obs)
		if check.Status != c.status || check.Used != c.used || pins != c.pins || typ != c.typ {
			t.Errorf("%s: %+v, pins %t, %s; want %s used=%t pins=%t %s", c.name, check, pins, typ, c.status, c.used, c.pins, c.typ)
		}
		if !check.Used && check.Reason == "" {
			t.Errorf("%s: a card not used says no reason", c.name)
		}
	}
}
