package a2a

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/quittance/quittance/delegate/a2a/wire03"
)

// v03Dialect encodes requests for A2A v0.3 JSON-RPC: slash-separated
// methods, and 0.3's objects (wire03, which the gateway's 0.3 face reads
// them with) — "kind" discriminators, lower-case roles, the blocking flag
// and nested push configs. Metadata is sent as the caller gave it.
type v03Dialect struct{}

func (v03Dialect) version() string          { return "0.3" }
func (v03Dialect) extensionsHeader() string { return "X-A2A-Extensions" }

func (v03Dialect) sendMessage(req SendRequest) (string, any, error) {
	msg, err := v03EncodeMessage(req.Message)
	if err != nil {
		return "", nil, err
	}
	blocking := !req.ReturnImmediately
	p := wire03.SendParams[json.RawMessage]{Message: &msg, Configuration: &wire03.SendConfig{Blocking: &blocking}}
	if req.Push != nil {
		pc := v03EncodePushConfig(*req.Push)
		p.Configuration.PushNotificationConfig = &pc
	}
	return "message/send", p, nil
}

func (v03Dialect) getTask(id string) (string, any) {
	return "tasks/get", wire03.TaskParams[json.RawMessage]{ID: id}
}

// listTasks is tasks/list (v0.3.7 and later); a history length of 0 is
// not sent.
func (v03Dialect) listTasks(req ListTasksRequest) (string, any) {
	p := wire03.ListParams{ContextID: req.ContextID, PageSize: req.PageSize, PageToken: req.PageToken}
	if req.HistoryLength != 0 {
		p.HistoryLength = &req.HistoryLength
	}
	return "tasks/list", p
}

// cancelTask is tasks/cancel, with TaskIdParams' optional metadata.
func (v03Dialect) cancelTask(id string, metadata json.RawMessage) (string, any) {
	return "tasks/cancel", wire03.TaskParams[json.RawMessage]{ID: id, Metadata: metadata}
}

func (v03Dialect) subscribe(id string) (string, any) {
	return "tasks/resubscribe", wire03.TaskParams[json.RawMessage]{ID: id}
}

func (v03Dialect) setPushConfig(taskID string, pc PushConfig) (string, any) {
	return "tasks/pushNotificationConfig/set", wire03.TaskPushConfig{TaskID: taskID, PushNotificationConfig: v03EncodePushConfig(pc)}
}

func v03EncodePushConfig(pc PushConfig) wire03.PushConfig {
	out := wire03.PushConfig{ID: pc.ID, URL: pc.URL, Token: pc.Token}
	if pc.AuthScheme != "" {
		out.Authentication = &wire03.PushAuth{Schemes: []string{pc.AuthScheme}, Credentials: pc.AuthCredentials}
	}
	return out
}

// v03EncodeMessage is m as 0.3 sends it; a data part that is not a JSON
// object is refused, 0.3 having no other.
func v03EncodeMessage(m Message) (wire03.Message[json.RawMessage], error) {
	role := wire03.RoleUser
	if m.Role == RoleAgent {
		role = wire03.RoleAgent
	}
	parts := make([]wire03.Part[json.RawMessage], 0, len(m.Parts))
	for _, p := range m.Parts {
		var w wire03.Part[json.RawMessage]
		switch {
		case p.Data != nil:
			if !bytes.HasPrefix(bytes.TrimSpace(p.Data), []byte("{")) {
				return wire03.Message[json.RawMessage]{}, fmt.Errorf("encode v0.3 message: a data part must be a JSON object")
			}
			w = wire03.DataPart(p.Data, p.Metadata)
		case p.URL != "":
			w = wire03.URIPart(p.Filename, p.MediaType, p.URL, p.Metadata)
		case p.Raw != nil:
			w = wire03.BytesPart(p.Filename, p.MediaType, p.Raw, p.Metadata)
		default:
			w = wire03.TextPart(p.Text, p.Metadata)
		}
		parts = append(parts, w)
	}
	return wire03.Message[json.RawMessage]{
		Kind:             wire03.KindMessage,
		MessageID:        m.MessageID,
		ContextID:        m.ContextID,
		TaskID:           m.TaskID,
		Role:             role,
		Parts:            parts,
		Metadata:         m.Metadata,
		Extensions:       m.Extensions,
		ReferenceTaskIDs: m.ReferenceTaskIDs,
	}, nil
}
