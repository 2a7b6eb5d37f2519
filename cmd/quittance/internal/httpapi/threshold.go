package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"

	"github.com/quittance/quittance/ledger"
)

// WriteOffThresholdBody is a write-off approval threshold in force: the
// default, with the currencies that have their own, or one currency's.
type WriteOffThresholdBody struct {
	Currency        string             `json:"currency,omitempty" doc:"The ISO 4217 currency the threshold is for; absent for the default, which applies to every currency without one of its own."`
	ThresholdMinor  int64              `json:"threshold_minor" doc:"A write-off above it waits for a second on-call principal."`
	Source          string             `json:"source" enum:"configuration,approved_change" doc:"configuration: QUITTANCE_WRITE_OFF_APPROVAL_THRESHOLD_MINOR (or the currency's entry of QUITTANCE_WRITE_OFF_APPROVAL_THRESHOLDS_MINOR), until a change is approved."`
	UpdatedAt       *time.Time         `json:"updated_at,omitempty"`
	UpdatedBy       string             `json:"updated_by,omitempty" doc:"The principal whose approval (or, under dev, bootstrap change) set it."`
	PendingChangeID string             `json:"pending_change_id,omitempty" doc:"The approved change that set it."`
	PendingChange   *PendingChangeBody `json:"pending_change,omitempty" doc:"Set on a 202: the change waits for a different on-call principal; the threshold above is still the one in force."`
	// Currencies is set on the default threshold of a GET.
	Currencies []WriteOffThresholdBody `json:"currencies,omitempty" doc:"On a GET: the currencies with thresholds of their own, by currency."`
}

func thresholdsBody(ts ledger.WriteOffThresholds) WriteOffThresholdBody {
	b := thresholdBody(ts.Default)
	for _, t := range ts.Currencies {
		b.Currencies = append(b.Currencies, thresholdBody(t))
	}
	return b
}

func thresholdBody(t ledger.WriteOffThreshold) WriteOffThresholdBody {
	b := WriteOffThresholdBody{Currency: t.Currency, ThresholdMinor: t.Minor, Source: "approved_change", UpdatedAt: timePtr(t.UpdatedAt)}
	if t.Configured {
		b.Source = "configuration"
	}
	if t.UpdatedBy != uuid.Nil {
		b.UpdatedBy = t.UpdatedBy.String()
	}
	if t.PendingChangeID != uuid.Nil {
		b.PendingChangeID = t.PendingChangeID.String()
	}
	return b
}

// registerWriteOffThreshold is the route table of the write-off approval
// thresholds.
func (s *Server) registerWriteOffThreshold() {
	tags := []string{"admin"}
	huma.Register(s.api, huma.Operation{
		OperationID: "get-write-off-threshold", Method: http.MethodGet, Path: "/admin/v1/write-off-threshold", Tags: tags,
		Summary:     "The write-off approval thresholds in force",
		Description: "On-call and finance. The default threshold, with currencies: the currencies that have thresholds of their own.",
		Security:    bearerAuth,
	}, s.getWriteOffThreshold)
	huma.Register(s.api, huma.Operation{
		OperationID: "put-write-off-threshold", Method: http.MethodPut, Path: "/admin/v1/write-off-threshold", Tags: tags,
		Summary: "Change the write-off approval threshold, the default or a currency's (a pending change)",
		Description: "On-call. With currency, sets that currency's own threshold; without, the default. Answered 202 with pending_change: the change takes effect when a different on-call principal " +
			"approves it (POST /admin/v1/pending-changes/{id}/approve). Under dev the bootstrap credential's change applies at once (200).",
		Security: bearerAuth,
	}, s.putWriteOffThreshold)
}

type thresholdOutput struct {
	Status int
	Body   WriteOffThresholdBody
}

// getWriteOffThreshold serves GET /admin/v1/write-off-threshold: the
// write-off approval thresholds in force.
func (s *Server) getWriteOffThreshold(ctx context.Context, _ *struct{}) (*thresholdOutput, error) {
	ts, err := s.ledger.GetWriteOffThresholds(ctx, principal(ctx))
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return &thresholdOutput{Status: http.StatusOK, Body: thresholdsBody(ts)}, nil
}

type putThresholdInput struct {
	Body struct {
		ThresholdMinor int64  `json:"threshold_minor" minimum:"0" doc:"The new threshold in integer minor units."`
		Currency       string `json:"currency,omitempty" doc:"The ISO 4217 currency whose own threshold to set; absent sets the default."`
	}
}

// putWriteOffThreshold serves PUT /admin/v1/write-off-threshold: change the
// write-off approval threshold, the default or a currency's (a pending
// change).
func (s *Server) putWriteOffThreshold(ctx context.Context, in *putThresholdInput) (*thresholdOutput, error) {
	t, err := s.ledger.RequestWriteOffThreshold(ctx, principal(ctx), in.Body.Currency, in.Body.ThresholdMinor)
	status, pc, err := s.changeStatus(ctx, err, http.StatusOK)
	if err != nil {
		return nil, err
	}
	body := thresholdBody(t)
	body.PendingChange = pc
	return &thresholdOutput{Status: status, Body: body}, nil
}
