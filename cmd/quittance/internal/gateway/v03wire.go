package gateway

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"strconv"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/quittance/quittance/delegate/a2a/wire03"
)

// The 0.3 face reads and writes A2A 0.3's objects (GATEWAY.md, "A2A 0.3")
// as wire03 has them — the one copy, the one Quittance's A2A client sends
// too —, here with metadata as a2a-go v2 has it (map[string]any); the
// JSON-RPC envelope and error are the face's own. 0.3's objects differ
// from 1.0's in the "kind" discriminators, lower-case roles and task
// states, file parts nested under "file", data parts that are objects and
// the push config nested in its task's.

type v03Request struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
}

type v03Error struct {
	Code    int            `json:"code"`
	Message string         `json:"message"`
	Data    map[string]any `json:"data,omitempty"`
}

type (
	v03Part           = wire03.Part[map[string]any]
	v03Message        = wire03.Message[map[string]any]
	v03Status         = wire03.Status[map[string]any]
	v03Artifact       = wire03.Artifact[map[string]any]
	v03Task           = wire03.Task[map[string]any]
	v03StatusUpdate   = wire03.StatusUpdate[map[string]any]
	v03ArtifactUpdate = wire03.ArtifactUpdate[map[string]any]
	v03SendParams     = wire03.SendParams[map[string]any]
	v03TaskParams     = wire03.TaskParams[map[string]any]
	v03ListResult     = wire03.ListResult[map[string]any]
)

// v03States maps 1.0's task states to 0.3's; a state 0.3 does not name
// (none today) is "unknown".
var v03States = map[a2a.TaskState]string{
	a2a.TaskStateSubmitted:     "submitted",
	a2a.TaskStateWorking:       "working",
	a2a.TaskStateInputRequired: "input-required",
	a2a.TaskStateAuthRequired:  "auth-required",
	a2a.TaskStateCompleted:     "completed",
	a2a.TaskStateFailed:        "failed",
	a2a.TaskStateCanceled:      "canceled",
	a2a.TaskStateRejected:      "rejected",
}

func v03State(s a2a.TaskState) string {
	if v, ok := v03States[s]; ok {
		return v
	}
	return "unknown"
}

// v1State is the 1.0 state of a 0.3 state name, "" when it names none.
func v1State(s string) a2a.TaskState {
	for k, v := range v03States {
		if v == s {
			return k
		}
	}
	return a2a.TaskStateUnspecified
}

// dataPartCompat marks, in a 0.3 data part's metadata, a 1.0 data value
// that is not an object, sent as {"value": v}: the convention a2a-go's own
// 0.3 bridge (a2acompat/a2av0) uses both ways.
const dataPartCompat = "data_part_compat"

// v03Parts converts 1.0 parts to 0.3's: text, data (an object, or the
// value wrapped) and file (bytes base64, or a URI); a 1.0 part's filename
// and media type go with a file part only, as 0.3 has them nowhere else.
func v03Parts(in a2a.ContentParts) []v03Part {
	out := make([]v03Part, 0, len(in))
	for _, p := range in {
		if p == nil {
			continue
		}
		var w v03Part
		switch c := p.Content.(type) {
		case a2a.Data:
			if _, isObject := c.Value.(map[string]any); isObject {
				w = wire03.DataPart(c.Value, p.Metadata)
			} else {
				w = wire03.DataPart(map[string]any{"value": c.Value}, withMeta(p.Metadata, dataPartCompat, true))
			}
		case a2a.Raw:
			w = wire03.BytesPart(p.Filename, p.MediaType, c, p.Metadata)
		case a2a.URL:
			w = wire03.URIPart(p.Filename, p.MediaType, string(c), p.Metadata)
		default:
			w = wire03.TextPart(p.Text(), p.Metadata)
		}
		out = append(out, w)
	}
	return out
}

// withMeta is a copy of m with k set to v.
func withMeta(m map[string]any, k string, v any) map[string]any {
	out := make(map[string]any, len(m)+1)
	for mk, mv := range m {
		out[mk] = mv
	}
	out[k] = v
	return out
}

// v1Parts converts a 0.3 message's parts to 1.0's; a part of an unknown
// kind, a file with neither or both of bytes and uri, or bytes that are
// not base64 are InvalidParams.
func v1Parts(in []v03Part) (a2a.ContentParts, error) {
	out := make(a2a.ContentParts, 0, len(in))
	for i, w := range in {
		var p *a2a.Part
		switch w.Kind {
		case wire03.KindText:
			if w.Text == nil {
				return nil, invalidPart(i, "a text part needs text")
			}
			p = a2a.NewTextPart(*w.Text)
		case wire03.KindData:
			v := w.Data
			if obj, ok := v.(map[string]any); ok && w.Metadata[dataPartCompat] == true {
				v = obj["value"]
				w.Metadata = withoutMeta(w.Metadata, dataPartCompat)
			}
			p = a2a.NewDataPart(v)
		case wire03.KindFile:
			var err error
			if p, err = v1FilePart(w.File); err != nil {
				return nil, invalidPart(i, err.Error())
			}
		default:
			return nil, invalidPart(i, "kind must be text, data or file")
		}
		p.Metadata = w.Metadata
		out = append(out, p)
	}
	return out, nil
}

func invalidPart(i int, why string) error {
	return a2a.NewError(a2a.ErrInvalidParams, "message.parts["+strconv.Itoa(i)+"]: "+why)
}

