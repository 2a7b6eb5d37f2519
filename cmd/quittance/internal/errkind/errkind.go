package errkind

import (
	"context"
	"errors"
	"net/http"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/delegate/a2a"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/access"
)

// Kind is what sort of failure an error is, as the API and the console
// tell it: each kind has one status (Status).
type Kind string

// The kinds.
const (
	// Internal: an error no kind describes; logged, never shown.
	Internal Kind = "internal"
	// Canceled: the client went away (context.Canceled).
	Canceled Kind = "canceled"
	// TokenRefused: compensation evidence refused before it verified and
	// matched a delegation (compensation.CodeTokenRefused).
	TokenRefused Kind = "token_refused"
	// TokenConflict: verified evidence that contradicts what is recorded:
	// a replayed jti, or evidence the obligation is not waiting for.
	TokenConflict Kind = "token_conflict"
	// TokenTooLarge: compensation evidence over the size limit.
	TokenTooLarge Kind = "token_too_large"
	// TokenInvalid: any other refusal of verified evidence.
	TokenInvalid Kind = "token_invalid"
	// PushUnauthorized: a push notification without its delegation's token.
	PushUnauthorized Kind = "push_unauthorized"
	// PushTaskMismatch: a push notification about another task.
	PushTaskMismatch Kind = "push_task_mismatch"
	// RemoteAgentUnavailable: the remote org's agent could not be asked.
	RemoteAgentUnavailable Kind = "remote_agent_unavailable"
	// MalformedPush: a push body that is no A2A task, message or update.
	MalformedPush Kind = "malformed_push"
	// WriteOffSelfApproval: a write-off decided by the person who asked
	// for it (access.SecondPersonError of access.SubjectWriteOff).
	WriteOffSelfApproval Kind = "write_off_self_approval"
	// SelfApproval: a pending change approved by the person who asked for
	// it (any other access.ErrSelfApproval).
	SelfApproval Kind = "self_approval"
	// IdentityNotLinked: two principals that may be one person
	// (access.ErrIdentityNotLinked).
	IdentityNotLinked Kind = "identity_not_linked"
	// Validation: a request field missing or malformed
	// (*ledger.ValidationError).
	Validation Kind = "validation"
	// Reference: a request naming a resource that does not exist
	// (*ledger.ReferenceError).
	Reference Kind = "reference"
	// Conflict: a request refused because of what is recorded
	// (*ledger.ConflictError).
	Conflict Kind = "conflict"
	// Transition: an obligation event its state does not take
	// (*ledger.TransitionError).
	Transition Kind = "transition"
	// NotFound: no such resource, or one the caller may not see.
	NotFound Kind = "not_found"
	// Unauthenticated: no valid credential.
	Unauthenticated Kind = "unauthenticated"
	// Forbidden: the caller's role may not do this.
	Forbidden Kind = "forbidden"
	// IdempotencyMismatch: an idempotency key reused with another request.
	IdempotencyMismatch Kind = "idempotency_mismatch"
	// InsufficientFunds: the budget does not cover the hold.
	InsufficientFunds Kind = "insufficient_funds"
	// UnknownTaskStatus: a task state no A2A version defines.
	UnknownTaskStatus Kind = "unknown_task_status"
	// Unavailable: nothing was applied and the same request may be sent
	// again after a pause (ledger.ErrUnavailable).
	Unavailable Kind = "unavailable"
	// OutcomeUnknown: the commit's answer was lost; the request may have
	// been applied (ledger.ErrOutcomeUnknown). A 500, but one that says so.
	OutcomeUnknown Kind = "outcome_unknown"
)

// UnavailableRetryAfter is the Retry-After, in seconds, of an Unavailable
// answer (the API's and the console's): a full write queue drains, and a
// database failover completes, in about that long.
const UnavailableRetryAfter = "1"

// StatusClientClosedRequest is the status of a request its client
// abandoned (nginx's 499); nobody reads it.
const StatusClientClosedRequest = 499

// statuses is the one kind→status table.
var statuses = map[Kind]int{
	Internal:               http.StatusInternalServerError,
	Canceled:               StatusClientClosedRequest,
	TokenRefused:           http.StatusUnauthorized,
	TokenConflict:          http.StatusConflict,
	TokenTooLarge:          http.StatusRequestEntityTooLarge,
	TokenInvalid:           http.StatusUnprocessableEntity,
	PushUnauthorized:       http.StatusUnauthorized,
	PushTaskMismatch:       http.StatusConflict,
	RemoteAgentUnavailable: http.StatusBadGateway,
	MalformedPush:          http.StatusBadRequest,
	WriteOffSelfApproval:   http.StatusForbidden,
	SelfApproval:           http.StatusForbidden,
	IdentityNotLinked:      http.StatusForbidden,
	Validation:             http.StatusUnprocessableEntity,
	Reference:              http.StatusUnprocessableEntity,
	Conflict:               http.StatusConflict,
	Transition:             http.StatusConflict,
	NotFound:               http.StatusNotFound,
	Unauthenticated:        http.StatusUnauthorized,
	Forbidden:              http.StatusForbidden,
	IdempotencyMismatch:    http.StatusUnprocessableEntity,
	InsufficientFunds:      http.StatusUnprocessableEntity,
	UnknownTaskStatus:      http.StatusUnprocessableEntity,
	Unavailable:            http.StatusServiceUnavailable,
	OutcomeUnknown:         http.StatusInternalServerError,
}

