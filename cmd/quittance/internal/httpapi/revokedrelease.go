package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"

	"github.com/quittance/quittance/ledger/report"
)

// RevokedReleaseBody is an obligation released on a declaration of an org
// whose identity was revoked since, and finance's acknowledgement of it.
type RevokedReleaseBody struct {
	DelegationID      string    `json:"delegation_id" format:"uuid"`
	OrgID             string    `json:"org_id"`
	Amount            MoneyBody `json:"amount"`
	ReleasedAt        time.Time `json:"released_at"`
	IdentityRevokedAt time.Time `json:"identity_revoked_at"`
	AcknowledgedAt    time.Time `json:"acknowledged_at"`
	AcknowledgedBy    string    `json:"acknowledged_by" doc:"The acknowledging finance principal's id."`
	Note              string    `json:"note"`
}

// registerRevokedReleases is the route table of the releases on a revoked
// identity's declaration that finance acknowledges.
func (s *Server) registerRevokedReleases() {
	if s.compensation == nil {
		return
	}
	huma.Register(s.api, huma.Operation{
		OperationID: "acknowledge-revoked-release", Method: http.MethodPost, Path: "/v1/delegations/{id}/revoked-release/acknowledge",
		Tags:    []string{"reconciliation"},
		Summary: "Acknowledge an obligation released on a declaration of an identity revoked since",
		Description: "Finance. Once acknowledged (a revoked_release_acknowledged event with the note), the release is no longer listed " +
			"in /v1/anomalies, the summary's revoked_identity_releases or reporting.revoked_identity_releases_v1. 404 when the " +
			"delegation has no such release, 409 release_already_acknowledged the second time.",
		Security: bearerAuth,
	}, s.acknowledgeRevokedRelease)
}

type acknowledgeRevokedReleaseInput struct {
	ID   string `path:"id" doc:"The delegation id (a UUID)."`
	Body struct {
		Note string `json:"note" minLength:"1" maxLength:"4096" doc:"What finance did about it (booked, claimed back, accepted)."`
	}
}

type revokedReleaseOutput struct {
	Body RevokedReleaseBody
}

// acknowledgeRevokedRelease serves POST
// /v1/delegations/{id}/revoked-release/acknowledge: acknowledge an
// obligation released on a declaration of an identity revoked since.
func (s *Server) acknowledgeRevokedRelease(ctx context.Context, in *acknowledgeRevokedReleaseInput) (*revokedReleaseOutput, error) {
	return byPathID(ctx, s, in.ID, func(id uuid.UUID) (report.RevokedRelease, error) {
		return s.compensation.AcknowledgeRevokedRelease(ctx, principal(ctx), id, in.Body.Note)
	}, func(r report.RevokedRelease) *revokedReleaseOutput {
		return &revokedReleaseOutput{Body: revokedReleaseBody(r)}
	})
}

func revokedReleaseBody(r report.RevokedRelease) RevokedReleaseBody {
	return RevokedReleaseBody{
		DelegationID: r.DelegationID.String(), OrgID: r.OrgID, Amount: MoneyBody{AmountMinor: r.AmountMinor, Currency: r.Currency},
		ReleasedAt: r.ReleasedAt, IdentityRevokedAt: r.IdentityRevokedAt, AcknowledgedAt: r.AcknowledgedAt,
		AcknowledgedBy: r.AcknowledgedBy.String(), Note: r.AcknowledgeNote,
	}
}
