package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/ledger"
)

// MoneyBody is an amount in integer minor units of an ISO 4217 currency.
type MoneyBody struct {
	AmountMinor int64  `json:"amount_minor" doc:"Integer minor units (cents for USD)." example:"125000"`
	Currency    string `json:"currency" pattern:"^[A-Z]{3}$" doc:"ISO 4217 currency code." example:"EUR"`
}

// RemoteBody identifies the remote A2A task.
type RemoteBody struct {
	TaskID          string `json:"task_id" doc:"The remote A2A task id." example:"task-8c1f"`
	ContextID       string `json:"context_id,omitempty" doc:"The remote A2A context id."`
	ProtocolVersion string `json:"protocol_version,omitempty" doc:"The A2A protocol version spoken with the remote agent."`
}

// CompensationBody is what is known about compensation being sought. It is
// shown in every state: the idempotency key exists from the delegation's
// creation, so a remote org can send evidence before the task ends.
type CompensationBody struct {
	IdempotencyKey string     `json:"idempotency_key" doc:"Stable key the remote org's compensation ack must carry; the same from the delegation's creation on, and sent to the remote with the dispatch."`
	Deadline       *time.Time `json:"deadline,omitempty" doc:"When the obligation becomes compensation_unconfirmed if no evidence arrived."`
	Attempts       int        `json:"attempts" doc:"Compensation requests sent so far."`
	LastError      string     `json:"last_error,omitempty"`
	Receipt        any        `json:"receipt,omitempty" doc:"The compensation receipt, once one arrived."`
}

// DelegationBody is a delegation as the API shows it.
type DelegationBody struct {
	ID                  string            `json:"id" format:"uuid"`
	Tenant              string            `json:"tenant"`
	BusinessOperationID string            `json:"business_operation_id"`
	OrgID               string            `json:"org_id"`
	TaskClass           string            `json:"task_class"`
	BudgetID            string            `json:"budget_id"`
	Hold                MoneyBody         `json:"hold"`
	HoldState           string            `json:"hold_state" enum:"active,consumed,returned,lost"`
	SettledAmountMinor  *int64            `json:"settled_amount_minor,omitempty" doc:"Once settled: how much of the hold the work cost (spent); the rest of the hold returned to the budget."`
	ReversedAmountMinor *int64            `json:"reversed_amount_minor,omitempty" doc:"Once compensated: how much of the hold the remote reversed (returned to the budget); the rest was spent as the cost of the cancellation."`
	Remote              RemoteBody        `json:"remote"`
	TaskStatus          string            `json:"task_status"`
	TaskStatusAt        *time.Time        `json:"task_status_at,omitempty"`
	TaskStatusMessage   string            `json:"task_status_message,omitempty"`
	LastObservedAt      *time.Time        `json:"last_observed_at,omitempty" doc:"When Quittance last received an observation of the remote task, changed or not. An observation that repeats the current status and message moves only this and appends no event."`
	ObligationState     string            `json:"obligation_state"`
	ObligationReason    string            `json:"obligation_reason,omitempty"`
	CancelRequestedAt   *time.Time        `json:"cancel_requested_at,omitempty"`
	Compensation        *CompensationBody `json:"compensation"`
	Links               *LinksBody        `json:"links,omitempty" doc:"Links to and from other delegations (shown on a single delegation)."`
	RemoteTasks         []RemoteTaskBody  `json:"remote_tasks,omitempty" doc:"The extra remote tasks the org's agent created for the delegation besides remote.task_id (a second task on a resend, for the dispatch or a compensation request), oldest first; each keeps the obligation open until it is terminal and named by a compensation request. Shown on a single delegation, when there are any."`
	Version             int64             `json:"version"`
	CreatedAt           time.Time         `json:"created_at"`
	UpdatedAt           time.Time         `json:"updated_at"`
}

