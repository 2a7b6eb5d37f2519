package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/delegate/a2a"
	"github.com/quittance/quittance/ledger"
)

// Problem is an RFC 9457 problem detail with a stable machine-readable code.
type Problem struct {
	Type     string              `json:"type,omitempty" doc:"A URI reference identifying the problem type."`
	Title    string              `json:"title" doc:"A short summary of the problem type."`
	Status   int                 `json:"status" doc:"The HTTP status code."`
	Code     string              `json:"code" doc:"A stable, machine-readable name of the problem, e.g. insufficient_funds."`
	Detail   string              `json:"detail,omitempty" doc:"What went wrong in this occurrence."`
	Instance string              `json:"instance,omitempty"`
	Errors   []*huma.ErrorDetail `json:"errors,omitempty" doc:"The individual fields at fault."`
}

// Error implements error.
func (p *Problem) Error() string { return p.Detail }

// GetStatus implements huma.StatusError.
func (p *Problem) GetStatus() int { return p.Status }

// ContentType makes huma send problems as application/problem+json.
func (p *Problem) ContentType(ct string) string {
	if ct == "application/json" {
		return "application/problem+json"
	}
	return ct
}

// newProblem builds a problem.
func newProblem(status int, code, detail string, errs ...*huma.ErrorDetail) *Problem {
	return &Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Code: code, Detail: detail, Errors: errs}
}

// statusCodes names the problems huma itself raises (malformed JSON, schema
// violations, unsupported media types) so every problem carries a code.
var statusCodes = map[int]string{
	http.StatusBadRequest:            "bad_request",
	http.StatusUnauthorized:          "unauthenticated",
	http.StatusForbidden:             "forbidden",
	http.StatusNotFound:              "not_found",
	http.StatusMethodNotAllowed:      "method_not_allowed",
	http.StatusNotAcceptable:         "not_acceptable",
	http.StatusConflict:              "conflict",
	http.StatusRequestEntityTooLarge: "body_too_large",
	http.StatusUnsupportedMediaType:  "unsupported_media_type",
	http.StatusUnprocessableEntity:   "validation_failed",
	http.StatusTooManyRequests:       "rate_limited",
	http.StatusInternalServerError:   "internal",
	http.StatusServiceUnavailable:    "unavailable",
}

func init() {
	huma.NewError = func(status int, msg string, errs ...error) huma.StatusError {
		code, ok := statusCodes[status]
		if !ok {
			code = strings.ReplaceAll(strings.ToLower(http.StatusText(status)), " ", "_")
		}
		var details []*huma.ErrorDetail
		for _, err := range errs {
			if err == nil {
				continue
			}
			if d, ok := err.(huma.ErrorDetailer); ok {
				details = append(details, d.ErrorDetail())
			} else {
				details = append(details, &huma.ErrorDetail{Message: err.Error()})
			}
		}
		return newProblem(status, code, msg, details...)
	}
}

