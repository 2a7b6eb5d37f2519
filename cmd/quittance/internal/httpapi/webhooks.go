package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/quittance/quittance/ledger/webhook"
)

// WebhookBody is a webhook endpoint. Secret is present only in the answer
// that created it: it is shown once.
type WebhookBody struct {
	ID         string    `json:"id"`
	URL        string    `json:"url"`
	EventTypes []string  `json:"event_types" doc:"Event types delivered; empty delivers all."`
	Secret     string    `json:"secret,omitempty" doc:"The signing secret (whsec_<base64>), shown only when the endpoint is created. Verify webhook-signature with it."`
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
}

func webhookBody(e webhook.Endpoint) WebhookBody {
	return WebhookBody{ID: e.ID, URL: e.URL, EventTypes: e.EventTypes, Secret: e.Secret, CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt}
}

// DeliveryBody is one delivery of an event to an endpoint.
type DeliveryBody struct {
	ID            int64      `json:"id"`
	WebhookID     string     `json:"webhook_id" doc:"The webhook-id header of the delivery (the same on every attempt)."`
	EventSeq      int64      `json:"event_seq"`
	Status        string     `json:"status" enum:"pending,delivered,dead"`
	Attempts      int        `json:"attempts"`
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
	LastStatus    int        `json:"last_status,omitempty" doc:"HTTP status of the last attempt."`
	LastError     string     `json:"last_error,omitempty"`
	CreatedAt     time.Time  `json:"created_at"`
	DeliveredAt   *time.Time `json:"delivered_at,omitempty"`
}

// registerWebhooks is the route table of webhook endpoints and their
// deliveries, served when webhooks are.
func (s *Server) registerWebhooks() {
	if s.webhooks == nil {
		return
	}
	tags := []string{"webhooks"}
	huma.Register(s.api, huma.Operation{
		OperationID: "put-webhook", Method: http.MethodPut, Path: "/v1/webhooks/{id}", Tags: tags,
		Summary: "Create or update a webhook endpoint of the caller's tenant",
		Description: "Deliveries follow Standard Webhooks: headers webhook-id, webhook-timestamp and webhook-signature (v1,<base64 HMAC-SHA256 of " +
			"\"id.timestamp.body\"> keyed with the decoded secret). 201 with the secret when created (shown once), 200 without it when updated.",
		Security: bearerAuth,
	}, s.putWebhook)
	huma.Register(s.api, huma.Operation{
		OperationID: "get-webhook", Method: http.MethodGet, Path: "/v1/webhooks/{id}", Tags: tags,
		Summary: "A webhook endpoint of the caller's tenant (without its secret)", Security: bearerAuth,
	}, s.getWebhook)
	huma.Register(s.api, huma.Operation{
		OperationID: "list-webhook-deliveries", Method: http.MethodGet, Path: "/v1/webhooks/{id}/deliveries", Tags: tags,
		Summary: "Deliveries to a webhook endpoint, newest first", Security: bearerAuth,
	}, s.listWebhookDeliveries)
	huma.Register(s.api, huma.Operation{
		OperationID: "redrive-webhook-deliveries", Method: http.MethodPost, Path: "/admin/v1/webhooks/deliveries/redrive", Tags: []string{"admin"},
		Summary:     "Put dead-lettered webhook deliveries back in the queue (on-call)",
		Description: "Dead deliveries get their attempts reset and are due now; pending ones are made due now too. Optionally limited to one tenant, or one tenant's endpoint.",
		Security:    bearerAuth,
	}, s.redriveWebhookDeliveries)
}

type putWebhookInput struct {
	ID   string `path:"id" maxLength:"128"`
	Body struct {
		URL        string   `json:"url" maxLength:"2048" doc:"Where deliveries are POSTed; https, and not a private address, unless the egress policy allows it."`
		EventTypes []string `json:"event_types,omitempty" maxItems:"64" doc:"Event types to deliver (e.g. task_status_changed, compensation_acked); empty or absent delivers all."`
	}
}

type webhookOutput struct {
	Status int
	Body   WebhookBody
}

// putWebhook serves PUT /v1/webhooks/{id}: create or update a webhook
// endpoint of the caller's tenant.
func (s *Server) putWebhook(ctx context.Context, in *putWebhookInput) (*webhookOutput, error) {
	e, created, err := s.webhooks.PutEndpoint(ctx, principal(ctx), in.ID, in.Body.URL, in.Body.EventTypes)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return &webhookOutput{Status: createdStatus(created), Body: webhookBody(e)}, nil
}

// getWebhook serves GET /v1/webhooks/{id}: a webhook endpoint of the
// caller's tenant (without its secret).
func (s *Server) getWebhook(ctx context.Context, in *idPathInput) (*webhookOutput, error) {
	e, err := s.webhooks.Endpoint(ctx, principal(ctx), in.ID)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return &webhookOutput{Status: http.StatusOK, Body: webhookBody(e)}, nil
}

type deliveriesInput struct {
	ID     string `path:"id" maxLength:"128"`
	Status string `query:"status" enum:"pending,delivered,dead"`
	Before int64  `query:"before" doc:"Only deliveries with a smaller id (the last id of the previous page)."`
	Limit  int    `query:"limit" minimum:"1" maximum:"500" default:"100"`
}

type deliveriesOutput struct {
	Body struct {
		Deliveries []DeliveryBody `json:"deliveries"`
	}
}

// listWebhookDeliveries serves GET /v1/webhooks/{id}/deliveries: deliveries
// to a webhook endpoint, newest first.
func (s *Server) listWebhookDeliveries(ctx context.Context, in *deliveriesInput) (*deliveriesOutput, error) {
	ds, err := s.webhooks.Deliveries(ctx, principal(ctx), webhook.DeliveryFilter{EndpointID: in.ID, Status: in.Status, Before: in.Before, Limit: in.Limit})
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	out := &deliveriesOutput{}
	out.Body.Deliveries = make([]DeliveryBody, len(ds))
	for i, d := range ds {
		b := DeliveryBody{
			ID: d.ID, WebhookID: webhook.MessageID(d.EventSeq), EventSeq: d.EventSeq, Status: d.Status, Attempts: d.Attempts,
			LastStatus: d.LastStatus, LastError: d.LastError, CreatedAt: d.CreatedAt, DeliveredAt: timePtr(d.DeliveredAt),
		}
		if d.Status == webhook.StatusPending {
			b.NextAttemptAt = timePtr(d.NextAttemptAt)
		}
		out.Body.Deliveries[i] = b
	}
	return out, nil
}

type redriveInput struct {
	Body struct {
		Tenant    string `json:"tenant,omitempty" doc:"Only this tenant's deliveries (required with webhook_id)."`
		WebhookID string `json:"webhook_id,omitempty" doc:"Only this endpoint's deliveries."`
	}
}

type redriveOutput struct {
	Body struct {
		Redriven int `json:"redriven" doc:"Dead-lettered deliveries put back in the queue."`
	}
}

// redriveWebhookDeliveries serves POST
// /admin/v1/webhooks/deliveries/redrive: put dead-lettered webhook
// deliveries back in the queue (on-call).
func (s *Server) redriveWebhookDeliveries(ctx context.Context, in *redriveInput) (*redriveOutput, error) {
	n, err := s.webhooks.Redrive(ctx, principal(ctx), in.Body.Tenant, in.Body.WebhookID)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	out := &redriveOutput{}
	out.Body.Redriven = n
	return out, nil
}