func delegationBody(d ledger.Delegation) DelegationBody {
	b := DelegationBody{
		ID: d.ID.String(), Tenant: d.Tenant, BusinessOperationID: d.BusinessOperationID, OrgID: d.OrgID,
		TaskClass: d.TaskClass, BudgetID: d.BudgetID,
		Hold:       MoneyBody{AmountMinor: d.Hold.AmountMinor, Currency: d.Hold.Currency},
		HoldState:  string(d.ObligationState.Hold()),
		Remote:     RemoteBody{TaskID: d.Remote.TaskID, ContextID: d.Remote.ContextID, ProtocolVersion: d.Remote.ProtocolVersion},
		TaskStatus: string(d.TaskStatus), TaskStatusAt: timePtr(d.TaskStatusAt), TaskStatusMessage: d.TaskStatusMessage,
		LastObservedAt: timePtr(d.LastObservedAt), ObligationState: string(d.ObligationState), ObligationReason: d.ObligationReason,
		CancelRequestedAt: timePtr(d.CancelRequestedAt), Version: d.Version, CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt,
	}
	switch d.ObligationState {
	case ledger.ObligationSettled:
		b.SettledAmountMinor = &d.SettledAmountMinor
	case ledger.ObligationCompensated:
		b.ReversedAmountMinor = &d.ReversedAmountMinor
	case ledger.ObligationHeld, ledger.ObligationRevocationPendingCompensation, ledger.ObligationCompensationUnconfirmed,
		ledger.ObligationEscalated, ledger.ObligationReleased, ledger.ObligationWrittenOff:
	}
	c := d.Compensation
	b.Compensation = &CompensationBody{
		IdempotencyKey: ledger.CompensationKey(d), Deadline: timePtr(c.Deadline), Attempts: c.Attempts, LastError: c.LastError,
	}
	if len(c.Receipt) > 0 {
		b.Compensation.Receipt = rawJSON(c.Receipt)
	}
	return b
}

// RemoteTaskBody is an extra remote task of a delegation.
type RemoteTaskBody struct {
	TaskID       string     `json:"task_id" doc:"The remote A2A task id."`
	ContextID    string     `json:"context_id,omitempty" doc:"Its A2A context id."`
	Purpose      string     `json:"purpose" enum:"dispatch,compensation" doc:"Which of the delegation's messages created it: the dispatch or a compensation request."`
	Status       string     `json:"status" doc:"Its last known task status (unknown until observed)."`
	NamedRound   int        `json:"named_round" doc:"The latest compensation request round that named it (extraTaskIds); 0 while none has."`
	FoundBy      string     `json:"found_by" doc:"How it was found: list_tasks, push or stream."`
	FoundAt      time.Time  `json:"found_at"`
	CancelSentAt *time.Time `json:"cancel_sent_at,omitempty" doc:"When Quittance last asked the agent to cancel it."`
}

func remoteTaskBodies(tasks []delegate.RemoteTask) []RemoteTaskBody {
	var out []RemoteTaskBody
	for _, t := range tasks {
		out = append(out, RemoteTaskBody{
			TaskID: t.TaskID, ContextID: t.ContextID, Purpose: string(t.Purpose), Status: string(t.Status),
			NamedRound: t.NamedRound, FoundBy: t.FoundBy, FoundAt: t.FoundAt, CancelSentAt: timePtr(t.CancelSentAt),
		})
	}
	return out
}

// LinksBody shows a delegation's links both ways.
type LinksBody struct {
	ContextFrom     string   `json:"context_from,omitempty" doc:"The delegation whose remote context this one was sent in."`
	References      []string `json:"references" doc:"Delegations whose remote tasks this one references."`
	ContextChildren []string `json:"context_children" doc:"Delegations sent in this one's remote context."`
	ReferencedBy    []string `json:"referenced_by" doc:"Delegations that reference this one's remote task."`
}

func linksBody(l ledger.Links) *LinksBody {
	ids := func(in []uuid.UUID) []string {
		out := make([]string, len(in))
		for i, id := range in {
			out[i] = id.String()
		}
		return out
	}
	b := &LinksBody{References: ids(l.References), ContextChildren: ids(l.ContextChildren), ReferencedBy: ids(l.ReferencedBy)}
	if l.ContextFrom != uuid.Nil {
		b.ContextFrom = l.ContextFrom.String()
	}
	return b
}

// withLinks adds the delegation's links to its body.
func (s *Server) withLinks(ctx context.Context, b DelegationBody) (DelegationBody, error) {
	id, err := uuid.Parse(b.ID)
	if err != nil {
		return b, err
	}
	l, err := s.ledger.DelegationLinks(ctx, principal(ctx), id)
	if err != nil {
		return b, err
	}
	b.Links = linksBody(l)
	return b, nil
}

