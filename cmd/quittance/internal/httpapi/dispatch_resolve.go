package httpapi

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"

	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/ledger"
)

// registerDispatchResolve registers the on-call resolution of a
// dispatch_unknown delegation.
func (s *Server) registerDispatchResolve() {
	huma.Register(s.api, huma.Operation{
		OperationID: "resolve-dispatch", Method: http.MethodPost, Path: "/admin/v1/delegations/{id}/dispatch/resolve",
		Tags: []string{"admin"}, Summary: "Record the remote task of a dispatch_unknown delegation",
		Description: "On-call, with a reason. Only for a delegation in the dispatch_unknown condition (else 409 dispatch_not_unknown). " +
			"Before anything is recorded the org's agent is asked for the task (GetTask, with its history): it is taken only when " +
			"it is in the delegation's own context or its history holds the dispatch's messageId. Else 409 remote_task_conflict " +
			"(recorded as a remote_task_conflict event; nothing else changes); 409 remote_task_unknown when the agent does not know " +
			"the task; 502 remote_agent_unavailable when the agent cannot be asked (nothing recorded); 409 remote_task_taken when " +
			"another delegation at the org, of any tenant, records that task. Accepted, it ends the condition, records the task id, " +
			"its context and a dispatch_resolved event, and observes the task at once (and cancels it if a cancel was requested). " +
			"The hold and the obligation do not move, and the task's first terminal status cannot release the hold: a rejection " +
			"or an ungated end is taken as a gated one (compensation evidence is required); completed settles as usual.",
		Security: bearerAuth,
	}, s.resolveDispatch)
}

type dispatchResolveInput struct {
	ID   string `path:"id" doc:"The delegation id (a UUID)."`
	Body struct {
		TaskID    string `json:"task_id" minLength:"1" maxLength:"4096" doc:"The remote task the remote org says its agent created for the dispatch (found by the dispatch's messageId, shown on the dispatch_unknown event). Taken only when the org's agent shows it is this delegation's."`
		ContextID string `json:"context_id,omitempty" maxLength:"4096" doc:"That task's context id, if the org gave it: it must be the one the org's agent shows (else 422)."`
		Reason    string `json:"reason" minLength:"1" maxLength:"4096" doc:"How the task was found: who at the org confirmed it, and a ticket."`
	}
}

// resolveDispatch serves POST /admin/v1/delegations/{id}/dispatch/resolve:
// record the remote task of a dispatch_unknown delegation.
func (s *Server) resolveDispatch(ctx context.Context, in *dispatchResolveInput) (*delegationOutput, error) {
	return byPathID(ctx, s, in.ID, func(id uuid.UUID) (ledger.Delegation, error) {
		return s.orchestrator.ResolveDispatch(ctx, principal(ctx), id, delegate.ResolveDispatchInput{
			TaskID: in.Body.TaskID, ContextID: in.Body.ContextID, Reason: in.Body.Reason,
		})
	}, delegationOK)
}
