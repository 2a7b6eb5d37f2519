package httpapi

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/ledger"
)

// registerExtraTaskWriteOff registers on-call's resolution of an extra
// remote task of a settled delegation whose compensation no receipt
// resolved (ledger/DESIGN.md §2.2).
func (s *Server) registerExtraTaskWriteOff() {
	huma.Register(s.api, huma.Operation{
		OperationID: "write-off-extra-task", Method: http.MethodPost, Path: "/admin/v1/delegations/{id}/remote-tasks/{task_id}/write-off",
		Tags: []string{"admin"}, Summary: "Accept that an extra remote task's effects may stand",
		Description: "On-call, with a reason. Only for an extra remote task of a settled delegation whose compensation is open " +
			"(an extra_task_compensation anomaly; else 409 extra_task_not_open, 404 for a task that is not one of the delegation's): " +
			"ends the anomaly with an extra_task_written_off event. No money moves: the settled obligation's hold paid for the tracked task alone.",
		Security: bearerAuth,
	}, s.writeOffExtraTask)
}

type extraTaskWriteOffInput struct {
	ID     string `path:"id" doc:"The delegation id (a UUID)."`
	TaskID string `path:"task_id" doc:"The extra remote task (as its extra_task_compensation_required event names it)."`
	Body   struct {
		Reason string `json:"reason" minLength:"1" maxLength:"2000" doc:"Why the task's effects may stand: who at the org was asked, and a ticket."`
	}
}

// writeOffExtraTask serves POST
// /admin/v1/delegations/{id}/remote-tasks/{task_id}/write-off: accept that
// an extra remote task's effects may stand.
func (s *Server) writeOffExtraTask(ctx context.Context, in *extraTaskWriteOffInput) (*delegationOutput, error) {
	return byPathID(ctx, s, in.ID, func(id uuid.UUID) (ledger.Delegation, error) {
		return s.compensation.WriteOffExtraTask(ctx, principal(ctx), id, in.TaskID, in.Body.Reason)
	}, delegationOK)
}

// registerExtraTaskRedrive registers on-call's redrive of the compensation
// of an extra remote task of a settled delegation whose requests are
// exhausted (ledger/DESIGN.md §2.2), beside its write-off.
func (s *Server) registerExtraTaskRedrive() {
	huma.Register(s.api, huma.Operation{
		OperationID: "redrive-extra-task-compensation", Method: http.MethodPost, Path: "/admin/v1/delegations/{id}/remote-tasks/{task_id}/redrive",
		Tags: []string{"admin"}, Summary: "Redrive an extra remote task's compensation",
		Description: "On-call, with a reason. Only for an extra remote task of a settled delegation whose compensation is open and whose " +
			"requests are exhausted: at least one was sent about it and no compensation request job of the delegation is still open " +
			"(else 409 redrive_not_allowed; also for an org without an agent card or with a revoked identity; 404 for a task that is not " +
			"one of the delegation's). Resets the task's attempt count, records an extra_task_compensation_redriven event and queues " +
			"the compensation request job again, under the task's own idempotency key. The anomaly stays until a receipt resolves it " +
			"or on-call writes the task off. No money moves.",
		Security: bearerAuth,
	}, s.redriveExtraTaskCompensation)
}

type extraTaskRedriveInput struct {
	ID     string `path:"id" doc:"The delegation id (a UUID)."`
	TaskID string `path:"task_id" doc:"The extra remote task (as its extra_task_compensation_required event names it)."`
	Body   struct {
		Reason string `json:"reason" minLength:"1" maxLength:"4096" doc:"Why the org's agent is asked again: what changed since the requests were exhausted."`
	}
}

// redriveExtraTaskCompensation serves POST
// /admin/v1/delegations/{id}/remote-tasks/{task_id}/redrive: redrive an
// extra remote task's compensation.
func (s *Server) redriveExtraTaskCompensation(ctx context.Context, in *extraTaskRedriveInput) (*delegationOutput, error) {
	return byPathID(ctx, s, in.ID, func(id uuid.UUID) (ledger.Delegation, error) {
		return s.compensation.RedriveExtraTask(ctx, principal(ctx), id, in.TaskID, compensation.RedriveInput{Reason: in.Body.Reason})
	}, delegationOK)
}