// withRemoteTasks adds the delegation's extra remote tasks to its body.
func (s *Server) withRemoteTasks(ctx context.Context, b DelegationBody) (DelegationBody, error) {
	if s.orchestrator == nil {
		return b, nil
	}
	id, err := uuid.Parse(b.ID)
	if err != nil {
		return b, err
	}
	tasks, err := s.orchestrator.RemoteTasks(ctx, principal(ctx), id)
	if err != nil {
		return b, err
	}
	b.RemoteTasks = remoteTaskBodies(tasks)
	return b, nil
}

// linkIDs parses the linked delegation ids of a create request; an id that
// is not a UUID names no delegation.
func linkIDs(contextFrom string, refs []string) (uuid.UUID, []uuid.UUID, error) {
	var from uuid.UUID
	if contextFrom != "" {
		id, err := uuid.Parse(contextFrom)
		if err != nil {
			return uuid.Nil, nil, &ledger.ReferenceError{Field: "context_from", ID: contextFrom}
		}
		from = id
	}
	out := make([]uuid.UUID, 0, len(refs))
	for _, r := range refs {
		id, err := uuid.Parse(r)
		if err != nil {
			return uuid.Nil, nil, &ledger.ReferenceError{Field: "references", ID: r}
		}
		out = append(out, id)
	}
	return from, out, nil
}

// DispatchBody asks Quittance to send the delegated work itself.
type DispatchBody struct {
	Message map[string]any `json:"message" doc:"The A2A message to send: {\"parts\": [...], \"metadata\": {...}}, parts in the A2A v1.0 shape (text, data, url or raw). Quittance sets its messageId (stable per delegation), role and push notification config."`
}

// eventRecords returns events in their published form.
func eventRecords(events []ledger.Event) []EventRecord {
	out := make([]EventRecord, len(events))
	for i, e := range events {
		out[i] = eventRecord(e)
	}
	return out
}

// registerDelegations is the route table of the delegation endpoints the
// orchestrators call.
func (s *Server) registerDelegations() {
	tags := []string{"delegations"}
	huma.Register(s.api, huma.Operation{
		OperationID: "create-delegation", Method: http.MethodPost, Path: "/v1/delegations", Tags: tags,
		Summary: "Record a delegation and hold its budget",
		Description: "Idempotent per tenant on business_operation_id: the same request again returns 200 and the same delegation, with no second hold; the same id with a different request is 422. " +
			"A remote task id is unique per tenant and org: 409 remote_task_taken when another delegation of this tenant records it (another tenant's delegation with the same id is no obstacle, and is not revealed).",
		Security: bearerAuth, DefaultStatus: http.StatusCreated,
	}, s.createDelegation)

	huma.Register(s.api, huma.Operation{
		OperationID: "get-delegation", Method: http.MethodGet, Path: "/v1/delegations/{id}", Tags: tags,
		Summary: "Get a delegation", Security: bearerAuth,
	}, s.getDelegation)

	huma.Register(s.api, huma.Operation{
		OperationID: "list-delegations", Method: http.MethodGet, Path: "/v1/delegations", Tags: tags,
		Summary: "List delegations, newest first", Security: bearerAuth,
	}, s.listDelegations)

	huma.Register(s.api, huma.Operation{
		OperationID: "report-task-status", Method: http.MethodPost, Path: "/v1/delegations/{id}/task-status", Tags: tags,
		Summary:     "Report the remote task's status",
		Description: "A terminal status is immutable: a different later terminal status is recorded as a status_conflict anomaly and not applied; stale reports (older timestamp) are recorded and ignored. A newly terminal status moves the obligation. With state completed, settled_amount_minor (0 to the hold) spends that much and returns the rest; more than the hold is 422 and nothing changes; given when the report does not settle a held obligation (nor repeats the one that did) it is 409 settlement_not_applicable. A report dated later than now plus one minute is taken as dated now (reported_timestamp on its event). On a delegation Quittance dispatched, every report is the orchestrator's word only: it is recorded as a task_status_reported event, changes neither the task status, nor the obligation, nor the money, and asks Quittance to observe the remote task itself at once; the answer is 200 with the delegation as it stands.",
		Security:    bearerAuth,
	}, s.reportTaskStatus)

	huma.Register(s.api, huma.Operation{
		OperationID: "change-hold", Method: http.MethodPatch, Path: "/v1/delegations/{id}/hold", Tags: tags,
		Summary:     "Raise or lower the hold of a held obligation",
		Description: "A hold is a cap on what the work may cost. While the obligation is held, a raise holds the difference from the budget (422 insufficient_funds, nothing changed, when it is not available) and a cut returns it; a hold_changed event records the old and the new amount. The same amount again changes nothing. In any other state: 409 hold_not_changeable. On a delegation Quittance dispatched, a cut is 409 hold_lower_refused (nothing changed) once the dispatch may have been sent, while it is unknown or after a cancel request: only what Quittance observes at the remote returns money.",
		Security:    bearerAuth,
	}, s.changeHold)

	huma.Register(s.api, huma.Operation{
		OperationID: "cancel-delegation", Method: http.MethodPost, Path: "/v1/delegations/{id}/cancel", Tags: tags,
		Summary:     "Request revocation of the delegated task",
		Description: "Records the cancel request. The hold stays until the remote task's terminal status and, where the gate applies, compensation evidence.",
		Security:    bearerAuth,
	}, s.cancelDelegation)

	huma.Register(s.api, huma.Operation{
		OperationID: "list-delegation-events", Method: http.MethodGet, Path: "/v1/delegations/{id}/events", Tags: tags,
		Summary:     "The delegation's audit events, oldest first",
		Description: "With stream=true (or Accept: text/event-stream) the events are served as a replayable Server-Sent Events stream instead: see GET /v1/events.",
		Security:    bearerAuth,
	}, s.listDelegationEvents)
}

