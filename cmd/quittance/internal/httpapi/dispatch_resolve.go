package httpapi

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/quittance/quittance/delegate"
)

type dispatchResolveInput struct {
	ID   string `path:"id" doc:"The delegation id (a UUID)."`
	Body struct {
		TaskID    string `json:"task_id" minLength:"1" maxLength:"4096" doc:"The remote task the remote org says its agent created for the dispatch (found by the dispatch's messageId, shown on the dispatch_unknown event)."`
		ContextID string `json:"context_id,omitempty" maxLength:"4096" doc:"That task's context id, if the org gave it."`
		Reason    string `json:"reason" minLength:"1" maxLength:"4096" doc:"How the task was found: who at the org confirmed it, and a ticket."`
	}
}

// registerDispatchResolve registers the on-call resolution of a
// dispatch_unknown delegation.
func (s *Server) registerDispatchResolve() {
	huma.Register(s.api, huma.Operation{
		OperationID: "resolve-dispatch", Method: http.MethodPost, Path: "/admin/v1/delegations/{id}/dispatch/resolve",
		Tags: []string{"admin"}, Summary: "Record the remote task of a dispatch_unknown delegation",
		Description: "On-call, with a reason. Only for a delegation in the dispatch_unknown condition (else 409 dispatch_not_unknown; " +
			"409 remote_task_taken when another delegation has that task): ends the condition, records the task id and a " +
			"dispatch_resolved event, and observes the task at once (and cancels it if a cancel was requested). " +
			"The hold and the obligation do not move: the task's terminal status decides them as usual.",
		Security: bearerAuth,
	}, func(ctx context.Context, in *dispatchResolveInput) (*delegationOutput, error) {
		id, err := parseID(in.ID)
		if err != nil {
			return nil, err
		}
		d, err := s.orchestrator.ResolveDispatch(ctx, principal(ctx), id, delegate.ResolveDispatchInput{
			TaskID: in.Body.TaskID, ContextID: in.Body.ContextID, Reason: in.Body.Reason,
		})
		if err != nil {
			return nil, s.fail(ctx, err)
		}
		return &delegationOutput{Status: http.StatusOK, Body: delegationBody(d)}, nil
	})
}
