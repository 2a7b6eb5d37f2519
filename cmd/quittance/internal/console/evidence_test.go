package console_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/ledger"
)

// TestEvidenceVerifiedWhereverStored: the delegation's page shows every
// honest token verified wherever the chain stores it — an ack received
// early, the status event that applied it after its exp, and a second ack
// with another receipt id (evidence_conflict, the org's own doing) — as
// verify-chain does (compensation.VerifyStoredTokens), never "not
// verified".
func TestEvidenceVerifiedWhereverStored(t *testing.T) {
	w := newWorld(t)
	d := w.CreateDelegation(t, w.orch, apitest.NewCreateRequest("po-early", orgID, "procurement", budgetID, 5_000, "EUR"))
	key := ledger.CompensationKey(ledger.Delegation{ID: uuid.MustParse(d.ID)})
	post := func(status int) {
		t.Helper()
		ack := w.signer.Sign(t, string(compensation.KindAck), compensationtest.AckClaims(orgID, ledgerID, d.Remote.TaskID, key, w.Clock.Now()))
		req, _ := http.NewRequest(http.MethodPost, w.URL+"/v1/compensation/acks", strings.NewReader(ack))
		req.Header.Set("Content-Type", "application/jose")
		w.Send(t, req).Expect(t, status)
	}
	post(http.StatusOK)
	w.Clock.Advance(10 * time.Minute) // past the early ack's exp
	if got := w.ReportStatus(t, w.orch, d.ID, "canceled", time.Time{}); got.ObligationState != string(ledger.ObligationCompensated) {
		t.Fatalf("after the cancel: %s", got.ObligationState)
	}
	post(http.StatusUnprocessableEntity)

	b := w.client(t)
	b.signIn(w.finance)
	p := b.get("/console/delegations/" + d.ID)
	p.contains(t, `data-type="evidence_received"`, `data-type="task_status_changed"`, `data-type="evidence_conflict"`)
	p.lacks(t, "not verified")
	if n := strings.Count(p.body, "signature verified"); n != 3 {
		t.Fatalf("%d tokens shown verified, want 3:\n%s", n, p.body)
	}
}
