// Package wire03 is the A2A 0.3 JSON-RPC wire: the objects 0.3's methods
// send and answer, as 0.3 writes them — "kind" discriminators, lower-case
// roles, file parts nested under "file", data parts that are objects, and
// push configs nested in their task's. They differ from 1.0's in each of
// those.
//
// It is the one copy of them Quittance's two 0.3 speakers share: the A2A
// client (delegate/a2a, wire_v03.go), which sends its requests with them,
// and the gateway's 0.3 face (cmd/quittance/internal/gateway, v03wire.go),
// which reads those requests and answers with them. Each converts its own
// model to and from them; this package has no model of its own and imports
// nothing but the standard library, so that the server side takes none of
// the client with it. It is written by hand rather than taken from a2a-go
// v0.3, the repository's 0.3 test peer, so that the peer checks it, from
// both sides.
//
// Metadata is of type M: the client sends what it was given as it was
// given it (json.RawMessage), the gateway has it as a2a-go v2 does
// (map[string]any). A data part's data is any for both: the client's is a
// json.RawMessage, which is sent as it is.
package wire03

import (
	"encoding/base64"
	"time"
)

// The "kind" discriminators of 0.3's objects.
const (
	KindTask           = "task"
	KindMessage        = "message"
	KindStatusUpdate   = "status-update"
	KindArtifactUpdate = "artifact-update"
	KindText           = "text"
	KindData           = "data"
	KindFile           = "file"
)

// The roles of a 0.3 message.
const (
	RoleUser  = "user"
	RoleAgent = "agent"
)

// File is a file part's file: its content inline (Bytes, base64) or at
// URI, one of the two.
type File struct {
	Name     string `json:"name,omitempty"`
	MimeType string `json:"mimeType,omitempty"`
	Bytes    string `json:"bytes,omitempty"`
	URI      string `json:"uri,omitempty"`
}

// Part is a message's or an artifact's part, of kind text, data or file.
type Part[M any] struct {
	Kind string  `json:"kind"`
	Text *string `json:"text,omitempty"`
	// Data is an object in 0.3.
	Data     any   `json:"data,omitempty"`
	File     *File `json:"file,omitempty"`
	Metadata M     `json:"metadata,omitempty"`
}

// TextPart is a text part.
func TextPart[M any](text string, metadata M) Part[M] {
	return Part[M]{Kind: KindText, Text: &text, Metadata: metadata}
}

// DataPart is a data part; 0.3 wants data to be an object, which each
// side sees to in its own way.
func DataPart[M any](data any, metadata M) Part[M] {
	return Part[M]{Kind: KindData, Data: data, Metadata: metadata}
}

// BytesPart is a file part whose content, raw, goes inline, base64.
func BytesPart[M any](name, mimeType string, raw []byte, metadata M) Part[M] {
	f := &File{Name: name, MimeType: mimeType, Bytes: base64.StdEncoding.EncodeToString(raw)}
	return Part[M]{Kind: KindFile, File: f, Metadata: metadata}
}

// URIPart is a file part whose content is at uri.
func URIPart[M any](name, mimeType, uri string, metadata M) Part[M] {
	return Part[M]{Kind: KindFile, File: &File{Name: name, MimeType: mimeType, URI: uri}, Metadata: metadata}
}

// Message is a message (kind "message").
type Message[M any] struct {
	Kind             string    `json:"kind"`
	MessageID        string    `json:"messageId"`
	ContextID        string    `json:"contextId,omitempty"`
	TaskID           string    `json:"taskId,omitempty"`
	Role             string    `json:"role"`
	Parts            []Part[M] `json:"parts"`
	Metadata         M         `json:"metadata,omitempty"`
	Extensions       []string  `json:"extensions,omitempty"`
	ReferenceTaskIDs []string  `json:"referenceTaskIds,omitempty"`
}

// Status is a task's status: its state (lower-case, "input-required"),
// and the message and time that came with it.
type Status[M any] struct {
	State     string      `json:"state"`
	Message   *Message[M] `json:"message,omitempty"`
	Timestamp *time.Time  `json:"timestamp,omitempty"`
}