// problemFor is the one mapping from domain errors to HTTP problems. Errors
// it does not recognise are logged and become an opaque 500.
func problemFor(ctx context.Context, log *slog.Logger, err error) error {
	var (
		validation *ledger.ValidationError
		reference  *ledger.ReferenceError
		conflict   *ledger.ConflictError
		transition *ledger.TransitionError
		problem    *Problem
		refusal    *compensation.RefusalError
	)
	switch {
	case errors.As(err, &problem):
		return problem
	case errors.As(err, &refusal):
		return newProblem(refusalStatus(refusal.Code), refusal.Code, refusal.Detail)
	case errors.Is(err, delegate.ErrPushUnauthorized):
		return newProblem(http.StatusUnauthorized, "push_unauthorized", "the push notification token is missing or wrong")
	case errors.Is(err, delegate.ErrPushTaskMismatch):
		return newProblem(http.StatusConflict, "push_task_mismatch", "the push notification is about another task than the delegation's")
	case errors.Is(err, delegate.ErrRemoteAgentUnavailable):
		log.WarnContext(ctx, "remote agent could not be asked", slog.Any("error", err))
		return newProblem(http.StatusBadGateway, "remote_agent_unavailable",
			"the remote org's agent could not be asked about the task, or gave no usable answer; nothing was recorded, try again later")
	case errors.Is(err, a2a.ErrMalformedResponse):
		return newProblem(http.StatusBadRequest, "malformed_push", "the body is not an A2A task, message or task update")
	case errors.Is(err, ledger.ErrSelfApproval):
		return newProblem(http.StatusForbidden, "self_approval", "a "+string(decisionSubject(err))+" must be approved by a different on-call principal than the one that requested it")
	case errors.Is(err, ledger.ErrIdentityNotLinked):
		return newProblem(http.StatusForbidden, "identity_not_linked",
			"one of the two is an OpenID Connect identity not linked to its person's token principal, the other a person principal not yet linked to an identity or marked as having no identity-provider account: they may be one person")
	case errors.As(err, &validation):
		return newProblem(http.StatusUnprocessableEntity, "validation_failed", validation.Error(),
			&huma.ErrorDetail{Location: "body." + validation.Field, Message: validation.Problem})
	case errors.As(err, &reference):
		code := strings.TrimSuffix(reference.Field, "_id") + "_not_found"
		return newProblem(http.StatusUnprocessableEntity, code, reference.Error(),
			&huma.ErrorDetail{Location: "body." + reference.Field, Message: "does not exist", Value: reference.ID})
	case errors.As(err, &conflict):
		return newProblem(http.StatusConflict, conflict.Code, conflict.Detail)
	case errors.As(err, &transition):
		return newProblem(http.StatusConflict, "invalid_transition", transition.Error())
	case errors.Is(err, ledger.ErrNotFound):
		return newProblem(http.StatusNotFound, "not_found", "no such resource")
	case errors.Is(err, ledger.ErrUnauthenticated):
		return newProblem(http.StatusUnauthorized, "unauthenticated", "a valid bearer token is required")
	case errors.Is(err, ledger.ErrForbidden):
		return newProblem(http.StatusForbidden, "forbidden", "this token's role may not do this")
	case errors.Is(err, ledger.ErrIdempotencyMismatch):
		return newProblem(http.StatusUnprocessableEntity, "idempotency_mismatch",
			"this business_operation_id was already used with a different request")
	case errors.Is(err, ledger.ErrInsufficientFunds):
		return newProblem(http.StatusUnprocessableEntity, "insufficient_funds", "the budget's available amount does not cover the hold")
	case errors.Is(err, ledger.ErrUnknownTaskStatus):
		return newProblem(http.StatusUnprocessableEntity, "unknown_task_status", err.Error(),
			&huma.ErrorDetail{Location: "body.state", Message: "not an A2A task state"})
	case errors.Is(err, context.Canceled):
		return newProblem(499, "client_closed_request", "the request was canceled")
	}
	log.ErrorContext(ctx, "request failed", slog.Any("error", err))
	return newProblem(http.StatusInternalServerError, "internal", "an internal error occurred; it has been logged")
}

// refusalStatus is the HTTP status of a refused compensation token: 401
// token_refused for every refusal decided before the token verified and
// matched a delegation (compensation.Service.Submit tells no more); for
// the refusals told to the org that signed the token, 409 for a replayed
// jti or evidence the obligation is not waiting for and 422 for the rest
// (evidence_conflict, a wrong or missing idempotency key, an amount over
// the hold); 413 for an oversized token.
func refusalStatus(code string) int {
	switch code {
	case compensation.CodeTokenRefused:
		return http.StatusUnauthorized
	case compensation.CodeTokenReplayed, compensation.CodeEvidenceNotExpected:
		return http.StatusConflict
	case compensation.CodeTokenTooLarge:
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusUnprocessableEntity
}

// rateLimitedProblem is the 429 of a request over its rate limit: its
// principal's, or, unauthenticated or not yet authenticated, its client
// address's (one wording for both, so it does not tell a known credential
// from an unknown one).
func rateLimitedProblem(retryAfterSeconds int) *Problem {
	return newProblem(http.StatusTooManyRequests, "rate_limited",
		"too many requests for this credential or client address; retry after "+strconv.Itoa(retryAfterSeconds)+"s")
}

// decisionSubject is what a refused two-person decision was about.
func decisionSubject(err error) ledger.DecisionSubject {
	var second *ledger.SecondPersonError
	if errors.As(err, &second) {
		return second.Subject
	}
	return ledger.SubjectChange
}
