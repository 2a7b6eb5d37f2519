package ledger

import (
	"errors"
	"fmt"
)

// Sentinel errors. The HTTP layer maps each to one status and problem code
// in a single place; callers match them with errors.Is.
var (
	// ErrNotFound: the addressed resource does not exist, or the caller may
	// not see it (another tenant's delegation looks exactly like a missing one).
	ErrNotFound = errors.New("not found")
	// ErrUnauthenticated: no valid bearer token.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrForbidden: the token's role may not do this.
	ErrForbidden = errors.New("forbidden")
	// ErrIdempotencyMismatch: a business_operation_id (or other idempotency
	// key) was reused with a different request.
	ErrIdempotencyMismatch = errors.New("idempotency key reused with a different request")
	// ErrInsufficientFunds: the budget's available amount is below the hold.
	ErrInsufficientFunds = errors.New("insufficient funds in budget")
	// ErrConflict: the request contradicts what is recorded (see the wrapped detail).
	ErrConflict = errors.New("conflict")
	// ErrUnknownTaskStatus is returned for a task state no A2A version defines.
	ErrUnknownTaskStatus = errors.New("unknown task status")
	// ErrUnavailable: the ledger cannot take the request now (its write
	// queue is full, or the database is out of reach or read-only) and
	// applied none of it, so the same request, with the same idempotency
	// key, may be sent again after a pause.
	ErrUnavailable = errors.New("temporarily unavailable")
	// ErrOutcomeUnknown: the database's answer to the request's commit was
	// lost (the connection broke after COMMIT was sent, or the primary died
	// while its standby had yet to confirm it), so the request may or may
	// not have been applied. Unlike ErrUnavailable it promises nothing; the
	// same request with the same idempotency key finds out which.
	ErrOutcomeUnknown = errors.New("outcome unknown: the commit's answer was lost")
	// ErrConcurrentUpdate: a row changed under an update that expected its
	// previous version. Callers retry the whole transaction.
	ErrConcurrentUpdate = errors.New("concurrent update")
)

// ValidationError reports a request field that is missing or malformed.
// Nothing has been written when it is returned.
type ValidationError struct {
	Field   string
	Problem string
}

// Error implements error.
func (e *ValidationError) Error() string { return e.Field + ": " + e.Problem }

// Invalid returns a *ValidationError for field.
func Invalid(field, format string, args ...any) error {
	return &ValidationError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// ReferenceError reports a request that names a related resource (an org,
// a budget) that does not exist. Unlike ErrNotFound it is about the body,
// not the addressed resource.
type ReferenceError struct {
	Field string
	ID    string
}

// Error implements error.
func (e *ReferenceError) Error() string { return fmt.Sprintf("%s %q does not exist", e.Field, e.ID) }

// ConflictError reports a request refused because of what is recorded; Code
// is a stable machine-readable name (e.g. "currency_mismatch").
type ConflictError struct {
	Code   string
	Detail string
}

// Error implements error.
func (e *ConflictError) Error() string { return e.Code + ": " + e.Detail }

// Is makes errors.Is(err, ErrConflict) true for every *ConflictError.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// Conflict returns a *ConflictError.
func Conflict(code, format string, args ...any) error {
	return &ConflictError{Code: code, Detail: fmt.Sprintf(format, args...)}
}
