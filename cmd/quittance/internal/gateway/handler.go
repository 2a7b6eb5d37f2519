package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"github.com/google/uuid"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/ledger"
)

// handler is the a2asrv.RequestHandler of every org's A2A server: each
// call runs as the request's orchestrator (callOf), about the org its path
// names.
type handler struct {
	g *Gateway
}

var _ a2asrv.RequestHandler = (*handler)(nil)

// errTaskNotFound is the one answer for a task id that is unknown, not a
// UUID, another tenant's or another org's: the same error, word for word,
// so the answer tells nothing of which it was.
func errTaskNotFound() error { return a2a.NewError(a2a.ErrTaskNotFound, "task not found") }

// begin is the call of ctx, once the request's tenant, where sent, is the
// credential's.
func (h *handler) begin(ctx context.Context, tenant string) (call, error) {
	c, ok := callOf(ctx)
	if !ok {
		return call{}, a2a.ErrUnauthenticated
	}
	if tenant != "" && tenant != c.p.Tenant {
		return call{}, a2a.NewError(a2a.ErrUnauthorized, "tenant is not the credential's tenant")
	}
	return c, nil
}

// beginTask is begin, and the delegation of task id as the call may see it
// (delegation): how a request on one task starts.
func (h *handler) beginTask(ctx context.Context, tenant string, id a2a.TaskID) (call, ledger.Delegation, error) {
	c, err := h.begin(ctx, tenant)
	if err != nil {
		return call{}, ledger.Delegation{}, err
	}
	d, err := h.delegation(ctx, c, id)
	return c, d, err
}

// delegation loads the task id's delegation as c may see it: one of c's
// tenant, with c's org. Anything else is errTaskNotFound.
func (h *handler) delegation(ctx context.Context, c call, id a2a.TaskID) (ledger.Delegation, error) {
	did, err := uuid.Parse(string(id))
	if err != nil {
		return ledger.Delegation{}, errTaskNotFound()
	}
	d, err := h.g.cfg.Ledger.GetDelegation(ctx, c.p, did)
	if errors.Is(err, ledger.ErrNotFound) || (err == nil && d.OrgID != c.org) {
		return ledger.Delegation{}, errTaskNotFound()
	}
	if err != nil {
		return ledger.Delegation{}, h.fail(ctx, err)
	}
	return d, nil
}

// SendMessage creates a dispatched delegation from a message that carries
// the ledger extension's data (GATEWAY.md, "Sending a task").
func (h *handler) SendMessage(ctx context.Context, req *a2a.SendMessageRequest) (a2a.SendMessageResult, error) {
	c, err := h.begin(ctx, req.Tenant)
	if err != nil {
		return nil, err
	}
	ctx = sendHistory(ctx, req.Config)
	msg := req.Message
	if msg == nil || msg.ID == "" {
		return nil, a2a.NewError(a2a.ErrInvalidParams, "message with a messageId is required")
	}
	if inlinePush(req) != nil {
		return h.sendWithPush(ctx, req)
	}
	if msg.TaskID != "" {
		return h.continueTask(ctx, c, msg)
	}
	data, rest, err := parseLedgerData(msg.Metadata)
	if err != nil {
		return nil, err
	}
	dispatch, err := dispatchMessage(msg, rest)
	if err != nil {
		return nil, err
	}
	op := msg.ID
	if data.BusinessOperationID != nil {
		op = *data.BusinessOperationID
	}
	from, refs, err := links(msg)
	if err != nil {
		return nil, h.fail(ctx, err)
	}
	d, _, err := h.g.cfg.Ledger.CreateDelegation(ctx, c.p, ledger.CreateInput{
		BusinessOperationID: op, OrgID: c.org, TaskClass: data.TaskClass, BudgetID: data.BudgetID,
		Hold:        ledger.Money{AmountMinor: *data.Hold.AmountMinor, Currency: data.Hold.Currency},
		Dispatch:    &ledger.DispatchInput{Message: dispatch},
		ContextFrom: from, References: refs,
	})
	if err != nil {
		return nil, h.fail(ctx, err)
	}
	return h.task(ctx, c, d)
}