type createDelegationInput struct {
	Body struct {
		BusinessOperationID string        `json:"business_operation_id" minLength:"1" maxLength:"200" doc:"The orchestrator's id for this operation; creation is idempotent per tenant on it."`
		OrgID               string        `json:"org_id" doc:"The remote org the work is delegated to."`
		TaskClass           string        `json:"task_class" doc:"The kind of work; unknown classes are treated as effect-capable."`
		BudgetID            string        `json:"budget_id"`
		Hold                MoneyBody     `json:"hold"`
		Remote              *RemoteBody   `json:"remote,omitempty" doc:"The remote task the orchestrator created itself. Exactly one of remote and dispatch."`
		Dispatch            *DispatchBody `json:"dispatch,omitempty" doc:"Work for Quittance to send to the org's agent over A2A after placing the hold. Exactly one of remote and dispatch."`
		ContextFrom         string        `json:"context_from,omitempty" format:"uuid" doc:"A delegation with the same org whose remote context the new task is sent in (a refinement of its work)."`
		References          []string      `json:"references,omitempty" maxItems:"16" doc:"Delegations with the same org whose remote tasks the new task references (A2A referenceTaskIds)."`
	}
}

type delegationOutput struct {
	Status int
	Body   DelegationBody
}

// createDelegation serves POST /v1/delegations: record a delegation and hold
// its budget.
func (s *Server) createDelegation(ctx context.Context, in *createDelegationInput) (*delegationOutput, error) {
	b := in.Body
	from, refs, err := linkIDs(b.ContextFrom, b.References)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	d, created, err := s.ledger.CreateDelegation(ctx, principal(ctx), ledger.CreateInput{
		BusinessOperationID: b.BusinessOperationID, OrgID: b.OrgID, TaskClass: b.TaskClass, BudgetID: b.BudgetID,
		Hold:        ledger.Money{AmountMinor: b.Hold.AmountMinor, Currency: b.Hold.Currency},
		Remote:      remoteTask(b.Remote),
		Dispatch:    dispatchInput(b.Dispatch),
		ContextFrom: from, References: refs,
	})
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	status := createdStatus(created)
	body := delegationBody(d)
	if from != uuid.Nil || len(refs) > 0 {
		if body, err = s.withLinks(ctx, body); err != nil {
			return nil, s.fail(ctx, err)
		}
	}
	return &delegationOutput{Status: status, Body: body}, nil
}

type delegationPathInput struct {
	ID string `path:"id" doc:"The delegation id (a UUID)."`
}

