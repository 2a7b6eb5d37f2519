package httpapi_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/ledger"
)

type queueBody struct {
	Obligations []httpapi.QueueRowBody `json:"obligations"`
	NextCursor  string                 `json:"next_cursor"`
}

// TestCaseHandlingAPI: owner, notes and snoozes are on-call changes, each
// one event on the delegation's stream; the queue filters on them;
// snoozing never moves the hold; finance reads and cannot change.
func TestCaseHandlingAPI(t *testing.T) {
	e := newCompEnv(t)
	finance := e.NewToken(t, ledger.RoleFinance, "", "finance")
	d := e.pending(t, orgB, 120_000)
	other := e.pending(t, orgB, 30_000)
	path := "/v1/delegations/" + d.ID

	e.Do(t, http.MethodPut, path+"/owner", finance, map[string]any{"owner": "x"}).Problem(t, http.StatusForbidden, "forbidden")
	e.Do(t, http.MethodPut, path+"/owner", e.orch, map[string]any{"owner": "x"}).Problem(t, http.StatusForbidden, "forbidden")
	var c httpapi.CaseBody
	e.Do(t, http.MethodPut, path+"/owner", e.OncallToken, map[string]any{"owner": "alice"}).Expect(t, http.StatusOK).JSON(t, &c)
	if c.Owner != "alice" {
		t.Fatalf("owner %q", c.Owner)
	}
	e.Do(t, http.MethodPut, path+"/owner", e.OncallToken, map[string]any{"owner": "alice"}).Expect(t, http.StatusOK)
	e.Do(t, http.MethodPost, path+"/notes", e.OncallToken, map[string]any{"note": "asked Bolt for a receipt"}).Expect(t, http.StatusCreated)
	e.Do(t, http.MethodPost, path+"/snooze", e.OncallToken, map[string]any{"until": e.Clock.Now().Add(-time.Hour)}).Problem(t, http.StatusUnprocessableEntity, "validation_failed")
	until := e.Clock.Now().Add(48 * time.Hour)
	e.Do(t, http.MethodPost, path+"/snooze", e.OncallToken, map[string]any{"until": until, "reason": "waiting"}).Expect(t, http.StatusOK).JSON(t, &c)
	if c.SnoozedUntil == nil || !c.SnoozedUntil.Equal(until) || c.Notes != 1 {
		t.Fatalf("case %+v", c)
	}
	counts := map[ledger.EventType]int{}
	for _, ev := range e.Events(t, e.orch, d.ID) {
		counts[ev.Type]++
	}
	if counts[ledger.EventTypeCaseOwnerAssigned] != 1 || counts[ledger.EventTypeCaseNoteAdded] != 1 || counts[ledger.EventTypeCaseSnoozed] != 1 {
		t.Fatalf("case events %v (the same owner twice must record one)", counts)
	}

	// The queue hides the snoozed entry; the hold and the reports do not move.
	var q queueBody
	e.Do(t, http.MethodGet, "/v1/obligations/queue", finance, nil).Expect(t, http.StatusOK).JSON(t, &q)
	if len(q.Obligations) != 1 || q.Obligations[0].DelegationID != other.ID {
		t.Fatalf("queue %+v", q.Obligations)
	}
	e.Do(t, http.MethodGet, "/v1/obligations/queue?snoozed=only&owner=alice", finance, nil).Expect(t, http.StatusOK).JSON(t, &q)
	if len(q.Obligations) != 1 || q.Obligations[0].Case.Owner != "alice" {
		t.Fatalf("snoozed queue %+v", q.Obligations)
	}
	if got := e.Delegation(t, e.orch, d.ID); got.HoldState != "active" || got.ObligationState != d.ObligationState {
		t.Fatalf("snoozing moved the obligation: %+v", got)
	}
	if b := e.Budget(t, budgetID); b.HeldMinor != 150_000 {
		t.Fatalf("held %d", b.HeldMinor)
	}
	var list httpapi.ObligationListBody
	e.Do(t, http.MethodGet, "/v1/obligations", finance, nil).Expect(t, http.StatusOK).JSON(t, &list)
	if len(list.Obligations) != 2 {
		t.Fatalf("the report lost the snoozed obligation: %d rows", len(list.Obligations))
	}

	// Keyset pages of one: no gaps, no repeats, largest first.
	e.Do(t, http.MethodGet, "/v1/obligations/queue?snoozed=show&sort=amount_desc&limit=1", finance, nil).Expect(t, http.StatusOK).JSON(t, &q)
	if len(q.Obligations) != 1 || q.Obligations[0].DelegationID != d.ID || q.NextCursor == "" {
		t.Fatalf("first page %+v", q)
	}
	e.Do(t, http.MethodGet, "/v1/obligations/queue?snoozed=show&sort=amount_desc&limit=1&cursor="+q.NextCursor, finance, nil).Expect(t, http.StatusOK).JSON(t, &q)
	if len(q.Obligations) != 1 || q.Obligations[0].DelegationID != other.ID {
		t.Fatalf("second page %+v", q)
	}

	// A settled delegation cannot be snoozed: it is not in the queue.
	done := e.delegation(t, orgB, 1_000)
	e.ReportStatus(t, e.orch, done.ID, "TASK_STATE_COMPLETED", time.Time{})
	e.Do(t, http.MethodPost, "/v1/delegations/"+done.ID+"/snooze", e.OncallToken, map[string]any{"until": until}).Problem(t, http.StatusConflict, "not_in_queue")
	e.CheckInvariants(t)
}

// TestRejectWriteOffAPI: a second on-call identity rejects a pending
// write-off with a reason; the hold stays active and a new write-off can
// be requested; the requester cannot reject their own.
func TestRejectWriteOffAPI(t *testing.T) {
	e := newCompEnv(t)
	second := e.NewToken(t, ledger.RoleOncall, "", "oncall-2")
	d := e.pending(t, orgB, 500_000)
	var w httpapi.WriteOffBody
	e.Do(t, http.MethodPost, "/admin/v1/delegations/"+d.ID+"/write-offs", e.OncallToken, map[string]any{"reason": "gone"}).Expect(t, http.StatusCreated).JSON(t, &w)
	e.Do(t, http.MethodPost, "/admin/v1/write-offs/"+w.ID+"/reject", e.OncallToken, map[string]any{"reason": "mine"}).Problem(t, http.StatusForbidden, "self_approval")
	e.Do(t, http.MethodPost, "/admin/v1/write-offs/"+w.ID+"/reject", second, map[string]any{"reason": "Bolt is reversing it"}).Expect(t, http.StatusOK).JSON(t, &w)
	if w.Status != "rejected" || w.RejectedBy != "oncall-2" || w.Delegation.HoldState != "active" {
		t.Fatalf("rejected write-off %+v", w)
	}
	e.Do(t, http.MethodPost, "/admin/v1/write-offs/"+w.ID+"/approve", second, nil).Problem(t, http.StatusConflict, "write_off_not_pending")
	var listed struct {
		WriteOffs []httpapi.WriteOffBody `json:"write_offs"`
	}
	e.Do(t, http.MethodGet, "/admin/v1/write-offs?status=rejected", e.OncallToken, nil).Expect(t, http.StatusOK).JSON(t, &listed)
	if len(listed.WriteOffs) != 1 || listed.WriteOffs[0].ID != w.ID {
		t.Fatalf("listed %+v", listed.WriteOffs)
	}
	e.Do(t, http.MethodPost, "/admin/v1/delegations/"+d.ID+"/write-offs", e.OncallToken, map[string]any{"reason": "again"}).Expect(t, http.StatusCreated)
	e.CheckInvariants(t)
}
