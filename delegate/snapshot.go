package delegate

import (
	"encoding/json"
	"time"

	"github.com/quittance/quittance/delegate/a2a"

	"github.com/quittance/quittance/ledger"
)

// The latest remote task snapshot. Quittance keeps, per delegation, what it
// last observed of the remote task: its status (with the status message —
// for auth_required typically a consent URL) and its artifacts. A fetched
// task (GetTask, a send or cancel reply) replaces the snapshot; streamed
// artifact updates are applied in the order they arrive: a chunk without
// append replaces the artifact, one with append adds its parts, lastChunk
// marks it complete. Snapshots are bounded: an artifact larger than
// SnapshotLimits.MaxArtifactBytes, or one that would take the snapshot
// beyond MaxTotalBytes, keeps its id and name but loses its parts and is
// marked too_large with the size seen so far.

// SnapshotLimits bound the size of a task snapshot.
type SnapshotLimits struct {
	// MaxArtifactBytes bounds one artifact's parts, as JSON (default 256 KiB).
	MaxArtifactBytes int
	// MaxTotalBytes bounds all artifacts together (default 1 MiB).
	MaxTotalBytes int
}

func (l SnapshotLimits) withDefaults() SnapshotLimits {
	if l.MaxArtifactBytes <= 0 {
		l.MaxArtifactBytes = 256 << 10
	}
	if l.MaxTotalBytes <= 0 {
		l.MaxTotalBytes = 1 << 20
	}
	return l
}

// TaskSnapshot is the latest observed state of a delegation's remote task,
// in the shape GET /v1/delegations/{id}/task serves.
type TaskSnapshot struct {
	// TaskID and ContextID identify the remote task.
	TaskID    string `json:"task_id"`
	ContextID string `json:"context_id,omitempty"`
	// State is the remote task state as last observed.
	State ledger.TaskStatus `json:"state"`
	// StatusMessage is the message of the task's status, if any.
	StatusMessage *SnapshotMessage `json:"status_message,omitempty"`
	// StatusTimestamp is when the remote says the status took effect.
	StatusTimestamp *time.Time `json:"status_timestamp,omitempty"`
	// Artifacts are the task's outputs, in the order first seen.
	Artifacts []SnapshotArtifact `json:"artifacts"`
	// Source says what the snapshot was last updated from (dispatch, poll,
	// push, stream, cancel, message).
	Source string `json:"source,omitempty"`
	// UpdatedAt is when Quittance last updated the snapshot.
	UpdatedAt time.Time `json:"updated_at"`
}

// SnapshotMessage is a message in a snapshot.
type SnapshotMessage struct {
	// MessageID is the message's A2A id.
	MessageID string `json:"message_id,omitempty"`
	// Role is "user" or "agent".
	Role string `json:"role,omitempty"`
	// Text joins the message's text parts.
	Text string `json:"text,omitempty"`
	// Parts are the message's parts.
	Parts []SnapshotPart `json:"parts"`
}

// SnapshotArtifact is an artifact in a snapshot.
type SnapshotArtifact struct {
	// ArtifactID identifies the artifact within the task.
	ArtifactID string `json:"artifact_id"`
	// Name is the artifact's name.
	Name string `json:"name,omitempty"`
	// Parts are its content, chunks applied; empty when TooLarge.
	Parts []SnapshotPart `json:"parts"`
	// Metadata is the artifact's metadata.
	Metadata json.RawMessage `json:"metadata,omitempty"`
	// Complete is false while streamed chunks are still expected.
	Complete bool `json:"complete"`
	// TooLarge marks an artifact whose content was too large to keep.
	TooLarge bool `json:"too_large,omitempty"`
	// SizeBytes is the size of its parts as JSON, kept or not.
	SizeBytes int `json:"size_bytes"`
}

// SnapshotPart is one part: exactly one of Text, Data, URL and Raw is set.
type SnapshotPart struct {
	Text      string          `json:"text,omitempty"`
	Data      json.RawMessage `json:"data,omitempty"`
	URL       string          `json:"url,omitempty"`
	Raw       []byte          `json:"raw,omitempty"`
	MediaType string          `json:"media_type,omitempty"`
	Filename  string          `json:"filename,omitempty"`
	Metadata  json.RawMessage `json:"metadata,omitempty"`
}

func snapshotParts(parts []a2a.Part) []SnapshotPart {
	out := make([]SnapshotPart, len(parts))
	for i, p := range parts {
		out[i] = SnapshotPart{Text: p.Text, Data: p.Data, URL: p.URL, Raw: p.Raw, MediaType: p.MediaType, Filename: p.Filename, Metadata: p.Metadata}
	}
	return out
}

