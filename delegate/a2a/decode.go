package a2a

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Decoding is tolerant of both protocol versions at once: v1.0 member-name
// wrappers and v0.3 "kind" discriminators, TASK_STATE_* and lower-case
// states, ROLE_* and lower-case roles, flat and nested file parts. Only
// request encoding differs by version (wire_v1.go, wire_v03.go).

// enumValue is a ProtoJSON enum: its name as a string, or its number.
type enumValue string

// UnmarshalJSON reads an enum sent as a name or as a number.
func (e *enumValue) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*e = enumValue(s)
		return nil
	}
	var n int
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("enum is neither a string nor a number")
	}
	*e = enumValue(strconv.Itoa(n))
	return nil
}

// taskStateNumbers maps the a2a.proto TaskState numbers to names.
var taskStateNumbers = map[string]TaskState{
	"1": TaskStateSubmitted, "2": TaskStateWorking, "3": TaskStateCompleted, "4": TaskStateFailed,
	"5": TaskStateCanceled, "6": TaskStateInputRequired, "7": TaskStateRejected, "8": TaskStateAuthRequired,
}

// parseState accepts a state as either version sends it: a v1.0 enum name
// (TASK_STATE_INPUT_REQUIRED) or number, a v0.3 name (input-required), in
// any letter case, and the British "cancelled". Anything else, an empty or
// unspecified state included, is a malformed response: a report that says
// nothing must not be read as a state.
func parseState(e enumValue) (TaskState, error) {
	if st, ok := taskStateNumbers[string(e)]; ok {
		return st, nil
	}
	s := strings.ToLower(strings.TrimSpace(string(e)))
	s = strings.TrimPrefix(s, "task_state_")
	s = strings.ReplaceAll(s, "-", "_")
	if s == "cancelled" {
		s = string(TaskStateCanceled)
	}
	for _, known := range TaskStates {
		if s == string(known) {
			return known, nil
		}
	}
	return "", fmt.Errorf("%w: unknown task state %q", ErrMalformedResponse, string(e))
}

func parseRole(e enumValue) string {
	switch strings.TrimPrefix(strings.ToLower(string(e)), "role_") {
	case "user", "1":
		return RoleUser
	case "agent", "2":
		return RoleAgent
	}
	return ""
}

type wirePart struct {
	Kind      string          `json:"kind"`
	Text      string          `json:"text"`
	Raw       string          `json:"raw"`
	URL       string          `json:"url"`
	Data      json.RawMessage `json:"data"`
	Filename  string          `json:"filename"`
	MediaType string          `json:"mediaType"`
	Metadata  json.RawMessage `json:"metadata"`
	File      *struct {
		Name     string `json:"name"`
		MimeType string `json:"mimeType"`
		Bytes    string `json:"bytes"`
		URI      string `json:"uri"`
	} `json:"file"`
}

type wireMessage struct {
	MessageID        string          `json:"messageId"`
	ContextID        string          `json:"contextId"`
	TaskID           string          `json:"taskId"`
	Role             enumValue       `json:"role"`
	Parts            []wirePart      `json:"parts"`
	Metadata         json.RawMessage `json:"metadata"`
	Extensions       []string        `json:"extensions"`
	ReferenceTaskIDs []string        `json:"referenceTaskIds"`
}

type wireStatus struct {
	State     enumValue    `json:"state"`
	Message   *wireMessage `json:"message"`
	Timestamp string       `json:"timestamp"`
}

type wireArtifact struct {
	ArtifactID string          `json:"artifactId"`
	Name       string          `json:"name"`
	Parts      []wirePart      `json:"parts"`
	Metadata   json.RawMessage `json:"metadata"`
	Extensions []string        `json:"extensions"`
}

type wireTask struct {
	ID        string         `json:"id"`
	ContextID string         `json:"contextId"`
	Status    wireStatus     `json:"status"`
	Artifacts []wireArtifact `json:"artifacts"`
	History   []struct {
		MessageID string `json:"messageId"`
	} `json:"history"`
	Metadata json.RawMessage `json:"metadata"`
}

type wireStatusUpdate struct {
	TaskID    string     `json:"taskId"`
	ContextID string     `json:"contextId"`
	Status    wireStatus `json:"status"`
}

type wireArtifactUpdate struct {
	TaskID    string       `json:"taskId"`
	ContextID string       `json:"contextId"`
	Artifact  wireArtifact `json:"artifact"`
	Append    bool         `json:"append"`
	LastChunk bool         `json:"lastChunk"`
}

