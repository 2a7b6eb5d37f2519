package httpapi_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
)

// TestDelegationShowsItsRemoteTasks: an agent that does not deduplicate on
// messageId creates a second task on the resend; GET /v1/delegations/{id}
// lists the extra task (id, purpose, status, the compensation round that
// named it) as it is accounted for: canceled, then named by the
// compensation request. Another tenant cannot see it, and a delegation
// without extra tasks shows none.
func TestDelegationShowsItsRemoteTasks(t *testing.T) {
	t.Parallel()
	e := newA2AEnv(t, apitest.Worker{NoPush: true, PollAfter: 50 * time.Millisecond})
	d := e.extraTaskDispatch(t, &taskKeeper{}, "po-show")
	got := e.get(t, d.ID)
	if len(got.RemoteTasks) != 1 {
		t.Fatalf("remote_tasks = %+v, want the extra task", got.RemoteTasks)
	}
	rt := got.RemoteTasks[0]
	if rt.TaskID != "kt-1" || rt.Purpose != "dispatch" || rt.Status != "canceled" || rt.NamedRound != 0 ||
		rt.FoundBy != "list_tasks" || rt.CancelSentAt == nil || rt.FoundAt.IsZero() {
		t.Fatalf("extra task shown as %+v, want kt-1 (dispatch, canceled, not named yet, found by list_tasks)", rt)
	}
	if got.Remote.TaskID != "kt-2" {
		t.Fatalf("tracked task %q, want kt-2", got.Remote.TaskID)
	}
	// The cancel asks for compensation, naming the extra task.
	e.must(t, http.MethodPost, "/v1/delegations/"+d.ID+"/cancel", e.orch, nil, http.StatusOK)
	got = e.waitFor(t, d.ID, "compensated", func(d httpapi.DelegationBody) bool { return d.ObligationState == "compensated" })
	if len(got.RemoteTasks) != 1 || got.RemoteTasks[0].NamedRound != 1 {
		t.Fatalf("after the compensation request: remote_tasks = %+v, want kt-1 named by round 1", got.RemoteTasks)
	}
	// Only those who may see the delegation see its tasks.
	other := e.NewOrchestrator(t, "globex")
	if status, _ := e.do(t, http.MethodGet, "/v1/delegations/"+d.ID, other, nil); status != http.StatusNotFound {
		t.Fatalf("another tenant's GET: %d, want 404", status)
	}
	plain := e.dispatch(t, "po-plain", "dup")
	e.waitFor(t, plain.ID, "dispatch", dispatched)
	if got := e.get(t, plain.ID); len(got.RemoteTasks) != 0 {
		t.Fatalf("a delegation with one task shows remote_tasks %+v", got.RemoteTasks)
	}
	e.CheckInvariants(t)
}