// continueTask answers an interrupted task (input_required,
// auth_required): delegate.Orchestrator.Continue queues the message's
// parts and metadata (without the ledger extension's entry, which only a
// new task takes) for the org's agent on the remote task, idempotent on
// the messageId; a task that is not interrupted is refused with the REST
// problem (task_not_interrupted, task_terminal). The answer is the task as
// it stands: the answer is sent after it.
func (h *handler) continueTask(ctx context.Context, c call, msg *a2a.Message) (a2a.SendMessageResult, error) {
	d, err := h.delegation(ctx, c, msg.TaskID)
	if err != nil {
		return nil, err
	}
	rest := make(map[string]any, len(msg.Metadata))
	for k, v := range msg.Metadata {
		if k != ExtensionURI {
			rest[k] = v
		}
	}
	raw, err := dispatchMessage(msg, rest)
	if err != nil {
		return nil, err
	}
	if _, _, err := h.g.cfg.Orchestrator.Continue(ctx, c.p, d.ID, delegate.ContinueInput{MessageID: msg.ID, Message: raw}); err != nil {
		return nil, h.fail(ctx, err)
	}
	if d, err = h.g.cfg.Ledger.GetDelegation(ctx, c.p, d.ID); err != nil {
		return nil, h.fail(ctx, err)
	}
	return h.task(ctx, c, d)
}

// links maps a new task's contextId and referenceTaskIds onto the
// delegation's links, as POST /v1/delegations takes them: a contextId the
// gateway gave one of the caller's tasks (quittance-context-<delegation
// id>) is context_from, and each referenced task id, a delegation id, is
// among references. Whether the caller sees them, at this org, with the
// remote context or task to link to, is the ledger's to check; an id
// that is not one the gateway gives names no delegation, and is refused
// as an unknown one is (context_from_not_found, references_not_found).
func links(msg *a2a.Message) (uuid.UUID, []uuid.UUID, error) {
	var from uuid.UUID
	if msg.ContextID != "" {
		raw, ok := strings.CutPrefix(msg.ContextID, contextPrefix)
		id, err := uuid.Parse(raw)
		if !ok || err != nil {
			return uuid.Nil, nil, &ledger.ReferenceError{Field: "context_from", ID: msg.ContextID}
		}
		from = id
	}
	refs := make([]uuid.UUID, 0, len(msg.ReferenceTasks))
	for _, ref := range msg.ReferenceTasks {
		id, err := uuid.Parse(string(ref))
		if err != nil {
			return uuid.Nil, nil, &ledger.ReferenceError{Field: "references", ID: string(ref)}
		}
		refs = append(refs, id)
	}
	return from, refs, nil
}

// dispatchMessage is the message Quittance sends the org's agent: the
// client's parts, and its metadata without the ledger extension's entry.
func dispatchMessage(msg *a2a.Message, metadata map[string]any) (json.RawMessage, error) {
	out := map[string]any{"parts": msg.Parts}
	if len(metadata) > 0 {
		out["metadata"] = metadata
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return nil, a2a.NewError(a2a.ErrInvalidParams, "message does not encode: "+err.Error())
	}
	return raw, nil
}

// GetTask answers the task of one of the caller's delegations at the org.
func (h *handler) GetTask(ctx context.Context, req *a2a.GetTaskRequest) (*a2a.Task, error) {
	c, d, err := h.beginTask(ctx, req.Tenant, req.ID)
	if err != nil {
		return nil, err
	}
	return h.task(historyFor(ctx, req.HistoryLength), c, d)
}

// maxPageSize is ListTasks' largest page, and its default.
const (
	maxPageSize     = 100
	defaultPageSize = 50
)