// v1FilePart is a 0.3 file's 1.0 part: raw bytes or a URL, with its name
// and media type.
func v1FilePart(f *wire03.File) (*a2a.Part, error) {
	switch {
	case f == nil || (f.Bytes == "") == (f.URI == ""):
		return nil, errors.New("a file part needs one of file.bytes and file.uri")
	case f.URI != "":
		p := a2a.NewFileURLPart(a2a.URL(f.URI), f.MimeType)
		p.Filename = f.Name
		return p, nil
	}
	raw, err := base64.StdEncoding.DecodeString(f.Bytes)
	if err != nil {
		return nil, errors.New("file.bytes is not base64")
	}
	p := a2a.NewRawPart(raw)
	p.Filename, p.MediaType = f.Name, f.MimeType
	return p, nil
}

// withoutMeta is a copy of m without k; nil when nothing else is left.
func withoutMeta(m map[string]any, k string) map[string]any {
	if len(m) <= 1 {
		return nil
	}
	out := make(map[string]any, len(m)-1)
	for mk, mv := range m {
		if mk != k {
			out[mk] = mv
		}
	}
	return out
}

// v1Message converts a 0.3 message to 1.0's: role "user" or "agent",
// its parts, ids, references, extensions and metadata as they are.
func v1Message(m *v03Message) (*a2a.Message, error) {
	if m == nil {
		return nil, a2a.NewError(a2a.ErrInvalidParams, "message is required")
	}
	roles := map[string]a2a.MessageRole{wire03.RoleUser: a2a.MessageRoleUser, wire03.RoleAgent: a2a.MessageRoleAgent}
	role, ok := roles[m.Role]
	if !ok {
		return nil, a2a.NewError(a2a.ErrInvalidParams, `message.role must be "user" or "agent"`)
	}
	parts, err := v1Parts(m.Parts)
	if err != nil {
		return nil, err
	}
	out := &a2a.Message{
		ID: m.MessageID, ContextID: m.ContextID, TaskID: a2a.TaskID(m.TaskID), Role: role, Parts: parts,
		Metadata: m.Metadata, Extensions: m.Extensions,
	}
	for _, ref := range m.ReferenceTaskIDs {
		out.ReferenceTasks = append(out.ReferenceTasks, a2a.TaskID(ref))
	}
	return out, nil
}

// v03MessageOf converts a 1.0 message to 0.3's.
func v03MessageOf(m *a2a.Message) *v03Message {
	if m == nil {
		return nil
	}
	role := wire03.RoleUser
	if m.Role == a2a.MessageRoleAgent {
		role = wire03.RoleAgent
	}
	out := &v03Message{
		Kind: wire03.KindMessage, MessageID: m.ID, ContextID: m.ContextID, TaskID: string(m.TaskID), Role: role,
		Parts: v03Parts(m.Parts), Metadata: m.Metadata, Extensions: m.Extensions,
	}
	for _, ref := range m.ReferenceTasks {
		out.ReferenceTaskIDs = append(out.ReferenceTaskIDs, string(ref))
	}
	return out
}

func v03StatusOf(st a2a.TaskStatus) v03Status {
	return v03Status{State: v03State(st.State), Message: v03MessageOf(st.Message), Timestamp: st.Timestamp}
}

func v03ArtifactOf(a *a2a.Artifact) v03Artifact {
	return v03Artifact{
		ArtifactID: string(a.ID), Name: a.Name, Description: a.Description, Parts: v03Parts(a.Parts),
		Metadata: a.Metadata, Extensions: a.Extensions,
	}
}

// v03TaskOf converts a 1.0 task to 0.3's (the gateway's tasks carry no
// history).
func v03TaskOf(t *a2a.Task) v03Task {
	out := v03Task{Kind: wire03.KindTask, ID: string(t.ID), ContextID: t.ContextID, Status: v03StatusOf(t.Status), Metadata: t.Metadata}
	for _, a := range t.Artifacts {
		if a != nil {
			out.Artifacts = append(out.Artifacts, v03ArtifactOf(a))
		}
	}
	return out
}

// v03PushConfigOf converts a 1.0 push config to 0.3's, nested in its
// task's; 1.0's one authentication scheme is 0.3's list of one.
func v03PushConfigOf(pc *a2a.PushConfig) wire03.TaskPushConfig {
	out := wire03.TaskPushConfig{TaskID: string(pc.TaskID), PushNotificationConfig: wire03.PushConfig{ID: pc.ID, URL: pc.URL, Token: pc.Token}}
	if pc.Auth != nil {
		out.PushNotificationConfig.Authentication = &wire03.PushAuth{Schemes: []string{pc.Auth.Scheme}, Credentials: pc.Auth.Credentials}
	}
	return out
}

// v1PushConfig converts a 0.3 push config of task taskID to 1.0's; of
// 0.3's list of authentication schemes, 1.0 takes one: the first.
func v1PushConfig(taskID string, pc *wire03.PushConfig) *a2a.PushConfig {
	if pc == nil {
		return nil
	}
	out := &a2a.PushConfig{TaskID: a2a.TaskID(taskID), ID: pc.ID, URL: pc.URL, Token: pc.Token}
	if pc.Authentication != nil && len(pc.Authentication.Schemes) > 0 {
		out.Auth = &a2a.PushAuthInfo{Scheme: pc.Authentication.Schemes[0], Credentials: pc.Authentication.Credentials}
	}
	return out
}
