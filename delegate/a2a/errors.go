package a2a

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/quittance/quittance/delegate/egress"
)

// Sentinel errors for the A2A error codes a client acts on. An *RPCError
// matches the sentinel of its code with errors.Is.
var (
	// ErrTaskNotFound is A2A error -32001: the remote agent does not know the task.
	ErrTaskNotFound = errors.New("a2a: task not found")
	// ErrTaskNotCancelable is A2A error -32002: the task cannot be canceled in its state.
	ErrTaskNotCancelable = errors.New("a2a: task not cancelable")
	// ErrPushNotSupported is A2A error -32003: the agent does not support push notifications.
	ErrPushNotSupported = errors.New("a2a: push notifications not supported")
	// ErrUnsupportedOperation is A2A error -32004: the agent does not support the operation.
	ErrUnsupportedOperation = errors.New("a2a: unsupported operation")
	// ErrContentTypeNotSupported is A2A error -32005: a part's media type is not supported.
	ErrContentTypeNotSupported = errors.New("a2a: content type not supported")
	// ErrInvalidAgentResponse is A2A error -32006: the agent produced an invalid response.
	ErrInvalidAgentResponse = errors.New("a2a: invalid agent response")
	// ErrExtensionSupportRequired is A2A error -32008: the agent requires an extension the request did not activate.
	ErrExtensionSupportRequired = errors.New("a2a: extension support required")
	// ErrVersionNotSupported is A2A error -32009: the agent does not speak the requested protocol version.
	ErrVersionNotSupported = errors.New("a2a: protocol version not supported")
)

// ErrMalformedResponse reports a response that is not valid A2A: bad JSON,
// a mismatched JSON-RPC id, a task without an id or with an unknown state.
// It is not retryable: the same request would get the same answer.
var ErrMalformedResponse = errors.New("a2a: malformed response")

// ErrBodyTooLarge reports a response body or stream event above the size cap.
var ErrBodyTooLarge = errors.New("a2a: response body too large")

var rpcCodes = map[error]int{
	ErrTaskNotFound:             -32001,
	ErrTaskNotCancelable:        -32002,
	ErrPushNotSupported:         -32003,
	ErrUnsupportedOperation:     -32004,
	ErrContentTypeNotSupported:  -32005,
	ErrInvalidAgentResponse:     -32006,
	ErrExtensionSupportRequired: -32008,
	ErrVersionNotSupported:      -32009,
}

// RPCError is a JSON-RPC error returned by a remote agent. Data holds the
// error's data member verbatim: an array of google.rpc detail objects in
// A2A v1.0, any JSON value in v0.3.
type RPCError struct {
	Code    int
	Message string
	Data    json.RawMessage
}

// Error returns the code and the remote message.
func (e *RPCError) Error() string {
	return fmt.Sprintf("a2a: rpc error %d: %s", e.Code, e.Message)
}

// Is reports whether target is the sentinel for this error's code, so that
// errors.Is(err, ErrTaskNotCancelable) holds for a -32002 error.
func (e *RPCError) Is(target error) bool {
	code, ok := rpcCodes[target]
	return ok && code == e.Code
}

// Unsupported reports whether a call was answered with "the agent does
// not do this": JSON-RPC -32601 (method not found) or A2A -32004
// (UnsupportedOperationError). An optional method such as ListTasks
// answered so is not supported by the agent; nothing else is learnt.
func Unsupported(err error) bool {
	var rpcErr *RPCError
	return errors.As(err, &rpcErr) && (rpcErr.Code == -32601 || rpcErr.Code == -32004)
}

// HTTPStatusError reports a non-2xx HTTP response from a remote agent.
type HTTPStatusError struct {
	StatusCode int
}

// Error returns the status code.
func (e *HTTPStatusError) Error() string {
	return fmt.Sprintf("a2a: unexpected HTTP status %d", e.StatusCode)
}

// Retryable reports whether a failed call may succeed if repeated unchanged:
// timeouts, connection failures, HTTP 5xx, 408 and 429, and the gRPC
// statuses Unavailable, DeadlineExceeded, ResourceExhausted and Aborted. Protocol errors
// (JSON-RPC errors, malformed responses), egress refusals, TLS certificate
// failures and cancellation by the caller are not retryable.
func Retryable(err error) bool {
	if err == nil {
		return false
	}
	var (
		rpcErr    *RPCError
		statusErr *HTTPStatusError
		certErr   *tls.CertificateVerificationError
		authErr   x509.UnknownAuthorityError
		hostErr   x509.HostnameError
		netErr    net.Error
	)
	switch {
	case errors.Is(err, egress.ErrDenied), errors.Is(err, ErrMalformedResponse), errors.Is(err, ErrBodyTooLarge):
		return false
	case errors.As(err, &rpcErr):
		return false
	case errors.As(err, new(*GRPCStatusError)):
		r, _ := grpcRetryable(err)
		return r
	case errors.As(err, &statusErr):
		c := statusErr.StatusCode
		return c >= 500 || c == 408 || c == 429
	case errors.As(err, &certErr), errors.As(err, &authErr), errors.As(err, &hostErr):
		return false
	case errors.Is(err, context.Canceled):
		return false
	case errors.Is(err, context.DeadlineExceeded):
		return true
	case errors.As(err, &netErr):
		return true
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return true
	}
	return false
}
