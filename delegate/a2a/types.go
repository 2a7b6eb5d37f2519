package a2a

import (
	"encoding/json"
	"time"
)

// Message roles, as normalized from either protocol version.
const (
	// RoleUser is the role of the client's messages.
	RoleUser = "user"
	// RoleAgent is the role of the remote agent's messages.
	RoleAgent = "agent"
)

// TaskState is a task's state, normalized from whatever wire form the agent
// used — the v1.0 enum name (TASK_STATE_INPUT_REQUIRED) or number, the v0.3
// name (input-required), in any letter case — to one lower-case snake_case
// name.
type TaskState string

// The task states of A2A v1.0 and v0.3. TaskStateUnknown is v0.3's
// "unknown"; v1.0's TASK_STATE_UNSPECIFIED is not a state and is refused.
const (
	// TaskStateUnknown: the agent does not know the task's state (v0.3).
	TaskStateUnknown TaskState = "unknown"
	// TaskStateSubmitted: the agent accepted the task and has not started.
	TaskStateSubmitted TaskState = "submitted"
	// TaskStateWorking: the agent is working on the task.
	TaskStateWorking TaskState = "working"
	// TaskStateInputRequired: the agent waits for a message from the client.
	TaskStateInputRequired TaskState = "input_required"
	// TaskStateAuthRequired: the agent waits for an authorization, often
	// named in the status message.
	TaskStateAuthRequired TaskState = "auth_required"
	// TaskStateCompleted: the agent finished the task (terminal).
	TaskStateCompleted TaskState = "completed"
	// TaskStateFailed: the task ended in an error (terminal).
	TaskStateFailed TaskState = "failed"
	// TaskStateCanceled: the task was canceled (terminal). It says nothing
	// of what the task had already done.
	TaskStateCanceled TaskState = "canceled"
	// TaskStateRejected: the agent refused the task (terminal).
	TaskStateRejected TaskState = "rejected"
)

// TaskStates lists every task state.
var TaskStates = []TaskState{
	TaskStateUnknown, TaskStateSubmitted, TaskStateWorking, TaskStateInputRequired, TaskStateAuthRequired,
	TaskStateCompleted, TaskStateFailed, TaskStateCanceled, TaskStateRejected,
}

// Terminal reports whether the protocol lets no other state follow this one.
func (s TaskState) Terminal() bool {
	switch s {
	case TaskStateCompleted, TaskStateFailed, TaskStateCanceled, TaskStateRejected:
		return true
	case TaskStateUnknown, TaskStateSubmitted, TaskStateWorking, TaskStateInputRequired, TaskStateAuthRequired:
		return false
	}
	return false
}

// Task is a remote A2A task as last reported by the remote agent, in a
// form independent of the protocol version it came in.
type Task struct {
	ID        string
	ContextID string
	Status    TaskStatus
	Artifacts []Artifact
	Metadata  json.RawMessage
	// HistoryMessageIDs are the messageIds of the task's history, as far
	// as the agent returned it: they tell which message created the task.
	HistoryMessageIDs []string
	// Binding is the protocol binding of the call that returned the task
	// (BindingJSONRPC, BindingHTTPJSON, BindingGRPC), set by Client; ""
	// for a task from a push notification.
	Binding string
}

// ListTasksRequest asks for the tasks of one context, a page at a time.
type ListTasksRequest struct {
	// ContextID filters the tasks to those of one context.
	ContextID string
	// PageSize is 1 to 100; 0 is the agent's default (50).
	PageSize int
	// PageToken is the previous page's NextPageToken; "" for the first.
	PageToken string
	// HistoryLength asks for up to this many history messages per task,
	// so the message that created each task can be told.
	HistoryLength int
}

// ListTasksResult is one page of ListTasks.
type ListTasksResult struct {
	Tasks         []Task
	NextPageToken string
}

// TaskStatus is a task's status: its state, an optional message from the
// agent, and when the agent recorded it (zero if the agent did not say).
type TaskStatus struct {
	State     TaskState
	Message   *Message
	Timestamp time.Time
}

// Message is one A2A message. Role is RoleUser or RoleAgent.
type Message struct {
	MessageID        string
	ContextID        string
	TaskID           string
	Role             string
	Parts            []Part
	Metadata         json.RawMessage
	Extensions       []string
	ReferenceTaskIDs []string
}

// Part is one piece of message or artifact content. Exactly one of Text,
// Data, URL and Raw carries the content: Data if set, else URL, else Raw,
// else Text. Data and Metadata are nil when the part has none (a JSON null
// included).
type Part struct {
	Text      string
	Data      json.RawMessage
	URL       string
	Raw       []byte
	MediaType string
	Filename  string
	Metadata  json.RawMessage
}

// Artifact is an output of a task.
type Artifact struct {
	ArtifactID string
	Name       string
	Parts      []Part
	Metadata   json.RawMessage
	Extensions []string
}

// StreamEvent is one update about a task, from a stream or a push
// notification. Exactly one of its fields is set.
type StreamEvent struct {
	Task           *Task
	Message        *Message
	StatusUpdate   *StatusUpdate
	ArtifactUpdate *ArtifactUpdate
}

// TaskID returns the id of the task the event is about, or "" for a
// message that belongs to no task.
func (e StreamEvent) TaskID() string {
	switch {
	case e.Task != nil:
		return e.Task.ID
	case e.StatusUpdate != nil:
		return e.StatusUpdate.TaskID
	case e.ArtifactUpdate != nil:
		return e.ArtifactUpdate.TaskID
	case e.Message != nil:
		return e.Message.TaskID
	}
	return ""
}

// ContextID returns the context the event names, or "" when it names none.
func (e StreamEvent) ContextID() string {
	switch {
	case e.Task != nil:
		return e.Task.ContextID
	case e.StatusUpdate != nil:
		return e.StatusUpdate.ContextID
	case e.ArtifactUpdate != nil:
		return e.ArtifactUpdate.ContextID
	case e.Message != nil:
		return e.Message.ContextID
	}
	return ""
}

// StatusUpdate reports a change of a task's status.
type StatusUpdate struct {
	TaskID    string
	ContextID string
	Status    TaskStatus
}

// ArtifactUpdate reports a new artifact, or a chunk of one when Append is
// set.
type ArtifactUpdate struct {
	TaskID    string
	ContextID string
	Artifact  Artifact
	Append    bool
	LastChunk bool
}

// SendRequest is a message to send to a remote agent. ReturnImmediately asks
// the agent to answer as soon as the task exists instead of waiting for a
// terminal or interrupted state. Push, if set, registers a push notification
// endpoint for the new task. Extensions are activated for the request.
type SendRequest struct {
	Message           Message
	ReturnImmediately bool
	Push              *PushConfig
	Extensions        []string
}

// SendResult is the agent's answer to a message: a task, or a direct
// message when the agent created no task. Exactly one is set.
type SendResult struct {
	Task    *Task
	Message *Message
}

// PushConfig is a push notification endpoint for a task. The agent presents
// Token in a notification token header, and AuthScheme with AuthCredentials
// as "Authorization: {scheme} {credentials}".
type PushConfig struct {
	ID              string
	URL             string
	Token           string
	AuthScheme      string
	AuthCredentials string
}
