package a2a

import "encoding/json"

// v1Dialect encodes requests for A2A v1.0 JSON-RPC: PascalCase methods,
// ROLE_* roles, parts without "kind", the returnImmediately flag and flat
// push configs, with the interface's tenant copied into every request.
type v1Dialect struct {
	tenant string
}

type v1Part struct {
	Text      *string         `json:"text,omitempty"`
	Raw       []byte          `json:"raw,omitempty"`
	URL       string          `json:"url,omitempty"`
	Data      json.RawMessage `json:"data,omitempty"`
	Metadata  json.RawMessage `json:"metadata,omitempty"`
	Filename  string          `json:"filename,omitempty"`
	MediaType string          `json:"mediaType,omitempty"`
}

type v1Message struct {
	MessageID        string          `json:"messageId"`
	ContextID        string          `json:"contextId,omitempty"`
	TaskID           string          `json:"taskId,omitempty"`
	Role             string          `json:"role"`
	Parts            []v1Part        `json:"parts"`
	Metadata         json.RawMessage `json:"metadata,omitempty"`
	Extensions       []string        `json:"extensions,omitempty"`
	ReferenceTaskIDs []string        `json:"referenceTaskIds,omitempty"`
}

type v1Auth struct {
	Scheme      string `json:"scheme"`
	Credentials string `json:"credentials,omitempty"`
}

type v1PushConfig struct {
	Tenant         string  `json:"tenant,omitempty"`
	ID             string  `json:"id,omitempty"`
	TaskID         string  `json:"taskId,omitempty"`
	URL            string  `json:"url"`
	Token          string  `json:"token,omitempty"`
	Authentication *v1Auth `json:"authentication,omitempty"`
}

type v1SendConfig struct {
	TaskPushNotificationConfig *v1PushConfig `json:"taskPushNotificationConfig,omitempty"`
	ReturnImmediately          bool          `json:"returnImmediately,omitempty"`
}

type v1SendParams struct {
	Tenant        string        `json:"tenant,omitempty"`
	Message       v1Message     `json:"message"`
	Configuration *v1SendConfig `json:"configuration,omitempty"`
}

type v1TaskParams struct {
	Tenant string `json:"tenant,omitempty"`
	ID     string `json:"id"`
}

func (d v1Dialect) version() string          { return "1.0" }
func (d v1Dialect) extensionsHeader() string { return "A2A-Extensions" }

func (d v1Dialect) sendMessage(req SendRequest) (string, any, error) {
	p := v1SendParams{Tenant: d.tenant, Message: v1EncodeMessage(req.Message)}
	if req.ReturnImmediately || req.Push != nil {
		p.Configuration = &v1SendConfig{ReturnImmediately: req.ReturnImmediately}
		if req.Push != nil {
			pc := d.pushConfig("", *req.Push)
			p.Configuration.TaskPushNotificationConfig = &pc
		}
	}
	return "SendMessage", p, nil
}

func (d v1Dialect) getTask(id string) (string, any) {
	return "GetTask", v1TaskParams{Tenant: d.tenant, ID: id}
}

// v1ListParams is ListTasksRequest.
type v1ListParams struct {
	Tenant        string `json:"tenant,omitempty"`
	ContextID     string `json:"contextId,omitempty"`
	PageSize      int    `json:"pageSize,omitempty"`
	PageToken     string `json:"pageToken,omitempty"`
	HistoryLength int    `json:"historyLength,omitempty"`
}

func (d v1Dialect) listTasks(req ListTasksRequest) (string, any) {
	return "ListTasks", v1ListParams{Tenant: d.tenant, ContextID: req.ContextID, PageSize: req.PageSize, PageToken: req.PageToken, HistoryLength: req.HistoryLength}
}

func (d v1Dialect) cancelTask(id string, metadata json.RawMessage) (string, any) {
	return "CancelTask", v1CancelParams{Tenant: d.tenant, ID: id, Metadata: metadata}
}

// v1CancelParams is CancelTaskRequest: a task id and optional metadata.
type v1CancelParams struct {
	Tenant   string          `json:"tenant,omitempty"`
	ID       string          `json:"id"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

func (d v1Dialect) subscribe(id string) (string, any) {
	return "SubscribeToTask", v1TaskParams{Tenant: d.tenant, ID: id}
}

func (d v1Dialect) setPushConfig(taskID string, pc PushConfig) (string, any) {
	return "CreateTaskPushNotificationConfig", d.pushConfig(taskID, pc)
}

func (d v1Dialect) pushConfig(taskID string, pc PushConfig) v1PushConfig {
	out := v1PushConfig{Tenant: d.tenant, ID: pc.ID, TaskID: taskID, URL: pc.URL, Token: pc.Token}
	if pc.AuthScheme != "" {
		out.Authentication = &v1Auth{Scheme: pc.AuthScheme, Credentials: pc.AuthCredentials}
	}
	return out
}

func v1EncodeMessage(m Message) v1Message {
	role := "ROLE_USER"
	if m.Role == RoleAgent {
		role = "ROLE_AGENT"
	}
	return v1Message{
		MessageID:        m.MessageID,
		ContextID:        m.ContextID,
		TaskID:           m.TaskID,
		Role:             role,
		Parts:            v1EncodeParts(m.Parts),
		Metadata:         m.Metadata,
		Extensions:       m.Extensions,
		ReferenceTaskIDs: m.ReferenceTaskIDs,
	}
}

func v1EncodeParts(parts []Part) []v1Part {
	out := make([]v1Part, 0, len(parts))
	for _, p := range parts {
		w := v1Part{Metadata: p.Metadata, Filename: p.Filename, MediaType: p.MediaType}
		switch {
		case p.Data != nil:
			w.Data = p.Data
		case p.URL != "":
			w.URL = p.URL
		case p.Raw != nil:
			w.Raw = p.Raw
		default:
			w.Text = &p.Text
		}
		out = append(out, w)
	}
	return out
}
