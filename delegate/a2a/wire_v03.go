package a2a

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
)

// v03Dialect encodes requests for A2A v0.3 JSON-RPC: slash-separated
// methods, "kind" discriminators, lower-case roles, the blocking flag and
// nested push configs.
type v03Dialect struct{}

type v03File struct {
	Name     string `json:"name,omitempty"`
	MimeType string `json:"mimeType,omitempty"`
	Bytes    string `json:"bytes,omitempty"`
	URI      string `json:"uri,omitempty"`
}

type v03Part struct {
	Kind     string          `json:"kind"`
	Text     *string         `json:"text,omitempty"`
	Data     json.RawMessage `json:"data,omitempty"`
	File     *v03File        `json:"file,omitempty"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

type v03Message struct {
	Kind             string          `json:"kind"`
	MessageID        string          `json:"messageId"`
	ContextID        string          `json:"contextId,omitempty"`
	TaskID           string          `json:"taskId,omitempty"`
	Role             string          `json:"role"`
	Parts            []v03Part       `json:"parts"`
	Metadata         json.RawMessage `json:"metadata,omitempty"`
	Extensions       []string        `json:"extensions,omitempty"`
	ReferenceTaskIDs []string        `json:"referenceTaskIds,omitempty"`
}

type v03Auth struct {
	Schemes     []string `json:"schemes"`
	Credentials string   `json:"credentials,omitempty"`
}

type v03PushConfig struct {
	ID             string   `json:"id,omitempty"`
	URL            string   `json:"url"`
	Token          string   `json:"token,omitempty"`
	Authentication *v03Auth `json:"authentication,omitempty"`
}

type v03SendConfig struct {
	Blocking               bool           `json:"blocking"`
	PushNotificationConfig *v03PushConfig `json:"pushNotificationConfig,omitempty"`
}

type v03SendParams struct {
	Message       v03Message    `json:"message"`
	Configuration v03SendConfig `json:"configuration"`
}

type v03TaskParams struct {
	ID string `json:"id"`
}

type v03TaskPushConfig struct {
	TaskID                 string        `json:"taskId"`
	PushNotificationConfig v03PushConfig `json:"pushNotificationConfig"`
}

func (v03Dialect) version() string          { return "0.3" }
func (v03Dialect) extensionsHeader() string { return "X-A2A-Extensions" }

func (v03Dialect) sendMessage(req SendRequest) (string, any, error) {
	msg, err := v03EncodeMessage(req.Message)
	if err != nil {
		return "", nil, err
	}
	p := v03SendParams{Message: msg, Configuration: v03SendConfig{Blocking: !req.ReturnImmediately}}
	if req.Push != nil {
		pc := v03EncodePushConfig(*req.Push)
		p.Configuration.PushNotificationConfig = &pc
	}
	return "message/send", p, nil
}

func (v03Dialect) getTask(id string) (string, any) {
	return "tasks/get", v03TaskParams{ID: id}
}

// v03ListParams is the ListTasksParams of tasks/list (v0.3.7 and later).
type v03ListParams struct {
	ContextID     string `json:"contextId,omitempty"`
	PageSize      int    `json:"pageSize,omitempty"`
	PageToken     string `json:"pageToken,omitempty"`
	HistoryLength int    `json:"historyLength,omitempty"`
}

func (v03Dialect) listTasks(req ListTasksRequest) (string, any) {
	return "tasks/list", v03ListParams(req)
}

func (v03Dialect) cancelTask(id string, metadata json.RawMessage) (string, any) {
	return "tasks/cancel", v03CancelParams{ID: id, Metadata: metadata}
}

// v03CancelParams is TaskIdParams with its optional metadata.
type v03CancelParams struct {
	ID       string          `json:"id"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

func (v03Dialect) subscribe(id string) (string, any) {
	return "tasks/resubscribe", v03TaskParams{ID: id}
}

func (v03Dialect) setPushConfig(taskID string, pc PushConfig) (string, any) {
	return "tasks/pushNotificationConfig/set", v03TaskPushConfig{TaskID: taskID, PushNotificationConfig: v03EncodePushConfig(pc)}
}

func v03EncodePushConfig(pc PushConfig) v03PushConfig {
	out := v03PushConfig{ID: pc.ID, URL: pc.URL, Token: pc.Token}
	if pc.AuthScheme != "" {
		out.Authentication = &v03Auth{Schemes: []string{pc.AuthScheme}, Credentials: pc.AuthCredentials}
	}
	return out
}

func v03EncodeMessage(m Message) (v03Message, error) {
	role := RoleUser
	if m.Role == RoleAgent {
		role = RoleAgent
	}
	parts := make([]v03Part, 0, len(m.Parts))
	for _, p := range m.Parts {
		w := v03Part{Metadata: p.Metadata}
		switch {
		case p.Data != nil:
			if !bytes.HasPrefix(bytes.TrimSpace(p.Data), []byte("{")) {
				return v03Message{}, fmt.Errorf("encode v0.3 message: a data part must be a JSON object")
			}
			w.Kind, w.Data = "data", p.Data
		case p.URL != "":
			w.Kind, w.File = "file", &v03File{Name: p.Filename, MimeType: p.MediaType, URI: p.URL}
		case p.Raw != nil:
			w.Kind, w.File = "file", &v03File{Name: p.Filename, MimeType: p.MediaType, Bytes: base64.StdEncoding.EncodeToString(p.Raw)}
		default:
			w.Kind, w.Text = "text", &p.Text
		}
		parts = append(parts, w)
	}
	return v03Message{
		Kind:             "message",
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
