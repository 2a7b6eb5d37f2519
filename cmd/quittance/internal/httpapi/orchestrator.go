package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"

	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/ledger"
)

// Orchestrator is what the orchestrator-loop operations need: the
// *delegate.Orchestrator implements it.
type Orchestrator interface {
	// Continue queues an answer to an interrupted remote task.
	Continue(ctx context.Context, p ledger.Principal, id uuid.UUID, in delegate.ContinueInput) (delegate.FollowUp, bool, error)
	// FollowUp returns one answer.
	FollowUp(ctx context.Context, p ledger.Principal, id uuid.UUID, messageID string) (delegate.FollowUp, error)
	// TaskSnapshot returns the latest remote task snapshot.
	TaskSnapshot(ctx context.Context, p ledger.Principal, id uuid.UUID) (delegate.TaskSnapshot, error)
	// RemoteTasks returns a delegation's extra remote tasks.
	RemoteTasks(ctx context.Context, p ledger.Principal, id uuid.UUID) ([]delegate.RemoteTask, error)
	// ResolveDispatch records, for on-call, the remote task of a
	// dispatch_unknown delegation.
	ResolveDispatch(ctx context.Context, p ledger.Principal, id uuid.UUID, in delegate.ResolveDispatchInput) (ledger.Delegation, error)
}

// MessageBody is a follow-up message on a delegation's remote task.
type MessageBody struct {
	DelegationID string     `json:"delegation_id" format:"uuid"`
	MessageID    string     `json:"message_id" doc:"The orchestrator's id of the message; sending is idempotent on it."`
	A2AMessageID string     `json:"a2a_message_id" doc:"The A2A messageId sent to the remote agent (stable across retries)."`
	Status       string     `json:"status" enum:"queued,sent,failed"`
	Attempts     int        `json:"attempts"`
	Error        string     `json:"error,omitempty"`
	TaskState    string     `json:"task_state,omitempty" doc:"The remote task's state in the reply to the message."`
	CreatedAt    time.Time  `json:"created_at"`
	SentAt       *time.Time `json:"sent_at,omitempty"`
}

func messageBody(m delegate.FollowUp) MessageBody {
	return MessageBody{
		DelegationID: m.DelegationID.String(), MessageID: m.MessageID, A2AMessageID: m.A2AMessageID, Status: m.Status,
		Attempts: m.Attempts, Error: m.Error, TaskState: string(m.ResultState), CreatedAt: m.CreatedAt, SentAt: timePtr(m.SentAt),
	}
}

// registerOrchestrator is the route table of the endpoints that continue
// interrupted tasks and show task snapshots, served with an orchestrator.
func (s *Server) registerOrchestrator() {
	if s.orchestrator == nil {
		return
	}
	tags := []string{"delegations"}
	huma.Register(s.api, huma.Operation{
		OperationID: "send-delegation-message", Method: http.MethodPost, Path: "/v1/delegations/{id}/messages", Tags: tags,
		Summary: "Answer the remote task (continue an input_required or auth_required task)",
		Description: "Queues an ordinary A2A message on the delegation's remote task and context, sent through the outbox. " +
			"Only input_required and auth_required tasks take one (409 task_not_interrupted otherwise); a terminal task is 409 task_terminal: " +
			"send a refinement as a new delegation with context_from. 202 when queued; a repeat with the same message_id and message is 200 " +
			"with the same message and sends nothing; the same message_id with another message is 422 idempotency_mismatch.",
		Security: bearerAuth, DefaultStatus: http.StatusAccepted,
	}, s.sendDelegationMessage)
	huma.Register(s.api, huma.Operation{
		OperationID: "get-delegation-message", Method: http.MethodGet, Path: "/v1/delegations/{id}/messages/{message_id}", Tags: tags,
		Summary: "A follow-up message and whether it was delivered", Security: bearerAuth,
	}, s.getDelegationMessage)
	huma.Register(s.api, huma.Operation{
		OperationID: "get-delegation-task", Method: http.MethodGet, Path: "/v1/delegations/{id}/task", Tags: tags,
		Summary: "The latest remote task snapshot: status message and artifacts",
		Description: "What Quittance last observed of the remote task: its state and status message (for auth_required, typically a consent URL) " +
			"and its artifacts, streamed chunks (append/lastChunk) applied in order. An artifact too large to keep has too_large true, its size, and no parts. " +
			"404 until the task was first observed.",
		Security: bearerAuth,
	}, s.getDelegationTask)
}

type continueInput struct {
	ID   string `path:"id" doc:"The delegation id (a UUID)."`
	Body struct {
		MessageID string         `json:"message_id" minLength:"1" maxLength:"200" doc:"Your id for this message; a repeat with the same id and message returns the same result and sends nothing again."`
		Message   map[string]any `json:"message" doc:"The A2A message: {\"parts\": [...], \"metadata\": {...}}, parts in the A2A v1.0 shape. Quittance sets its messageId, role, taskId and contextId."`
	}
}

type messageOutput struct {
	Status int
	Body   MessageBody
}

// sendDelegationMessage serves POST /v1/delegations/{id}/messages: answer
// the remote task (continue an input_required or auth_required task).
func (s *Server) sendDelegationMessage(ctx context.Context, in *continueInput) (*messageOutput, error) {
	id, err := parseID(in.ID)
	if err != nil {
		return nil, err
	}
	m, created, err := s.orchestrator.Continue(ctx, principal(ctx), id, delegate.ContinueInput{MessageID: in.Body.MessageID, Message: messageJSON(in.Body.Message)})
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	status := http.StatusOK
	if created {
		status = http.StatusAccepted
	}
	return &messageOutput{Status: status, Body: messageBody(m)}, nil
}

type messagePathInput struct {
	ID        string `path:"id" doc:"The delegation id (a UUID)."`
	MessageID string `path:"message_id" maxLength:"200"`
}

// getDelegationMessage serves GET
// /v1/delegations/{id}/messages/{message_id}: a follow-up message and
// whether it was delivered.
func (s *Server) getDelegationMessage(ctx context.Context, in *messagePathInput) (*messageOutput, error) {
	return byPathID(ctx, s, in.ID, func(id uuid.UUID) (delegate.FollowUp, error) {
		return s.orchestrator.FollowUp(ctx, principal(ctx), id, in.MessageID)
	}, func(m delegate.FollowUp) *messageOutput {
		return &messageOutput{Status: http.StatusOK, Body: messageBody(m)}
	})
}

type taskOutput struct {
	Body delegate.TaskSnapshot
}

// getDelegationTask serves GET /v1/delegations/{id}/task: the latest remote
// task snapshot: status message and artifacts.
func (s *Server) getDelegationTask(ctx context.Context, in *delegationPathInput) (*taskOutput, error) {
	return byPathID(ctx, s, in.ID, func(id uuid.UUID) (delegate.TaskSnapshot, error) {
		return s.orchestrator.TaskSnapshot(ctx, principal(ctx), id)
	}, func(snap delegate.TaskSnapshot) *taskOutput { return &taskOutput{Body: snap} })
}
