package delegate

import (
	"encoding/json"
	"time"

	"github.com/quittance/quittance/ledger"
)

// Message roles, as normalized from either protocol version.
const (
	RoleUser  = "user"
	RoleAgent = "agent"
)

// Task is a remote A2A task as last reported by the remote agent, in a
// form independent of the protocol version it came in.
type Task struct {
	ID        string
	ContextID string
	Status    TaskStatusValue
	Artifacts []Artifact
	Metadata  json.RawMessage
}

// TaskStatusValue is a task's status: its state, an optional message from
// the agent, and when the agent recorded it (zero if the agent did not say).
type TaskStatusValue struct {
	State     ledger.TaskStatus
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
// else Text.
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

// StatusUpdate reports a change of a task's status.
type StatusUpdate struct {
	TaskID    string
	ContextID string
	Status    TaskStatusValue
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