// getDelegation serves GET /v1/delegations/{id}: get a delegation.
func (s *Server) getDelegation(ctx context.Context, in *delegationPathInput) (*delegationOutput, error) {
	return byPathID(ctx, s, in.ID, func(id uuid.UUID) (DelegationBody, error) {
		d, err := s.ledger.GetDelegation(ctx, principal(ctx), id)
		if err != nil {
			return DelegationBody{}, err
		}
		body, err := s.withLinks(ctx, delegationBody(d))
		if err != nil {
			return DelegationBody{}, err
		}
		return s.withRemoteTasks(ctx, body)
	}, func(body DelegationBody) *delegationOutput {
		return &delegationOutput{Status: http.StatusOK, Body: body}
	})
}

type listDelegationsInput struct {
	ObligationState string `query:"obligation_state" enum:"held,revocation_pending_compensation,compensation_unconfirmed,escalated,settled,released,compensated,written_off"`
	TaskStatus      string `query:"task_status"`
	OrgID           string `query:"org_id"`
	Limit           int    `query:"limit" minimum:"1" maximum:"500" default:"50"`
	Cursor          string `query:"cursor" doc:"next_cursor of the previous page."`
}

type listDelegationsOutput struct {
	Body struct {
		Delegations []DelegationBody `json:"delegations"`
		NextCursor  string           `json:"next_cursor,omitempty" doc:"Pass as cursor to get the next page; absent on the last page."`
	}
}

// listDelegations serves GET /v1/delegations: list delegations, newest first.
func (s *Server) listDelegations(ctx context.Context, in *listDelegationsInput) (*listDelegationsOutput, error) {
	f := ledger.DelegationFilter{ObligationState: ledger.ObligationState(in.ObligationState), OrgID: in.OrgID, Limit: in.Limit}
	if in.TaskStatus != "" {
		st, err := ledger.ParseTaskStatus(in.TaskStatus)
		if err != nil {
			return nil, newProblem(http.StatusUnprocessableEntity, "unknown_task_status", err.Error(),
				&huma.ErrorDetail{Location: "query.task_status", Message: "not an A2A task state", Value: in.TaskStatus})
		}
		f.TaskStatus = st
	}
	if in.Cursor != "" {
		after, err := uuid.Parse(in.Cursor)
		if err != nil {
			return nil, newProblem(http.StatusUnprocessableEntity, "validation_failed", "cursor is not one this API issued",
				&huma.ErrorDetail{Location: "query.cursor", Message: "invalid cursor", Value: in.Cursor})
		}
		f.After = after
	}
	ds, err := s.ledger.ListDelegations(ctx, principal(ctx), f)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	out := &listDelegationsOutput{}
	out.Body.Delegations = bodies(ds, delegationBody)
	if len(ds) == f.Limit && f.Limit > 0 {
		out.Body.NextCursor = ds[len(ds)-1].ID.String()
	}
	return out, nil
}

type taskStatusInput struct {
	ID   string `path:"id" doc:"The delegation id (a UUID)."`
	Body struct {
		State     string     `json:"state" doc:"The remote task state: A2A v1.0 (TASK_STATE_CANCELED) or v0.3 (canceled, input-required) names." example:"TASK_STATE_CANCELED"`
		Timestamp *time.Time `json:"timestamp,omitempty" doc:"When the remote task entered the state (TaskStatus.timestamp); defaults to now."`
		Message   string     `json:"message,omitempty" maxLength:"4096" doc:"The status message text, if any."`
		// SettledAmountMinor is a pointer so that 0 (nothing spent) is told
		// from absent (the whole hold).
		SettledAmountMinor *int64 `json:"settled_amount_minor,omitempty" doc:"With state completed, when it settles a held obligation: how much of the hold the work cost, 0 to the hold. That much is spent and the rest returned to the budget; absent, the whole hold is spent."`
	}
}

// reportTaskStatus serves POST /v1/delegations/{id}/task-status: report the
// remote task's status.
func (s *Server) reportTaskStatus(ctx context.Context, in *taskStatusInput) (*delegationOutput, error) {
	return byPathID(ctx, s, in.ID, func(id uuid.UUID) (ledger.Delegation, error) {
		st, err := ledger.ParseTaskStatus(in.Body.State)
		if err != nil {
			return ledger.Delegation{}, err
		}
		obs := compensation.Observation{Status: st, Message: in.Body.Message, Source: "api", SettledAmountMinor: in.Body.SettledAmountMinor}
		if in.Body.Timestamp != nil {
			obs.Timestamp = *in.Body.Timestamp
		}
		return s.compensation.ReportTaskStatus(ctx, principal(ctx), id, obs)
	}, delegationOK)
}