// Artifact is a task's artifact.
type Artifact[M any] struct {
	ArtifactID  string    `json:"artifactId"`
	Name        string    `json:"name,omitempty"`
	Description string    `json:"description,omitempty"`
	Parts       []Part[M] `json:"parts"`
	Metadata    M         `json:"metadata,omitempty"`
	Extensions  []string  `json:"extensions,omitempty"`
}

// Task is a task (kind "task").
type Task[M any] struct {
	Kind      string        `json:"kind"`
	ID        string        `json:"id"`
	ContextID string        `json:"contextId"`
	Status    Status[M]     `json:"status"`
	Artifacts []Artifact[M] `json:"artifacts,omitempty"`
	Metadata  M             `json:"metadata,omitempty"`
}

// StatusUpdate is a stream's status update (kind "status-update").
type StatusUpdate[M any] struct {
	Kind      string    `json:"kind"`
	TaskID    string    `json:"taskId"`
	ContextID string    `json:"contextId"`
	Status    Status[M] `json:"status"`
	Final     bool      `json:"final"`
	Metadata  M         `json:"metadata,omitempty"`
}

// ArtifactUpdate is a stream's artifact update (kind "artifact-update").
type ArtifactUpdate[M any] struct {
	Kind      string      `json:"kind"`
	TaskID    string      `json:"taskId"`
	ContextID string      `json:"contextId"`
	Artifact  Artifact[M] `json:"artifact"`
	Append    bool        `json:"append,omitempty"`
	LastChunk bool        `json:"lastChunk,omitempty"`
	Metadata  M           `json:"metadata,omitempty"`
}

// SendConfig is MessageSendConfiguration.
type SendConfig struct {
	AcceptedOutputModes    []string    `json:"acceptedOutputModes,omitempty"`
	Blocking               *bool       `json:"blocking,omitempty"`
	HistoryLength          *int        `json:"historyLength,omitempty"`
	PushNotificationConfig *PushConfig `json:"pushNotificationConfig,omitempty"`
}

// SendParams is message/send's and message/stream's MessageSendParams.
type SendParams[M any] struct {
	Message       *Message[M] `json:"message"`
	Configuration *SendConfig `json:"configuration,omitempty"`
	Metadata      M           `json:"metadata,omitempty"`
}

// TaskParams is TaskQueryParams, TaskIdParams and the push config
// methods' params: the task's id, and the config's where one is named.
type TaskParams[M any] struct {
	ID            string `json:"id"`
	HistoryLength *int   `json:"historyLength,omitempty"`
	Metadata      M      `json:"metadata,omitempty"`
	ConfigID      string `json:"pushNotificationConfigId,omitempty"`
}

// ListParams is tasks/list's ListTasksParams (A2A 0.3.7 and later).
type ListParams struct {
	ContextID        string `json:"contextId,omitempty"`
	Status           string `json:"status,omitempty"`
	PageSize         int    `json:"pageSize,omitempty"`
	PageToken        string `json:"pageToken,omitempty"`
	HistoryLength    *int   `json:"historyLength,omitempty"`
	IncludeArtifacts bool   `json:"includeArtifacts,omitempty"`
	// LastUpdatedAfter is in milliseconds since the epoch.
	LastUpdatedAfter *int64 `json:"lastUpdatedAfter,omitempty"`
}

// ListResult is tasks/list's answer.
type ListResult[M any] struct {
	Tasks         []Task[M] `json:"tasks"`
	TotalSize     int       `json:"totalSize"`
	PageSize      int       `json:"pageSize"`
	NextPageToken string    `json:"nextPageToken"`
}

// PushAuth is a push config's authentication: 0.3 lists schemes where
// 1.0 names one.
type PushAuth struct {
	Schemes     []string `json:"schemes"`
	Credentials string   `json:"credentials,omitempty"`
}

// PushConfig is PushNotificationConfig.
type PushConfig struct {
	ID             string    `json:"id,omitempty"`
	URL            string    `json:"url"`
	Token          string    `json:"token,omitempty"`
	Authentication *PushAuth `json:"authentication,omitempty"`
}

// TaskPushConfig is TaskPushNotificationConfig: a push config nested in
// its task's.
type TaskPushConfig struct {
	TaskID                 string     `json:"taskId"`
	PushNotificationConfig PushConfig `json:"pushNotificationConfig"`
}