// ListTasks lists the caller's tenant's delegations at the org, newest
// first; pageToken is the last task id of the previous page.
func (h *handler) ListTasks(ctx context.Context, req *a2a.ListTasksRequest) (*a2a.ListTasksResponse, error) {
	c, err := h.begin(ctx, req.Tenant)
	if err != nil {
		return nil, err
	}
	if err := restListQuery(ctx, req); err != nil {
		return nil, err
	}
	size := req.PageSize
	switch {
	case size == 0:
		size = defaultPageSize
	case size < 0 || size > maxPageSize:
		return nil, a2a.NewError(a2a.ErrInvalidParams, "pageSize must be 1 to "+strconv.Itoa(maxPageSize))
	}
	f := ledger.DelegationFilter{OrgID: c.org, Limit: size}
	if req.PageToken != "" {
		after, err := uuid.Parse(req.PageToken)
		if err != nil {
			return nil, a2a.NewError(a2a.ErrInvalidParams, "pageToken is not one this server issued")
		}
		f.After = after
	}
	if req.Status != a2a.TaskStateUnspecified {
		st, err := ledger.ParseTaskStatus(string(req.Status))
		if err != nil {
			return nil, a2a.NewError(a2a.ErrInvalidParams, "status is not an A2A task state")
		}
		f.TaskStatus = st
	}
	if req.StatusTimestampAfter != nil {
		f.StatusAfter = req.StatusTimestampAfter.UTC()
	}
	ds, total, err := h.listDelegations(ctx, c, req, f)
	if err != nil {
		return nil, err
	}
	out := &a2a.ListTasksResponse{Tasks: []*a2a.Task{}, PageSize: size, TotalSize: total}
	if req.HistoryLength != nil {
		ctx = historyFor(ctx, req.HistoryLength)
	}
	for _, d := range ds {
		t, err := h.task(ctx, c, d)
		if err != nil {
			return nil, err
		}
		if !req.IncludeArtifacts {
			t.Artifacts = nil
		}
		out.Tasks = append(out.Tasks, t)
	}
	if req.ContextID == "" && len(ds) == size {
		out.NextPageToken = ds[len(ds)-1].ID.String()
	}
	return out, nil
}

// listDelegations is the page of delegations ListTasks answers with f,
// and how many match on every page: a contextId's are one page, counted
// as listed; otherwise the ledger counts them.
func (h *handler) listDelegations(ctx context.Context, c call, req *a2a.ListTasksRequest, f ledger.DelegationFilter) ([]ledger.Delegation, int, error) {
	if req.ContextID != "" {
		if req.PageToken != "" {
			return nil, 0, a2a.NewError(a2a.ErrInvalidParams, "a contextId's tasks are one page")
		}
		ds, err := h.contextDelegations(ctx, c, req.ContextID, f)
		if err != nil {
			return nil, 0, h.fail(ctx, err)
		}
		return ds, len(ds), nil
	}
	ds, err := h.g.cfg.Ledger.ListDelegations(ctx, c.p, f)
	if err != nil {
		return nil, 0, h.fail(ctx, err)
	}
	total, err := h.g.cfg.Ledger.CountDelegations(ctx, c.p, f)
	if err != nil {
		return nil, 0, h.fail(ctx, err)
	}
	return ds, int(total), nil
}