type changeHoldInput struct {
	ID   string `path:"id" doc:"The delegation id (a UUID)."`
	Body struct {
		AmountMinor int64 `json:"amount_minor" doc:"The new hold, in integer minor units of the hold's currency; positive." example:"90000"`
	}
}

// changeHold serves PATCH /v1/delegations/{id}/hold: raise or lower the hold
// of a held obligation.
func (s *Server) changeHold(ctx context.Context, in *changeHoldInput) (*delegationOutput, error) {
	return byPathID(ctx, s, in.ID, func(id uuid.UUID) (ledger.Delegation, error) {
		return s.ledger.ChangeHold(ctx, principal(ctx), id, in.Body.AmountMinor)
	}, delegationOK)
}

// cancelDelegation serves POST /v1/delegations/{id}/cancel: request
// revocation of the delegated task.
func (s *Server) cancelDelegation(ctx context.Context, in *delegationPathInput) (*delegationOutput, error) {
	return byPathID(ctx, s, in.ID, func(id uuid.UUID) (ledger.Delegation, error) {
		return s.ledger.RequestCancel(ctx, principal(ctx), id)
	}, delegationOK)
}

type delegationEventsInput struct {
	ID     string `path:"id" doc:"The delegation id (a UUID)."`
	Stream bool   `query:"stream" doc:"true: serve a replayable Server-Sent Events stream (id = the event's seq; resume with Last-Event-ID or after)."`
	After  string `query:"after" doc:"With stream=true: resume after the event with this seq (like Last-Event-ID), or 'now' for new events only."`
}

type eventsOutput struct {
	Body struct {
		Events []EventRecord `json:"events"`
	}
}

// listDelegationEvents serves GET /v1/delegations/{id}/events: the
// delegation's audit events, oldest first.
func (s *Server) listDelegationEvents(ctx context.Context, in *delegationEventsInput) (*eventsOutput, error) {
	return byPathID(ctx, s, in.ID, func(id uuid.UUID) ([]ledger.Event, error) {
		return s.ledger.DelegationEvents(ctx, principal(ctx), id)
	}, func(events []ledger.Event) *eventsOutput {
		out := &eventsOutput{}
		out.Body.Events = eventRecords(events)
		return out
	})
}

// parseID parses a delegation id from the path. A malformed id names no
// delegation, so it is the same 404 as a missing one.
func parseID(raw string) (uuid.UUID, error) {
	id, err := uuid.Parse(raw)
	if err != nil {
		return uuid.Nil, newProblem(http.StatusNotFound, "not_found", "no such resource")
	}
	return id, nil
}

// byPathID serves a request about the resource whose path id is raw:
// call does it with the parsed id, and output makes the handler's answer
// of what call returns. An id that is no UUID is a 404 (parseID); a
// failed call is the problem of its error (Server.fail).
func byPathID[T, O any](ctx context.Context, s *Server, raw string, call func(uuid.UUID) (T, error), output func(T) *O) (*O, error) {
	id, err := parseID(raw)
	if err != nil {
		return nil, err
	}
	v, err := call(id)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return output(v), nil
}

// delegationOK is the 200 answer with delegation d.
func delegationOK(d ledger.Delegation) *delegationOutput {
	return &delegationOutput{Status: http.StatusOK, Body: delegationBody(d)}
}

// remoteTask is the reported remote task of a create request, if any.
func remoteTask(b *RemoteBody) ledger.RemoteTask {
	if b == nil {
		return ledger.RemoteTask{}
	}
	return ledger.RemoteTask{TaskID: b.TaskID, ContextID: b.ContextID, ProtocolVersion: b.ProtocolVersion}
}

// dispatchInput is the dispatch request of a create request, if any.
func dispatchInput(b *DispatchBody) *ledger.DispatchInput {
	if b == nil {
		return nil
	}
	return &ledger.DispatchInput{Message: messageJSON(b.Message)}
}

// messageJSON is an A2A message of a request body as JSON, or nil when the
// body has none (or it does not encode), for the message's validation to
// refuse.
func messageJSON(m map[string]any) []byte {
	if m == nil {
		return nil
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil
	}
	return raw
}
