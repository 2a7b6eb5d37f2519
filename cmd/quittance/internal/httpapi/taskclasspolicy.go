package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/quittance/quittance/ledger"
)

// TaskClassPolicyBody is the task-class policy of a tenant at an org.
type TaskClassPolicyBody struct {
	OrgID     string    `json:"org_id"`
	Tenant    string    `json:"tenant"`
	Classes   []string  `json:"classes" doc:"The task classes the tenant's orchestrators may use with the org on delegations Quittance dispatches; any other class gates as an unknown class does."`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
	// PendingChange is set on a 202: the policy is shown as it is, and
	// the requested change waits for a second on-call person.
	PendingChange *PendingChangeBody `json:"pending_change,omitempty"`
}

func taskClassPolicyBody(p ledger.TaskClassPolicy) TaskClassPolicyBody {
	classes := p.Classes
	if classes == nil {
		classes = []string{}
	}
	return TaskClassPolicyBody{OrgID: p.OrgID, Tenant: p.Tenant, Classes: classes, UpdatedAt: p.UpdatedAt}
}

// registerTaskClassPolicies registers the task-class policy endpoints
// (ledger/DESIGN.md §2.4).
func (s *Server) registerTaskClassPolicies() {
	tags := []string{"admin"}
	huma.Register(s.api, huma.Operation{
		OperationID: "put-task-class-policy", Method: http.MethodPut, Path: "/admin/v1/orgs/{org}/task-class-policies/{tenant}", Tags: tags,
		Summary: "Set which task classes a tenant's orchestrators may use with an org",
		Description: "On a delegation Quittance dispatched, a task class the policy of its tenant at its org does not list " +
			"gates as an unknown class does (effect-capable, gated on canceled and failed). Setting a policy is a two-person " +
			"change: 202 with the pending change, applied when a second on-call person approves it (under dev, the " +
			"bootstrap principal's applies at once). The same classes again change nothing (200).",
		Security: bearerAuth,
	}, s.putTaskClassPolicy)
	huma.Register(s.api, huma.Operation{
		OperationID: "get-task-class-policy", Method: http.MethodGet, Path: "/admin/v1/orgs/{org}/task-class-policies/{tenant}", Tags: tags,
		Summary: "Get the task-class policy of a tenant at an org", Description: "404 when none is set: every class then gates on the delegations Quittance dispatches.",
		Security: bearerAuth,
	}, s.getTaskClassPolicy)
	huma.Register(s.api, huma.Operation{
		OperationID: "list-task-class-policies", Method: http.MethodGet, Path: "/admin/v1/orgs/{org}/task-class-policies", Tags: tags,
		Summary: "List the task-class policies at an org, by tenant", Security: bearerAuth,
	}, s.listTaskClassPolicies)
}

type putTaskClassPolicyInput struct {
	Org    string `path:"org" maxLength:"128"`
	Tenant string `path:"tenant" maxLength:"128"`
	Body   struct {
		Classes []string `json:"classes" maxItems:"100" doc:"The task classes the tenant's orchestrators may use with the org; [] lists none."`
	}
}

type taskClassPolicyOutput struct {
	Status int
	Body   TaskClassPolicyBody
}

// putTaskClassPolicy serves PUT
// /admin/v1/orgs/{org}/task-class-policies/{tenant}: set which task classes
// a tenant's orchestrators may use with an org.
func (s *Server) putTaskClassPolicy(ctx context.Context, in *putTaskClassPolicyInput) (*taskClassPolicyOutput, error) {
	p, err := s.ledger.PutTaskClassPolicy(ctx, principal(ctx), ledger.TaskClassPolicy{
		OrgID: in.Org, Tenant: in.Tenant, Classes: in.Body.Classes,
	})
	status, pc, err := s.changeStatus(ctx, err, http.StatusOK)
	if err != nil {
		return nil, err
	}
	body := taskClassPolicyBody(p)
	body.PendingChange = pc
	return &taskClassPolicyOutput{Status: status, Body: body}, nil
}

type taskClassPolicyPath struct {
	Org    string `path:"org" maxLength:"128"`
	Tenant string `path:"tenant" maxLength:"128"`
}

// getTaskClassPolicy serves GET
// /admin/v1/orgs/{org}/task-class-policies/{tenant}: get the task-class
// policy of a tenant at an org.
func (s *Server) getTaskClassPolicy(ctx context.Context, in *taskClassPolicyPath) (*taskClassPolicyOutput, error) {
	p, err := s.ledger.GetTaskClassPolicy(ctx, principal(ctx), in.Org, in.Tenant)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return &taskClassPolicyOutput{Status: http.StatusOK, Body: taskClassPolicyBody(p)}, nil
}

type orgPathInput struct {
	Org string `path:"org" maxLength:"128"`
}

type taskClassPolicyListOutput struct {
	Body struct {
		Policies []TaskClassPolicyBody `json:"task_class_policies"`
	}
}

// listTaskClassPolicies serves GET /admin/v1/orgs/{org}/task-class-policies:
// list the task-class policies at an org, by tenant.
func (s *Server) listTaskClassPolicies(ctx context.Context, in *orgPathInput) (*taskClassPolicyListOutput, error) {
	ps, err := s.ledger.ListTaskClassPolicies(ctx, principal(ctx), in.Org)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	out := &taskClassPolicyListOutput{}
	out.Body.Policies = bodies(ps, taskClassPolicyBody)
	return out, nil
}
