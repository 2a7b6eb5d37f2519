package httpapi

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/ledger"
)

// registerCompensationRedrive registers the on-call redrive of compensation.
func (s *Server) registerCompensationRedrive() {
	huma.Register(s.api, huma.Operation{
		OperationID: "redrive-compensation", Method: http.MethodPost, Path: "/admin/v1/delegations/{id}/compensation/redrive",
		Tags: []string{"admin"}, Summary: "Redrive compensation",
		Description: "On-call, with a reason. Only from compensation_unconfirmed (else 409 redrive_not_allowed): resets the attempt count, " +
			"records a compensation_redriven event and queues a new series of compensation requests with the same idempotency key. " +
			"The obligation stays compensation_unconfirmed, hold active, until evidence arrives.",
		Security: bearerAuth,
	}, s.redriveCompensation)
}

type compensationRedriveInput struct {
	ID   string `path:"id" doc:"The delegation id (a UUID)."`
	Body struct {
		Reason string `json:"reason" minLength:"1" maxLength:"4096" doc:"Why compensation is asked for again."`
	}
}

// redriveCompensation serves POST
// /admin/v1/delegations/{id}/compensation/redrive: redrive compensation.
func (s *Server) redriveCompensation(ctx context.Context, in *compensationRedriveInput) (*delegationOutput, error) {
	return byPathID(ctx, s, in.ID, func(id uuid.UUID) (ledger.Delegation, error) {
		return s.compensation.Redrive(ctx, principal(ctx), id, compensation.RedriveInput{Reason: in.Body.Reason})
	}, delegationOK)
}
