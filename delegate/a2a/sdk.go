package a2a

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
)

// The HTTP+JSON and gRPC bindings call the remote agent through a2a-go
// v2's transports (a2aclient.RESTTransport, a2agrpc/v1). Requests are
// encoded as the v1.0 JSON-RPC dialect encodes them and read into the
// SDK's types; the SDK's results are written back out as A2A v1.0 JSON and
// decoded by decode.go, so every binding's answers pass the same checks
// (a task without an id, an unknown state, a part without content are
// malformed whichever binding brought them).

// toSDK converts one of the v1.0 dialect's params to its a2a-go v2 type,
// both being the A2A v1.0 JSON shape.
func toSDK[T any](params any) (*T, error) {
	b, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	var out T
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	return &out, nil
}

// fromSDK writes an a2a-go v2 value back out as A2A v1.0 JSON, a result
// wrapped in its StreamResponse member name where wrap is set.
func fromSDK(v any, wrap string) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformedResponse, err)
	}
	if wrap == "" {
		return b, nil
	}
	return json.Marshal(map[string]json.RawMessage{wrap: b})
}

// sdkEvent converts an SDK event (a send result or a streamed event).
func sdkEvent(ev sdk.Event) (StreamEvent, error) {
	var wrap string
	switch ev.(type) {
	case *sdk.Task:
		wrap = "task"
	case *sdk.Message:
		wrap = "message"
	case *sdk.TaskStatusUpdateEvent:
		wrap = "statusUpdate"
	case *sdk.TaskArtifactUpdateEvent:
		wrap = "artifactUpdate"
	default:
		return StreamEvent{}, fmt.Errorf("%w: event of type %T", ErrMalformedResponse, ev)
	}
	raw, err := fromSDK(ev, wrap)
	if err != nil {
		return StreamEvent{}, err
	}
	return decodeEvent(raw)
}

func sdkTask(t *sdk.Task) (Task, error) {
	if t == nil {
		return Task{}, fmt.Errorf("%w: no task", ErrMalformedResponse)
	}
	raw, err := fromSDK(t, "")
	if err != nil {
		return Task{}, err
	}
	return decodeTaskResult(raw)
}

func sdkSendResult(r sdk.SendMessageResult) (SendResult, error) {
	ev, ok := r.(sdk.Event)
	if !ok || r == nil {
		return SendResult{}, fmt.Errorf("%w: send result of type %T", ErrMalformedResponse, r)
	}
	se, err := sdkEvent(ev)
	if err != nil {
		return SendResult{}, err
	}
	if se.Task == nil && se.Message == nil {
		return SendResult{}, fmt.Errorf("%w: send result is neither a task nor a message", ErrMalformedResponse)
	}
	return SendResult{Task: se.Task, Message: se.Message}, nil
}

func sdkListResult(r *sdk.ListTasksResponse) (ListTasksResult, error) {
	if r == nil {
		return ListTasksResult{}, fmt.Errorf("%w: no list", ErrMalformedResponse)
	}
	raw, err := fromSDK(r, "")
	if err != nil {
		return ListTasksResult{}, err
	}
	return decodeListTasksResult(raw)
}

// sdkParams are the service parameters (HTTP headers, gRPC metadata) of a
// v1.0 call: the protocol version and the activated extensions.
func sdkParams(extensions []string) a2aclient.ServiceParams {
	p := a2aclient.ServiceParams{"A2A-Version": {"1.0"}}
	if len(extensions) > 0 {
		p["A2A-Extensions"] = []string{strings.Join(extensions, ", ")}
	}
	return p
}

// reasonCodes are the JSON-RPC codes of the A2A v1.0 error reasons that
// google.rpc.ErrorInfo carries on the HTTP+JSON and gRPC bindings, so an
// error is the same *RPCError whichever binding reported it.
var reasonCodes = map[string]int{
	"PARSE_ERROR":                        -32700,
	"INVALID_REQUEST":                    -32600,
	"METHOD_NOT_FOUND":                   -32601,
	"INVALID_PARAMS":                     -32602,
	"INTERNAL_ERROR":                     -32603,
	"TASK_NOT_FOUND":                     -32001,
	"TASK_NOT_CANCELABLE":                -32002,
	"PUSH_NOTIFICATION_NOT_SUPPORTED":    -32003,
	"UNSUPPORTED_OPERATION":              -32004,
	"CONTENT_TYPE_NOT_SUPPORTED":         -32005,
	"INVALID_AGENT_RESPONSE":             -32006,
	"EXTENDED_AGENT_CARD_NOT_CONFIGURED": -32007,
	"EXTENSION_SUPPORT_REQUIRED":         -32008,
	"VERSION_NOT_SUPPORTED":              -32009,
}

// errorInfoType is the type URL of google.rpc.ErrorInfo.
const errorInfoType = "type.googleapis.com/google.rpc.ErrorInfo"

// statusDetailsError reads the details of a google.rpc.Status (the error
// body of the HTTP+JSON binding, the status of a gRPC call) and returns the
// *RPCError of its A2A ErrorInfo reason, with the details verbatim as its
// Data, as the JSON-RPC binding reports them; nil when no detail names an
// A2A reason this package knows.
func statusDetailsError(message string, details []json.RawMessage) *RPCError {
	for _, d := range details {
		var info struct {
			Type   string `json:"@type"`
			Reason string `json:"reason"`
			Domain string `json:"domain"`
		}
		if json.Unmarshal(d, &info) != nil || info.Type != errorInfoType || info.Domain != sdk.ProtocolDomain {
			continue
		}
		code, ok := reasonCodes[info.Reason]
		if !ok {
			continue
		}
		data, err := json.Marshal(details)
		if err != nil || bytes.Equal(data, []byte("null")) {
			data = nil
		}
		return &RPCError{Code: code, Message: message, Data: data}
	}
	return nil
}

// malformed reports whether err is the SDK's failure to read a response it
// received whole: bad JSON or a value of the wrong type.
func malformed(err error) bool {
	var (
		syntaxErr *json.SyntaxError
		typeErr   *json.UnmarshalTypeError
	)
	return errors.As(err, &syntaxErr) || errors.As(err, &typeErr)
}