// present reports whether a JSON member was sent with a non-null value.
func present(raw json.RawMessage) bool {
	return len(raw) > 0 && !bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// nonNull returns raw, or nil when it is absent or JSON null.
func nonNull(raw json.RawMessage) json.RawMessage {
	if !present(raw) {
		return nil
	}
	return raw
}

// decodeEvent decodes a v1.0 StreamResponse ({"task":…}, {"message":…},
// {"statusUpdate":…}, {"artifactUpdate":…}), a v0.3 object with a "kind"
// discriminator, or a bare v0.3 task without "kind".
func decodeEvent(raw []byte) (StreamEvent, error) {
	var probe struct {
		Kind           string          `json:"kind"`
		Task           json.RawMessage `json:"task"`
		Message        json.RawMessage `json:"message"`
		StatusUpdate   json.RawMessage `json:"statusUpdate"`
		ArtifactUpdate json.RawMessage `json:"artifactUpdate"`
		ID             string          `json:"id"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil {
		return StreamEvent{}, fmt.Errorf("%w: %w", ErrMalformedResponse, err)
	}
	// A v0.3 event names its kind and is the object itself.
	if probe.Kind != "" {
		return decodeEventAs(probe.Kind, raw)
	}
	n := 0
	for _, m := range []json.RawMessage{probe.Task, probe.Message, probe.StatusUpdate, probe.ArtifactUpdate} {
		if present(m) {
			n++
		}
	}
	switch {
	case n > 1:
		return StreamEvent{}, fmt.Errorf("%w: event has %d members", ErrMalformedResponse, n)
	case present(probe.Task):
		return decodeEventAs("task", probe.Task)
	case present(probe.Message):
		return decodeEventAs("message", probe.Message)
	case present(probe.StatusUpdate):
		return decodeEventAs("status-update", probe.StatusUpdate)
	case present(probe.ArtifactUpdate):
		return decodeEventAs("artifact-update", probe.ArtifactUpdate)
	case probe.ID != "":
		// A bare task (a v1.0 GetTask or CancelTask result).
		return decodeEventAs("task", raw)
	}
	return StreamEvent{}, fmt.Errorf("%w: not a task, message or task update", ErrMalformedResponse)
}

// decodeEventAs decodes raw as the event of the given kind (the v0.3 kind
// names; a v1.0 event's member maps onto them).
func decodeEventAs(kind string, raw []byte) (StreamEvent, error) {
	var (
		ev  StreamEvent
		err error
	)
	switch kind {
	case "task":
		ev.Task, err = decodeTaskObject(raw)
	case "message":
		ev.Message, err = decodeMessageObject(raw)
	case "status-update":
		ev.StatusUpdate, err = decodeStatusUpdate(raw)
	case "artifact-update":
		ev.ArtifactUpdate, err = decodeArtifactUpdate(raw)
	default:
		return StreamEvent{}, fmt.Errorf("%w: unknown event kind %q", ErrMalformedResponse, kind)
	}
	if err != nil {
		return StreamEvent{}, err
	}
	return ev, nil
}

// decodeTaskResult decodes the result of GetTask or CancelTask: a task.
func decodeTaskResult(raw []byte) (Task, error) {
	ev, err := decodeEvent(raw)
	if err != nil {
		return Task{}, err
	}
	if ev.Task == nil {
		return Task{}, fmt.Errorf("%w: result is not a task", ErrMalformedResponse)
	}
	return *ev.Task, nil
}

// decodeSendResult decodes the result of SendMessage: a task or a message.
func decodeSendResult(raw []byte) (SendResult, error) {
	ev, err := decodeEvent(raw)
	if err != nil {
		return SendResult{}, err
	}
	if ev.Task == nil && ev.Message == nil {
		return SendResult{}, fmt.Errorf("%w: send result is neither a task nor a message", ErrMalformedResponse)
	}
	return SendResult{Task: ev.Task, Message: ev.Message}, nil
}

func unmarshalObject(raw []byte, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%w: %w", ErrMalformedResponse, err)
	}
	return nil
}

func decodeTaskObject(raw []byte) (*Task, error) {
	var w wireTask
	if err := unmarshalObject(raw, &w); err != nil {
		return nil, err
	}
	if w.ID == "" {
		return nil, fmt.Errorf("%w: task without id", ErrMalformedResponse)
	}
	status, err := w.Status.normalize()
	if err != nil {
		return nil, err
	}
	t := &Task{ID: w.ID, ContextID: w.ContextID, Status: status, Metadata: nonNull(w.Metadata)}
	for _, m := range w.History {
		if m.MessageID != "" {
			t.HistoryMessageIDs = append(t.HistoryMessageIDs, m.MessageID)
		}
	}
	for _, a := range w.Artifacts {
		art, err := a.normalize()
		if err != nil {
			return nil, err
		}
		t.Artifacts = append(t.Artifacts, art)
	}
	return t, nil
}

func decodeMessageObject(raw []byte) (*Message, error) {
	var w wireMessage
	if err := unmarshalObject(raw, &w); err != nil {
		return nil, err
	}
	return w.normalize()
}

func decodeStatusUpdate(raw []byte) (*StatusUpdate, error) {
	var w wireStatusUpdate
	if err := unmarshalObject(raw, &w); err != nil {
		return nil, err
	}
	if w.TaskID == "" {
		return nil, fmt.Errorf("%w: status update without task id", ErrMalformedResponse)
	}
	status, err := w.Status.normalize()
	if err != nil {
		return nil, err
	}
	return &StatusUpdate{TaskID: w.TaskID, ContextID: w.ContextID, Status: status}, nil
}

func decodeArtifactUpdate(raw []byte) (*ArtifactUpdate, error) {
	var w wireArtifactUpdate
	if err := unmarshalObject(raw, &w); err != nil {
		return nil, err
	}
	if w.TaskID == "" {
		return nil, fmt.Errorf("%w: artifact update without task id", ErrMalformedResponse)
	}
	art, err := w.Artifact.normalize()
	if err != nil {
		return nil, err
	}
	return &ArtifactUpdate{TaskID: w.TaskID, ContextID: w.ContextID, Artifact: art, Append: w.Append, LastChunk: w.LastChunk}, nil
}

func (w wireStatus) normalize() (TaskStatus, error) {
	state, err := parseState(w.State)
	if err != nil {
		return TaskStatus{}, err
	}
	v := TaskStatus{State: state}
	if w.Timestamp != "" {
		ts, err := time.Parse(time.RFC3339Nano, w.Timestamp)
		if err != nil {
			return TaskStatus{}, fmt.Errorf("%w: status timestamp: %w", ErrMalformedResponse, err)
		}
		v.Timestamp = ts.UTC()
	}
	if w.Message != nil {
		if v.Message, err = w.Message.normalize(); err != nil {
			return TaskStatus{}, err
		}
	}
	return v, nil
}

func (w wireMessage) normalize() (*Message, error) {
	parts, err := normalizeParts(w.Parts)
	if err != nil {
		return nil, err
	}
	return &Message{
		MessageID:        w.MessageID,
		ContextID:        w.ContextID,
		TaskID:           w.TaskID,
		Role:             parseRole(w.Role),
		Parts:            parts,
		Metadata:         nonNull(w.Metadata),
		Extensions:       w.Extensions,
		ReferenceTaskIDs: w.ReferenceTaskIDs,
	}, nil
}

func (w wireArtifact) normalize() (Artifact, error) {
	parts, err := normalizeParts(w.Parts)
	if err != nil {
		return Artifact{}, err
	}
	return Artifact{ArtifactID: w.ArtifactID, Name: w.Name, Parts: parts, Metadata: nonNull(w.Metadata), Extensions: w.Extensions}, nil
}

func normalizeParts(ws []wirePart) ([]Part, error) {
	parts := make([]Part, 0, len(ws))
	for _, w := range ws {
		p := Part{Text: w.Text, Data: nonNull(w.Data), URL: w.URL, MediaType: w.MediaType, Filename: w.Filename, Metadata: nonNull(w.Metadata)}
		raw := w.Raw
		if w.File != nil {
			p.URL, raw, p.MediaType, p.Filename = w.File.URI, w.File.Bytes, w.File.MimeType, w.File.Name
		}
		if raw != "" {
			b, err := decodeBase64(raw)
			if err != nil {
				return nil, fmt.Errorf("%w: part bytes: %w", ErrMalformedResponse, err)
			}
			p.Raw = b
		}
		parts = append(parts, p)
	}
	return parts, nil
}

// decodeBase64 accepts standard and URL-safe base64, padded or not, as
// ProtoJSON parsers do.
func decodeBase64(s string) ([]byte, error) {
	s = strings.TrimRight(s, "=")
	if strings.ContainsAny(s, "-_") {
		return base64.RawURLEncoding.DecodeString(s)
	}
	return base64.RawStdEncoding.DecodeString(s)
}

// decodeListTasksResult decodes the result of ListTasks: a page of tasks
// and the token of the next page ("" on the last).
func decodeListTasksResult(raw []byte) (ListTasksResult, error) {
	var w struct {
		Tasks         []json.RawMessage `json:"tasks"`
		NextPageToken string            `json:"nextPageToken"`
	}
	if err := unmarshalObject(raw, &w); err != nil {
		return ListTasksResult{}, err
	}
	out := ListTasksResult{NextPageToken: w.NextPageToken}
	for _, rt := range w.Tasks {
		t, err := decodeTaskObject(rt)
		if err != nil {
			return ListTasksResult{}, err
		}
		out.Tasks = append(out.Tasks, *t)
	}
	return out, nil
}
