package demoagent

import (
	"encoding/json"
	"errors"
	"fmt"
)

// The agent's own A2A v1.0 wire structs. They mirror a2a.proto's JSON names
// (ProtoJSON: camelCase members, full enum names) and are the server side's
// view of the protocol; the client side lives in package delegate/a2a.

// A2A v1.0 task states, as the agent emits them.
const (
	stateSubmitted     = "TASK_STATE_SUBMITTED"
	stateWorking       = "TASK_STATE_WORKING"
	stateCompleted     = "TASK_STATE_COMPLETED"
	stateFailed        = "TASK_STATE_FAILED"
	stateCanceled      = "TASK_STATE_CANCELED"
	stateRejected      = "TASK_STATE_REJECTED"
	stateInputRequired = "TASK_STATE_INPUT_REQUIRED"
	stateAuthRequired  = "TASK_STATE_AUTH_REQUIRED"
)

// terminal reports whether a state is terminal.
func terminal(state string) bool {
	switch state {
	case stateCompleted, stateFailed, stateCanceled, stateRejected:
		return true
	}
	return false
}

// interrupted reports whether a state waits for the client.
func interrupted(state string) bool {
	return state == stateInputRequired || state == stateAuthRequired
}

type part struct {
	Text      *string         `json:"text,omitempty"`
	Data      json.RawMessage `json:"data,omitempty"`
	URL       string          `json:"url,omitempty"`
	Raw       []byte          `json:"raw,omitempty"`
	MediaType string          `json:"mediaType,omitempty"`
	Filename  string          `json:"filename,omitempty"`
	Metadata  json.RawMessage `json:"metadata,omitempty"`
}

func textPart(s string) part { return part{Text: &s, MediaType: "text/plain"} }

func dataPart(v any) part {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("demoagent: encode data part: %v", err))
	}
	return part{Data: b, MediaType: "application/json"}
}

type message struct {
	MessageID        string          `json:"messageId"`
	ContextID        string          `json:"contextId,omitempty"`
	TaskID           string          `json:"taskId,omitempty"`
	Role             string          `json:"role"`
	Parts            []part          `json:"parts"`
	Metadata         json.RawMessage `json:"metadata,omitempty"`
	Extensions       []string        `json:"extensions,omitempty"`
	ReferenceTaskIDs []string        `json:"referenceTaskIds,omitempty"`
}

type taskStatus struct {
	State     string   `json:"state"`
	Message   *message `json:"message,omitempty"`
	Timestamp string   `json:"timestamp,omitempty"`
}

type artifact struct {
	ArtifactID  string   `json:"artifactId"`
	Name        string   `json:"name,omitempty"`
	Description string   `json:"description,omitempty"`
	Parts       []part   `json:"parts"`
	Extensions  []string `json:"extensions,omitempty"`
}

type taskJSON struct {
	ID        string     `json:"id"`
	ContextID string     `json:"contextId"`
	Status    taskStatus `json:"status"`
	Artifacts []artifact `json:"artifacts,omitempty"`
	History   []message  `json:"history,omitempty"`
}

type statusUpdate struct {
	TaskID    string     `json:"taskId"`
	ContextID string     `json:"contextId"`
	Status    taskStatus `json:"status"`
}

type artifactUpdate struct {
	TaskID    string   `json:"taskId"`
	ContextID string   `json:"contextId"`
	Artifact  artifact `json:"artifact"`
	Append    bool     `json:"append,omitempty"`
	LastChunk bool     `json:"lastChunk,omitempty"`
}

// streamResponse is the StreamResponse oneof: exactly one member is set.
type streamResponse struct {
	Task           *taskJSON       `json:"task,omitempty"`
	Message        *message        `json:"message,omitempty"`
	StatusUpdate   *statusUpdate   `json:"statusUpdate,omitempty"`
	ArtifactUpdate *artifactUpdate `json:"artifactUpdate,omitempty"`
}

type authenticationInfo struct {
	Scheme      string `json:"scheme"`
	Credentials string `json:"credentials,omitempty"`
}

