package gateway_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/google/uuid"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
)

// TestGatewayRefinement: a new task sent in an earlier task's contextId,
// referring to it, is a delegation linked to it (context_from and
// references, as POST /v1/delegations takes them), in the same context;
// a reference to another tenant's task is refused as one to a task that
// does not exist, with the REST problem's code.
func TestGatewayRefinement(t *testing.T) {
	t.Parallel()
	e := newGatewayEnv(t)
	ctx := context.Background()
	for _, binding := range []a2a.TransportProtocol{a2a.TransportProtocolJSONRPC, a2a.TransportProtocolHTTPJSON} {
		acme := e.client(t, e.acme, orgID, binding)
		first := send(t, acme, ledgerMessage(uuid.NewString(), "Order 40 laptops for the Lyon office", 50_000))
		first = waitTask(t, acme, first.ID, "the first task working", func(task *a2a.Task) bool {
			return task.Status.State == a2a.TaskStateWorking
		})

		more := ledgerMessage(uuid.NewString(), "Add 40 docking stations to that order", 8_000)
		more.ContextID, more.ReferenceTasks = first.ContextID, []a2a.TaskID{first.ID}
		second := send(t, acme, more)
		if second.ContextID != first.ContextID {
			t.Fatalf("%s: the refinement's context %q, the first task's %q", binding, second.ContextID, first.ContextID)
		}
		var d httpapi.DelegationBody
		e.Do(t, http.MethodGet, "/v1/delegations/"+string(second.ID), e.acme, nil).Expect(t, http.StatusOK).JSON(t, &d)
		if d.Links == nil || d.Links.ContextFrom != string(first.ID) || len(d.Links.References) != 1 || d.Links.References[0] != string(first.ID) {
			t.Fatalf("%s: the refinement's links %+v", binding, d.Links)
		}
		waitTask(t, acme, second.ID, "the refinement working", func(task *a2a.Task) bool {
			return task.Status.State == a2a.TaskStateWorking && task.ContextID == first.ContextID
		})

		// ListTasks by the context: the first task and its refinement.
		list, err := acme.ListTasks(ctx, &a2a.ListTasksRequest{ContextID: first.ContextID})
		if err != nil || len(list.Tasks) != 2 || !containsTask(list.Tasks, first.ID) || !containsTask(list.Tasks, second.ID) {
			t.Fatalf("%s: the context's tasks: %v %+v", binding, err, list)
		}

		globex := e.client(t, e.globex, orgID, binding)
		if list, err := globex.ListTasks(ctx, &a2a.ListTasksRequest{ContextID: first.ContextID}); err != nil || len(list.Tasks) != 0 {
			t.Fatalf("%s: globex lists acme's context: %v %+v", binding, err, list)
		}
		theirs := send(t, globex, ledgerMessage(uuid.NewString(), "Order 2 chairs", 1_000))
		codes := map[string]string{}
		for what, ref := range map[string]a2a.TaskID{"globex's task": theirs.ID, "no task": a2a.TaskID(uuid.NewString()), "no UUID": "po-1"} {
			m := ledgerMessage(uuid.NewString(), "Add 2 chairs", 1_000)
			m.ReferenceTasks = []a2a.TaskID{ref}
			_, err := acme.SendMessage(ctx, &a2a.SendMessageRequest{Message: m})
			if !errors.Is(err, a2a.ErrInvalidParams) {
				t.Fatalf("%s: a reference to %s: %v", binding, what, err)
			}
			codes[what] = errorInfoMeta(t, err)["problem_code"]
		}
		for what, code := range codes {
			if code != "references_not_found" {
				t.Fatalf("%s: a reference to %s: problem_code %q (all: %v)", binding, what, code, codes)
			}
		}
		m := ledgerMessage(uuid.NewString(), "Add 2 chairs", 1_000)
		m.ContextID = theirs.ContextID
		if _, err := acme.SendMessage(ctx, &a2a.SendMessageRequest{Message: m}); !errors.Is(err, a2a.ErrInvalidParams) ||
			errorInfoMeta(t, err)["problem_code"] != "context_from_not_found" {
			t.Fatalf("%s: a task in globex's context: %v", binding, err)
		}
	}
}