// contextDelegations are the caller's delegations at the org in the
// context the gateway names contextID (quittance-context-<delegation
// id>): that delegation and those sent in its context (its links'
// context_children), oldest first, with f's task status and status
// timestamp when set. A context that names none of the caller's
// delegations has no tasks.
func (h *handler) contextDelegations(ctx context.Context, c call, contextID string, f ledger.DelegationFilter) ([]ledger.Delegation, error) {
	raw, ok := strings.CutPrefix(contextID, contextPrefix)
	id, err := uuid.Parse(raw)
	if !ok || err != nil {
		return nil, nil
	}
	l, err := h.g.cfg.Ledger.DelegationLinks(ctx, c.p, id)
	if errors.Is(err, ledger.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []ledger.Delegation
	for _, did := range append([]uuid.UUID{id}, l.ContextChildren...) {
		d, err := h.g.cfg.Ledger.GetDelegation(ctx, c.p, did)
		if errors.Is(err, ledger.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if d.OrgID == c.org && (f.TaskStatus == "" || d.TaskStatus == f.TaskStatus) && (f.StatusAfter.IsZero() || d.TaskStatusAt.After(f.StatusAfter)) {
			out = append(out, d)
		}
	}
	return out, nil
}

// CancelTask asks for the delegation's cancel (ledger.Service.RequestCancel):
// Quittance cancels the remote task; the hold stays until what it observes
// there, and evidence where the gate applies, ends the obligation.
func (h *handler) CancelTask(ctx context.Context, req *a2a.CancelTaskRequest) (*a2a.Task, error) {
	c, d, err := h.beginTask(ctx, req.Tenant, req.ID)
	if err != nil {
		return nil, err
	}
	if d.TaskStatus.Terminal() {
		return nil, a2a.NewError(a2a.ErrTaskNotCancelable, "the task is "+string(d.TaskStatus))
	}
	d, err = h.g.cfg.Ledger.RequestCancel(ctx, c.p, d.ID)
	if err != nil {
		return nil, h.fail(ctx, err)
	}
	return h.task(ctx, c, d)
}

// GetExtendedAgentCard: the gateway's card is the only one.
func (h *handler) GetExtendedAgentCard(context.Context, *a2a.GetExtendedAgentCardRequest) (*a2a.AgentCard, error) {
	return nil, a2a.ErrExtendedCardNotConfigured
}

// fail maps a domain error to the A2A error of its REST problem: the A2A
// code by the problem's status, and the problem's code and status in the
// ErrorInfo's metadata (problem_code, problem_status) and as a detail.
func (h *handler) fail(ctx context.Context, err error) error {
	p := httpapi.ProblemOf(ctx, h.g.cfg.Log, err)
	var base error
	switch p.Status {
	case http.StatusBadRequest, http.StatusUnprocessableEntity, http.StatusRequestEntityTooLarge:
		base = a2a.ErrInvalidParams
	case http.StatusUnauthorized:
		base = a2a.ErrUnauthenticated
	case http.StatusForbidden:
		base = a2a.ErrUnauthorized
	case http.StatusNotFound:
		base = a2a.ErrTaskNotFound
	case http.StatusConflict:
		base = a2a.ErrInvalidRequest
	default:
		base = a2a.ErrInternalError
	}
	return a2a.NewError(base, p.Detail).
		WithErrorInfoMeta(map[string]string{"problem_code": p.Code, "problem_status": strconv.Itoa(p.Status)}).
		WithDetails(map[string]any{"code": p.Code, "status": p.Status, "detail": p.Detail})
}

// ledgerData is the ledger extension's data in a message's metadata
// (ledger/extension/v1/message-metadata.schema.json).
type ledgerData struct {
	BudgetID string `json:"budget_id"`
	Hold     *struct {
		AmountMinor *int64 `json:"amount_minor"`
		Currency    string `json:"currency"`
	} `json:"hold"`
	TaskClass string `json:"task_class"`
	// BusinessOperationID is nil when absent (the messageId is used), so
	// that an empty one is refused rather than taken for absent.
	BusinessOperationID *string `json:"business_operation_id"`
}

// parseLedgerData reads the ledger extension's data from a message's
// metadata and returns the rest of the metadata. No entry under the URI
// is ExtensionSupportRequiredError; a malformed one is InvalidParams
// naming the member at fault. What the values must be beyond their shape
// (a budget the tenant holds on, a positive amount, a task class's
// spelling) is the ledger's to say, as for POST /v1/delegations.
func parseLedgerData(metadata map[string]any) (ledgerData, map[string]any, error) {
	entry, ok := metadata[ExtensionURI]
	if !ok || entry == nil {
		return ledgerData{}, nil, a2a.NewError(a2a.ErrExtensionSupportRequired,
			"this agent requires the extension "+ExtensionURI+": put budget_id, hold {amount_minor, currency} and task_class in message.metadata[\""+ExtensionURI+"\"]").
			WithErrorInfoMeta(map[string]string{"extension": ExtensionURI})
	}
	invalid := func(format string, args ...any) error {
		return a2a.NewError(a2a.ErrInvalidParams, fmt.Sprintf("message.metadata[%q]: ", ExtensionURI)+fmt.Sprintf(format, args...)).
			WithErrorInfoMeta(map[string]string{"extension": ExtensionURI})
	}
	if _, isObject := entry.(map[string]any); !isObject {
		return ledgerData{}, nil, invalid("must be an object")
	}
	raw, err := json.Marshal(entry)
	if err != nil {
		return ledgerData{}, nil, invalid("does not encode")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var data ledgerData
	if err := dec.Decode(&data); err != nil {
		return ledgerData{}, nil, invalid("%v", err)
	}
	switch {
	case data.BudgetID == "":
		return ledgerData{}, nil, invalid("budget_id is required")
	case data.Hold == nil || data.Hold.AmountMinor == nil || data.Hold.Currency == "":
		return ledgerData{}, nil, invalid("hold with amount_minor and currency is required")
	case data.TaskClass == "":
		return ledgerData{}, nil, invalid("task_class is required")
	case data.BusinessOperationID != nil && *data.BusinessOperationID == "":
		return ledgerData{}, nil, invalid("business_operation_id, when present, must not be empty")
	}
	rest := make(map[string]any, len(metadata))
	for k, v := range metadata {
		if k != ExtensionURI {
			rest[k] = v
		}
	}
	return data, rest, nil
}