// pushConfig is the flat v1.0 TaskPushNotificationConfig.
type pushConfig struct {
	Tenant         string              `json:"tenant,omitempty"`
	ID             string              `json:"id,omitempty"`
	TaskID         string              `json:"taskId,omitempty"`
	URL            string              `json:"url"`
	Token          string              `json:"token,omitempty"`
	Authentication *authenticationInfo `json:"authentication,omitempty"`
}

type sendConfiguration struct {
	AcceptedOutputModes        []string    `json:"acceptedOutputModes,omitempty"`
	TaskPushNotificationConfig *pushConfig `json:"taskPushNotificationConfig,omitempty"`
	ReturnImmediately          bool        `json:"returnImmediately,omitempty"`
}

type sendParams struct {
	Tenant        string             `json:"tenant,omitempty"`
	Message       *message           `json:"message"`
	Configuration *sendConfiguration `json:"configuration,omitempty"`
}

type taskIDParams struct {
	Tenant   string          `json:"tenant,omitempty"`
	ID       string          `json:"id"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

// listTasksParams is ListTasksRequest (the members the agent honours).
type listTasksParams struct {
	Tenant    string `json:"tenant,omitempty"`
	ContextID string `json:"contextId,omitempty"`
	PageSize  int    `json:"pageSize,omitempty"`
	PageToken string `json:"pageToken,omitempty"`
}

// listTasksResult is ListTasksResponse.
type listTasksResult struct {
	Tasks         []*taskJSON `json:"tasks"`
	NextPageToken string      `json:"nextPageToken"`
	PageSize      int         `json:"pageSize"`
	TotalSize     int         `json:"totalSize"`
}

type rpcRequest struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
}

type rpcResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

// errorInfo is a google.rpc.ErrorInfo detail, as A2A v1.0 puts it in a
// JSON-RPC error's data array.
type errorInfo struct {
	Type     string            `json:"@type"`
	Reason   string            `json:"reason"`
	Domain   string            `json:"domain"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// rpcError is a JSON-RPC error object; it doubles as the Go error the
// handlers return.
type rpcError struct {
	Code    int         `json:"code"`
	Message string      `json:"message"`
	Data    []errorInfo `json:"data,omitempty"`
}

func (e *rpcError) Error() string { return fmt.Sprintf("rpc error %d: %s", e.Code, e.Message) }

// newRPCError builds an A2A error with its ErrorInfo detail; reason is the
// UPPER_SNAKE_CASE error name without "Error".
func newRPCError(code int, reason, msg string, meta map[string]string) *rpcError {
	return &rpcError{Code: code, Message: msg, Data: []errorInfo{{
		Type: "type.googleapis.com/google.rpc.ErrorInfo", Reason: reason, Domain: "a2a-protocol.org", Metadata: meta,
	}}}
}

func errParse(msg string) *rpcError   { return newRPCError(-32700, "PARSE_ERROR", msg, nil) }
func errRequest(msg string) *rpcError { return newRPCError(-32600, "INVALID_REQUEST", msg, nil) }
func errMethodNotFound(method string) *rpcError {
	return newRPCError(-32601, "METHOD_NOT_FOUND", "method not found: "+method, nil)
}
func errParams(msg string) *rpcError { return newRPCError(-32602, "INVALID_PARAMS", msg, nil) }
func errInternal() *rpcError         { return newRPCError(-32603, "INTERNAL", "internal error", nil) }
func errTaskNotFound(id string) *rpcError {
	return newRPCError(-32001, "TASK_NOT_FOUND", "task not found", map[string]string{"taskId": id})
}
func errTaskNotCancelable(id, state string) *rpcError {
	return newRPCError(-32002, "TASK_NOT_CANCELABLE", "task is "+state+" and cannot be canceled",
		map[string]string{"taskId": id, "state": state})
}
func errUnsupported(msg string) *rpcError {
	return newRPCError(-32004, "UNSUPPORTED_OPERATION", msg, nil)
}
func errVersion(v string) *rpcError {
	return newRPCError(-32009, "VERSION_NOT_SUPPORTED", "A2A version "+v+" is not supported; send A2A-Version: 1.0",
		map[string]string{"requestedVersion": v, "supportedVersions": "1.0"})
}

// asRPCError returns err as an *rpcError, or an internal error.
func asRPCError(err error) *rpcError {
	var re *rpcError
	if errors.As(err, &re) {
		return re
	}
	return errInternal()
}
