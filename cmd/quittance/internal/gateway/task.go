package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/google/uuid"

	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/ledger"
)

// contextPrefix begins the contexts Quittance sends tasks in
// (delegate.DispatchContextID): a task's contextId is the context of the
// delegation it was sent in, which a new message names to refine it.
const contextPrefix = "quittance-context-"

// taskStates maps a delegation's observed task status to A2A's; unknown
// (nothing observed yet: the dispatch is queued or its outcome not known)
// is submitted, which is what Quittance holds of the task.
var taskStates = map[ledger.TaskStatus]a2a.TaskState{
	ledger.StatusUnknown:       a2a.TaskStateSubmitted,
	ledger.StatusSubmitted:     a2a.TaskStateSubmitted,
	ledger.StatusWorking:       a2a.TaskStateWorking,
	ledger.StatusInputRequired: a2a.TaskStateInputRequired,
	ledger.StatusAuthRequired:  a2a.TaskStateAuthRequired,
	ledger.StatusCompleted:     a2a.TaskStateCompleted,
	ledger.StatusFailed:        a2a.TaskStateFailed,
	ledger.StatusCanceled:      a2a.TaskStateCanceled,
	ledger.StatusRejected:      a2a.TaskStateRejected,
}

// task is delegation d as an A2A task: its id is the delegation's, its
// status the remote task's as Quittance last observed it, its artifacts
// those of the task snapshot, its metadata under ExtensionURI the
// ledger's view (taskMetadata), and its history what ctx asks for
// (historyOf; history.go).
func (h *handler) task(ctx context.Context, c call, d ledger.Delegation) (*a2a.Task, error) {
	t := &a2a.Task{
		ID: a2a.TaskID(d.ID.String()), ContextID: d.Remote.ContextID,
		Status:   a2a.TaskStatus{State: taskStates[d.TaskStatus]},
		Metadata: map[string]any{ExtensionURI: taskMetadata(d)},
	}
	if d.Remote.ContextID == "" {
		// Not dispatched yet: the context it will be sent in.
		ctxID, err := h.pendingContext(ctx, c, d)
		if err != nil {
			return nil, err
		}
		t.ContextID = ctxID
	} else if !ownContext(t.ContextID) {
		t.ContextID = delegate.DispatchContextID(d.ID)
	}
	if t.Status.State == a2a.TaskStateUnspecified {
		t.Status.State = a2a.TaskStateSubmitted
	}
	if !d.TaskStatusAt.IsZero() {
		at := d.TaskStatusAt.UTC()
		t.Status.Timestamp = &at
	}
	if d.TaskStatusMessage != "" {
		t.Status.Message = a2a.NewMessageForTask(a2a.MessageRoleAgent, t, a2a.NewTextPart(d.TaskStatusMessage))
		t.Status.Message.ID = "status-" + d.ID.String()
	}
	if length, ok := historyOf(ctx); ok {
		if err := h.withHistory(ctx, c, d, t, length); err != nil {
			return nil, err
		}
	}
	snap, err := h.g.cfg.Orchestrator.TaskSnapshot(ctx, c.p, d.ID)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return t, nil
	case err != nil:
		return nil, h.fail(ctx, err)
	}
	if m := snap.StatusMessage; m != nil && len(m.Parts) > 0 && snap.State == d.TaskStatus {
		t.Status.Message = &a2a.Message{ID: m.MessageID, Role: a2a.MessageRoleAgent, Parts: parts(m.Parts), TaskID: t.ID, ContextID: t.ContextID}
		if t.Status.Message.ID == "" {
			t.Status.Message.ID = "status-" + d.ID.String()
		}
	}
	for _, art := range snap.Artifacts {
		a := &a2a.Artifact{ID: a2a.ArtifactID(art.ArtifactID), Name: art.Name, Parts: parts(art.Parts)}
		if len(art.Metadata) > 0 {
			_ = json.Unmarshal(art.Metadata, &a.Metadata)
		}
		if art.TooLarge {
			a.SetMeta(ExtensionURI, map[string]any{"too_large": true, "size_bytes": art.SizeBytes})
		}
		t.Artifacts = append(t.Artifacts, a)
	}
	return t, nil
}

// ownContext reports whether id is a context Quittance chose
// (quittance-context-<delegation id>).
func ownContext(id string) bool {
	raw, ok := strings.CutPrefix(id, contextPrefix)
	_, err := uuid.Parse(raw)
	return ok && err == nil
}

// pendingContext is the context a delegation not yet dispatched will be
// sent in: its context_from's, or its own.
func (h *handler) pendingContext(ctx context.Context, c call, d ledger.Delegation) (string, error) {
	l, err := h.g.cfg.Ledger.DelegationLinks(ctx, c.p, d.ID)
	if err != nil {
		return "", h.fail(ctx, err)
	}
	if l.ContextFrom == uuid.Nil {
		return delegate.DispatchContextID(d.ID), nil
	}
	from, err := h.g.cfg.Ledger.GetDelegation(ctx, c.p, l.ContextFrom)
	if err != nil {
		return "", h.fail(ctx, err)
	}
	if ownContext(from.Remote.ContextID) {
		return from.Remote.ContextID, nil
	}
	return delegate.DispatchContextID(from.ID), nil
}

// parts converts a snapshot's parts to A2A parts.
func parts(in []delegate.SnapshotPart) a2a.ContentParts {
	out := make(a2a.ContentParts, 0, len(in))
	for _, p := range in {
		var part *a2a.Part
		switch {
		case len(p.Data) > 0:
			var v any
			_ = json.Unmarshal(p.Data, &v)
			part = a2a.NewDataPart(v)
		case p.URL != "":
			part = a2a.NewFileURLPart(a2a.URL(p.URL), p.MediaType)
		case len(p.Raw) > 0:
			part = a2a.NewRawPart(p.Raw)
		default:
			part = a2a.NewTextPart(p.Text)
		}
		part.MediaType, part.Filename = p.MediaType, p.Filename
		if len(p.Metadata) > 0 {
			_ = json.Unmarshal(p.Metadata, &part.Metadata)
		}
		out = append(out, part)
	}
	return out
}

// taskMetadata is what the ledger extension says of a task
// (ledger/extension/v1/task-metadata.schema.json).
func taskMetadata(d ledger.Delegation) map[string]any {
	m := map[string]any{
		"delegation_id":         d.ID.String(),
		"business_operation_id": d.BusinessOperationID,
		"budget_id":             d.BudgetID,
		"task_class":            d.TaskClass,
		"task_status":           string(d.TaskStatus),
		"obligation_state":      string(d.ObligationState),
		"hold": map[string]any{
			"amount_minor": d.Hold.AmountMinor, "currency": d.Hold.Currency, "state": string(d.ObligationState.Hold()),
		},
	}
	if d.Remote.TaskID != "" {
		m["remote_task_id"] = d.Remote.TaskID
	}
	if d.Remote.ContextID != "" {
		m["remote_context_id"] = d.Remote.ContextID
	}
	if !d.CancelRequestedAt.IsZero() {
		m["cancel_requested_at"] = d.CancelRequestedAt.UTC()
	}
	return m
}
