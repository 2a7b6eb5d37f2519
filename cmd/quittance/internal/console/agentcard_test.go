package console_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/quittance/quittance/ledger"
)

// The org page and the counterparties list show an org's agent card
// signature state as the ledger recorded it (ledger/DESIGN.md §4.1): here
// a pinned key, then a card signed with another key, held for approval.
func TestOrgPageShowsAgentCardState(t *testing.T) {
	w := newWorld(t)
	b := w.client(t)
	b.signIn(w.OncallToken)
	b.get("/console/orgs/"+orgID).contains(t, `data-card-status="unchecked"`, "Signed agent card required")

	ctx := context.Background()
	first := ledger.CardObservation{Signed: true, Verified: true, KeyID: "card-1", Thumbprint: "tp-one", CompensationParams: json.RawMessage(`{"atomicCancel":false}`)}
	if _, err := w.Ledger.ObserveAgentCard(ctx, orgID, first); err != nil {
		t.Fatal(err)
	}
	b.get("/console/orgs/"+orgID).contains(t, `data-card-status="verified"`, "card-1", "tp-one", "Pinned card key")
	b.get("/console/orgs").contains(t, "card verified")

	changed := first
	changed.KeyID, changed.Thumbprint = "card-2", "tp-two"
	check, err := w.Ledger.ObserveAgentCard(ctx, orgID, changed)
	if err != nil || check.Used || check.State() != ledger.CardChangeAwaitingApproval {
		t.Fatalf("changed key: %+v, %v", check, err)
	}
	b.get("/console/orgs/"+orgID).contains(t, `data-card-status="change_awaiting_approval"`, "tp-two", "not used: dispatches and compensation requests are held off",
		"/admin/v1/orgs/"+orgID+"/agent-card/accept")
	b.get("/console/orgs").contains(t, "card change awaiting approval")
}