func snapshotMessage(m *a2a.Message) *SnapshotMessage {
	if m == nil {
		return nil
	}
	return &SnapshotMessage{MessageID: m.MessageID, Role: m.Role, Text: messageText(m), Parts: snapshotParts(m.Parts)}
}

func partsSize(parts []SnapshotPart) int {
	b, _ := json.Marshal(parts)
	return len(b)
}

// ApplyTask replaces the snapshot with a fetched task, bounded by limits.
// A task whose status is dated before the snapshot's is older than what
// the snapshot holds (a poll answered before a newer reply was recorded)
// and leaves it as it is: its artifacts and status would go back in time.
func (s TaskSnapshot) ApplyTask(t a2a.Task, source string, now time.Time, limits SnapshotLimits) TaskSnapshot {
	if s.TaskID == t.ID && s.StatusTimestamp != nil && !t.Status.Timestamp.IsZero() && t.Status.Timestamp.Before(*s.StatusTimestamp) {
		return s
	}
	out := TaskSnapshot{TaskID: t.ID, ContextID: t.ContextID, Source: source, UpdatedAt: now, Artifacts: []SnapshotArtifact{}}
	out = out.withStatus(t.Status)
	for _, a := range t.Artifacts {
		out = out.ApplyArtifactUpdate(a2a.ArtifactUpdate{TaskID: t.ID, Artifact: a, LastChunk: true}, source, now, limits)
	}
	return out
}

// ApplyStatus records a status update.
func (s TaskSnapshot) ApplyStatus(u a2a.StatusUpdate, source string, now time.Time) TaskSnapshot {
	if s.TaskID == "" {
		s.TaskID, s.ContextID = u.TaskID, u.ContextID
	}
	if s.Artifacts == nil {
		s.Artifacts = []SnapshotArtifact{}
	}
	s.Source, s.UpdatedAt = source, now
	return s.withStatus(u.Status)
}

func (s TaskSnapshot) withStatus(v a2a.TaskStatus) TaskSnapshot {
	s.State = taskStatus(v.State)
	s.StatusMessage = snapshotMessage(v.Message)
	s.StatusTimestamp = nil
	if !v.Timestamp.IsZero() {
		ts := v.Timestamp
		s.StatusTimestamp = &ts
	}
	return s
}

// ApplyArtifactUpdate applies one artifact update: without Append it
// replaces (or adds) the artifact; with Append it adds the parts to the
// artifact with the same id (or starts it, if unseen). LastChunk marks it
// complete. Sizes are checked against limits after every chunk.
func (s TaskSnapshot) ApplyArtifactUpdate(u a2a.ArtifactUpdate, source string, now time.Time, limits SnapshotLimits) TaskSnapshot {
	limits = limits.withDefaults()
	if s.TaskID == "" {
		s.TaskID, s.ContextID = u.TaskID, u.ContextID
	}
	arts := append([]SnapshotArtifact(nil), s.Artifacts...)
	idx := -1
	for i, a := range arts {
		if a.ArtifactID == u.Artifact.ArtifactID {
			idx = i
			break
		}
	}
	chunk := snapshotParts(u.Artifact.Parts)
	chunkSize := partsSize(chunk)
	var a SnapshotArtifact
	if idx >= 0 && u.Append {
		a = arts[idx]
		a.SizeBytes += chunkSize
		if !a.TooLarge {
			a.Parts = append(append([]SnapshotPart(nil), a.Parts...), chunk...)
		}
	} else {
		a = SnapshotArtifact{ArtifactID: u.Artifact.ArtifactID, Parts: chunk, SizeBytes: chunkSize}
	}
	if u.Artifact.Name != "" {
		a.Name = u.Artifact.Name
	}
	if u.Artifact.Metadata != nil {
		a.Metadata = u.Artifact.Metadata
	}
	a.Complete = u.LastChunk
	others := 0
	for i, o := range arts {
		if i != idx {
			others += partsSize(o.Parts)
		}
	}
	if !a.TooLarge && (a.SizeBytes > limits.MaxArtifactBytes || others+partsSize(a.Parts) > limits.MaxTotalBytes) {
		a.TooLarge, a.Parts = true, []SnapshotPart{}
	}
	if idx >= 0 {
		arts[idx] = a
	} else {
		arts = append(arts, a)
	}
	s.Artifacts, s.Source, s.UpdatedAt = arts, source, now
	return s
}