// Status is the HTTP status the kind is answered with; 500 for a kind
// the table does not hold.
func (k Kind) Status() int {
	if s, ok := statuses[k]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// The CLI's exit statuses for a refused request: the API answers each kind
// with its Status, and the CLI, which sees only that status, exits by it.
const (
	ExitFailure  = 1 // any other failure
	ExitUsage    = 2 // the command was invoked wrongly
	ExitConflict = 3 // a conflict with what is recorded (409)
	ExitAuth     = 4 // refused credentials or role (401, 403)
)

// ExitCode is the CLI's exit status for an API answer of status.
func ExitCode(status int) int {
	switch status {
	case http.StatusConflict:
		return ExitConflict
	case http.StatusUnauthorized, http.StatusForbidden:
		return ExitAuth
	}
	return ExitFailure
}

// Of is err's kind: the first that matches, in the order below, so an
// error matching two kinds is always told the same way.
func Of(err error) Kind {
	var (
		refusal *compensation.RefusalError
		second  *access.SecondPersonError
	)
	if errors.As(err, &refusal) {
		return refusalKind(refusal.Code)
	}
	if errors.As(err, &second) && second.Subject == access.SubjectWriteOff {
		return WriteOffSelfApproval
	}
	for _, m := range sentinels {
		if errors.Is(err, m.err) {
			return m.kind
		}
	}
	var (
		validation *ledger.ValidationError
		reference  *ledger.ReferenceError
		conflict   *ledger.ConflictError
		transition *ledger.TransitionError
	)
	switch {
	case errors.As(err, &validation):
		return Validation
	case errors.As(err, &reference):
		return Reference
	case errors.As(err, &conflict):
		return Conflict
	case errors.As(err, &transition):
		return Transition
	}
	for _, m := range lateSentinels {
		if errors.Is(err, m.err) {
			return m.kind
		}
	}
	return Internal
}

// sentinel is a sentinel error and its kind.
type sentinel struct {
	err  error
	kind Kind
}

// sentinels are matched before the struct errors: the refusals of the
// push receiver, the remote agent and the four-eyes rule.
var sentinels = []sentinel{
	{delegate.ErrPushUnauthorized, PushUnauthorized},
	{delegate.ErrPushTaskMismatch, PushTaskMismatch},
	{delegate.ErrRemoteAgentUnavailable, RemoteAgentUnavailable},
	{a2a.ErrMalformedResponse, MalformedPush},
	{access.ErrSelfApproval, SelfApproval},
	{access.ErrIdentityNotLinked, IdentityNotLinked},
}

// lateSentinels are matched after the struct errors.
var lateSentinels = []sentinel{
	{ledger.ErrNotFound, NotFound},
	{ledger.ErrUnauthenticated, Unauthenticated},
	{ledger.ErrForbidden, Forbidden},
	{ledger.ErrIdempotencyMismatch, IdempotencyMismatch},
	{ledger.ErrInsufficientFunds, InsufficientFunds},
	{ledger.ErrUnknownTaskStatus, UnknownTaskStatus},
	{ledger.ErrUnavailable, Unavailable},
	{ledger.ErrOutcomeUnknown, OutcomeUnknown},
	{context.Canceled, Canceled},
}

// refusalKind is the kind of a refused compensation token, by its code:
// token_refused for every refusal decided before the token verified and
// matched a delegation (compensation.Service.Submit tells no more); for
// the refusals told to the org that signed the token, a conflict for a
// replayed jti or evidence the obligation is not waiting for and invalid
// for the rest (evidence_conflict, a wrong or missing idempotency key, an
// amount over the hold); too large for an oversized token.
func refusalKind(code string) Kind {
	switch code {
	case compensation.CodeTokenRefused:
		return TokenRefused
	case compensation.CodeTokenReplayed, compensation.CodeEvidenceNotExpected:
		return TokenConflict
	case compensation.CodeTokenTooLarge:
		return TokenTooLarge
	}
	return TokenInvalid
}
