package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/quittance/quittance/cmd/quittance/internal/errkind"
	"github.com/quittance/quittance/compensation"
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

	// headers are sent with the problem (huma.HeadersError): Retry-After.
	headers http.Header
}

// GetHeaders implements huma.HeadersError.
func (p *Problem) GetHeaders() http.Header { return p.headers }

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

// problemFor is the one mapping from domain errors to HTTP problems: the
// status is the error's kind's (errkind), the code and detail are the
// API's. Errors of no kind are logged and become an opaque 500.
func problemFor(ctx context.Context, log *slog.Logger, err error) error {
	var problem *Problem
	if errors.As(err, &problem) {
		return problem
	}
	kind := errkind.Of(err)
	status := kind.Status()
	switch kind {
	case errkind.TokenRefused, errkind.TokenConflict, errkind.TokenTooLarge, errkind.TokenInvalid:
		var refusal *compensation.RefusalError
		errors.As(err, &refusal)
		return newProblem(status, refusal.Code, refusal.Detail)
	case errkind.RemoteAgentUnavailable:
		log.WarnContext(ctx, "remote agent could not be asked", slog.Any("error", err))
	case errkind.Validation:
		var validation *ledger.ValidationError
		errors.As(err, &validation)
		return newProblem(status, "validation_failed", validation.Error(),
			&huma.ErrorDetail{Location: "body." + validation.Field, Message: validation.Problem})
	case errkind.Reference:
		var reference *ledger.ReferenceError
		errors.As(err, &reference)
		code := strings.TrimSuffix(reference.Field, "_id") + "_not_found"
		return newProblem(status, code, reference.Error(),
			&huma.ErrorDetail{Location: "body." + reference.Field, Message: "does not exist", Value: reference.ID})
	case errkind.Conflict:
		var conflict *ledger.ConflictError
		errors.As(err, &conflict)
		return newProblem(status, conflict.Code, conflict.Detail)
	case errkind.Transition:
		var transition *ledger.TransitionError
		errors.As(err, &transition)
		return newProblem(status, "invalid_transition", transition.Error())
	case errkind.UnknownTaskStatus:
		return newProblem(status, "unknown_task_status", err.Error(),
			&huma.ErrorDetail{Location: "body.state", Message: "not an A2A task state"})
	case errkind.Internal:
		log.ErrorContext(ctx, "request failed", slog.Any("error", err))
	case errkind.OutcomeUnknown:
		log.ErrorContext(ctx, "request's commit outcome unknown", slog.Any("error", err))
	case errkind.Unavailable:
		log.WarnContext(ctx, "request refused for now", slog.Any("error", err))
		p := newProblem(status, problemWording[kind].code, problemWording[kind].detail)
		p.headers = http.Header{"Retry-After": {errkind.UnavailableRetryAfter}}
		return p
	case errkind.Canceled, errkind.PushUnauthorized, errkind.PushTaskMismatch, errkind.MalformedPush,
		errkind.WriteOffSelfApproval, errkind.SelfApproval, errkind.IdentityNotLinked, errkind.NotFound,
		errkind.Unauthenticated, errkind.Forbidden, errkind.IdempotencyMismatch, errkind.InsufficientFunds:
	}
	w := problemWording[kind]
	return newProblem(status, w.code, w.detail)
}

// ProblemOf is the problem the API answers err with (problemFor): the A2A
// gateway carries its status and code in its A2A errors, so a refusal
// has the same code over A2A as over the REST API.
func ProblemOf(ctx context.Context, log *slog.Logger, err error) *Problem {
	return problemFor(ctx, log, err).(*Problem)
}

// wording is a problem's fixed code and detail.
type wording struct{ code, detail string }

// problemWording is the code and detail of each kind whose problem says
// nothing of the occurrence.
var problemWording = map[errkind.Kind]wording{
	errkind.Internal:               {"internal", "an internal error occurred; it has been logged"},
	errkind.Canceled:               {"client_closed_request", "the request was canceled"},
	errkind.PushUnauthorized:       {"push_unauthorized", "the push notification token is missing or wrong"},
	errkind.PushTaskMismatch:       {"push_task_mismatch", "the push notification is about another task than the delegation's"},
	errkind.RemoteAgentUnavailable: {"remote_agent_unavailable", "the remote org's agent could not be asked about the task, or gave no usable answer; nothing was recorded, try again later"},
	errkind.MalformedPush:          {"malformed_push", "the body is not an A2A task, message or task update"},
	errkind.WriteOffSelfApproval:   {"self_approval", "a write-off must be approved by a different on-call principal than the one that requested it"},
	errkind.SelfApproval:           {"self_approval", "a change must be approved by a different on-call principal than the one that requested it"},
	errkind.IdentityNotLinked: {"identity_not_linked", "one of the two is an OpenID Connect identity not linked to its person's token principal, " +
		"the other a person principal not yet linked to an identity or marked as having no identity-provider account: they may be one person"},
	errkind.NotFound:            {"not_found", "no such resource"},
	errkind.Unauthenticated:     {"unauthenticated", "a valid bearer token is required"},
	errkind.Forbidden:           {"forbidden", "this token's role may not do this"},
	errkind.IdempotencyMismatch: {"idempotency_mismatch", "this business_operation_id was already used with a different request"},
	errkind.InsufficientFunds:   {"insufficient_funds", "the budget's available amount does not cover the hold"},
	errkind.Unavailable:         {"unavailable", "the ledger cannot take this request now and applied none of it; send it again, with the same idempotency key, after Retry-After"},
	errkind.OutcomeUnknown:      {"outcome_unknown", "the database's answer to this request's commit was lost, so it may or may not have been applied; send it again, with the same idempotency key, to find out"},
}

// rateLimitedProblem is the 429 of a request over its rate limit: its
// principal's, or, unauthenticated or not yet authenticated, its client
// address's (one wording for both, so it does not tell a known credential
// from an unknown one).
func rateLimitedProblem(retryAfterSeconds int) *Problem {
	return newProblem(http.StatusTooManyRequests, "rate_limited",
		"too many requests for this credential or client address; retry after "+strconv.Itoa(retryAfterSeconds)+"s")
}
