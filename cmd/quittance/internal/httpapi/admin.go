package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/quittance/quittance/ledger"
)

// BudgetBody is a budget and where its money is. It stays comparable
// (tests compare budgets before and after); BudgetView adds its tenants.
type BudgetBody struct {
	ID              string    `json:"id"`
	Currency        string    `json:"currency"`
	FundedMinor     int64     `json:"funded_minor"`
	AvailableMinor  int64     `json:"available_minor"`
	HeldMinor       int64     `json:"held_minor"`
	SpentMinor      int64     `json:"spent_minor"`
	WrittenOffMinor int64     `json:"written_off_minor"`
	CreatedAt       time.Time `json:"created_at"`
	UpdatedAt       time.Time `json:"updated_at"`
}

// BudgetView is a budget as the admin API answers it: its money and the
// tenants whose orchestrators may hold on it.
type BudgetView struct {
	BudgetBody
	Tenants []string `json:"tenants" doc:"The tenants whose orchestrators may hold on the budget; empty: it holds for nobody."`
	// PendingChange is set on a 202: the budget is shown as it is (its
	// funding applied), and the change of its tenants waits for a second
	// on-call principal.
	PendingChange *PendingChangeBody `json:"pending_change,omitempty"`
}

func budgetView(b ledger.Budget) BudgetView {
	tenants := b.Tenants
	if tenants == nil {
		tenants = []string{}
	}
	return BudgetView{
		BudgetBody: BudgetBody{
			ID: b.ID, Currency: b.Currency, FundedMinor: b.Funded, AvailableMinor: b.Available, HeldMinor: b.Held,
			SpentMinor: b.Spent, WrittenOffMinor: b.WrittenOff, CreatedAt: b.CreatedAt, UpdatedAt: b.UpdatedAt,
		},
		Tenants: tenants,
	}
}

// OrgBody is a remote org's registration.
type OrgBody struct {
	ID                    string         `json:"id"`
	Name                  string         `json:"name"`
	SharedCoordinator     bool           `json:"shared_coordinator"`
	JWKS                  any            `json:"jwks,omitempty" doc:"The org's inline JWK Set, when its keys are registered inline."`
	JWKSURL               string         `json:"jwks_url,omitempty" doc:"The org's own JWKS URL, when its keys are fetched from there: keys it rotates at the URL take effect without approval."`
	JWKSFetch             *JWKSFetchBody `json:"jwks_fetch,omitempty" doc:"The state of the org's JWKS URL; present with jwks_url."`
	AgentCardURL          string         `json:"agent_card_url,omitempty"`
	AllowedHosts          []string       `json:"allowed_hosts"`
	RequireSignedReceipts bool           `json:"require_signed_receipts"`
	RequireSignedCard     bool           `json:"require_signed_card" doc:"The org's agent card is used only when one of its signatures verifies."`
	CardJKUHosts          []string       `json:"card_jku_hosts" doc:"The hosts a card signature's jku may name for its key to be fetched from; empty: card signatures verify with the org's registered keys only."`
	AgentCard             AgentCardBody  `json:"agent_card" doc:"The signature state of the org's agent card, as last checked, and its pin."`
	IdentityRevokedAt     *time.Time     `json:"identity_revoked_at,omitempty"`
	IdentityRevokedReason string         `json:"identity_revoked_reason,omitempty"`
	CreatedAt             time.Time      `json:"created_at"`
	UpdatedAt             time.Time      `json:"updated_at"`
	// PendingChange is set on a 202: the org is shown as it is, and the
	// requested change waits for a second on-call principal.
	PendingChange *PendingChangeBody `json:"pending_change,omitempty"`
}

// JWKSFetchBody is what Quittance last fetched from an org's JWKS URL.
type JWKSFetchBody struct {
	Keys        any        `json:"keys,omitempty" doc:"The last valid JWK Set fetched: the org's keys in force. Absent until a fetch succeeds."`
	FetchedAt   *time.Time `json:"fetched_at,omitempty" doc:"When that set was fetched."`
	AttemptedAt *time.Time `json:"attempted_at,omitempty" doc:"The last fetch, successful or not."`
	Error       string     `json:"error,omitempty" doc:"Why the last fetch failed (unreachable, not 200, or an invalid set); the keys in force stay. Absent when it succeeded."`
}

func orgBody(o ledger.Org) OrgBody {
	b := OrgBody{
		ID: o.ID, Name: o.Name, SharedCoordinator: o.SharedCoordinator, JWKS: rawJSON(o.JWKS), JWKSURL: o.JWKSURL,
		AgentCardURL: o.AgentCardURL, AllowedHosts: o.AllowedHosts, RequireSignedReceipts: o.RequireSignedReceipts,
		RequireSignedCard: o.RequireSignedCard, CardJKUHosts: nonNilHosts(o.CardJKUHosts), AgentCard: agentCardBody(o),
		IdentityRevokedAt: timePtr(o.IdentityRevokedAt), IdentityRevokedReason: o.IdentityRevokedReason,
		CreatedAt: o.CreatedAt, UpdatedAt: o.UpdatedAt,
	}
	if o.JWKSURL != "" {
		f := o.JWKSFetch
		b.JWKSFetch = &JWKSFetchBody{Keys: rawJSON(f.Set), FetchedAt: timePtr(f.FetchedAt), AttemptedAt: timePtr(f.AttemptedAt), Error: f.Error}
	}
	return b
}

// TaskClassBody is a task class.
type TaskClassBody struct {
	Name                string    `json:"name"`
	EffectCapable       bool      `json:"effect_capable"`
	GateOn              []string  `json:"gate_on"`
	CompensationTimeout string    `json:"compensation_timeout" example:"72h0m0s"`
	UpdatedAt           time.Time `json:"updated_at"`
	// PendingChange is set on a 202: the class is shown as it is, and the
	// requested change waits for a second on-call principal.
	PendingChange *PendingChangeBody `json:"pending_change,omitempty"`
}

func taskClassBody(c ledger.TaskClass) TaskClassBody {
	gate := make([]string, len(c.GateOn))
	for i, s := range c.GateOn {
		gate[i] = string(s)
	}
	return TaskClassBody{
		Name: c.Name, EffectCapable: c.EffectCapable, GateOn: gate,
		CompensationTimeout: c.CompensationTimeout.String(), UpdatedAt: c.UpdatedAt,
	}
}

func createdStatus(created bool) int {
	if created {
		return http.StatusCreated
	}
	return http.StatusOK
}

// registerAdmin is the route table of the admin endpoints: budgets, orgs
// and task classes, then the task-class policies and the principals.
func (s *Server) registerAdmin() {
	tags := []string{"admin"}
	huma.Register(s.api, huma.Operation{
		OperationID: "put-budget", Method: http.MethodPut, Path: "/admin/v1/budgets/{id}", Tags: tags,
		Summary: "Create a budget or change its funding or tenants", Security: bearerAuth,
	}, s.putBudget)
	huma.Register(s.api, huma.Operation{
		OperationID: "get-budget", Method: http.MethodGet, Path: "/admin/v1/budgets/{id}", Tags: tags,
		Summary: "Get a budget", Security: bearerAuth,
	}, s.getBudget)

	huma.Register(s.api, huma.Operation{
		OperationID: "put-org", Method: http.MethodPut, Path: "/admin/v1/orgs/{id}", Tags: tags,
		Summary: "Register a remote org or replace its registration", Security: bearerAuth,
		Description: "A change to what the org is trusted with (keys or their source, agent card URL, allowed hosts, shared_coordinator, " +
			"require_signed_receipts, require_signed_card, card_jku_hosts) is a privileged change: 202 with pending_change, the org as it " +
			"still is. The card's pin and signature state are not part of the registration and are kept.",
	}, s.putOrg)
	huma.Register(s.api, huma.Operation{
		OperationID: "get-org", Method: http.MethodGet, Path: "/admin/v1/orgs/{id}", Tags: tags,
		Summary: "Get a remote org", Security: bearerAuth,
		Description: "The org's registration, with agent_card: the signature state of its agent card as last checked (unchecked, unsigned, " +
			"verified with kid and thumbprint, failed with the reason, change_awaiting_approval), whether Quittance uses it, and the " +
			"key and compensation params pinned at its first verified use.",
	}, s.getOrg)

	huma.Register(s.api, huma.Operation{
		OperationID: "put-task-class", Method: http.MethodPut, Path: "/admin/v1/task-classes/{name}", Tags: tags,
		Summary: "Register or replace a task class", Security: bearerAuth,
	}, s.putTaskClass)
	huma.Register(s.api, huma.Operation{
		OperationID: "get-task-class", Method: http.MethodGet, Path: "/admin/v1/task-classes/{name}", Tags: tags,
		Summary: "Get a task class", Security: bearerAuth,
	}, s.getTaskClass)

	huma.Register(s.api, huma.Operation{
		OperationID: "list-task-classes", Method: http.MethodGet, Path: "/admin/v1/task-classes", Tags: tags,
		Summary: "List the registered task classes",
		Description: "Every registered task class, by name. A delegation whose class is not listed is treated as " +
			"effect-capable, gated on canceled and failed, with the default compensation timeout (72h).",
		Security: bearerAuth,
	}, s.listTaskClasses)
	s.registerTaskClassPolicies()
	s.registerPrincipals()
	s.registerAgentCard()
}

type putBudgetInput struct {
	ID   string `path:"id" maxLength:"128"`
	Body struct {
		Currency    string    `json:"currency" pattern:"^[A-Z]{3}$" doc:"ISO 4217; fixed once the budget exists." example:"EUR"`
		FundedMinor int64     `json:"funded_minor" minimum:"0" doc:"Total funding in integer minor units." example:"1000000"`
		Tenants     *[]string `json:"tenants,omitempty" maxItems:"100" doc:"The tenants whose orchestrators may hold on the budget, replacing the list; absent: unchanged (none for a new budget). A change is a privileged change: the answer is 202 with pending_change, and the budget keeps the tenants it had until a second on-call principal approves."`
	}
}

type budgetOutput struct {
	Status int
	Body   BudgetView
}

// putBudget serves PUT /admin/v1/budgets/{id}: create a budget or change its
// funding or tenants.
func (s *Server) putBudget(ctx context.Context, in *putBudgetInput) (*budgetOutput, error) {
	b, created, err := s.ledger.PutBudget(ctx, principal(ctx), in.ID, ledger.BudgetInput{
		Currency: in.Body.Currency, FundedMinor: in.Body.FundedMinor, Tenants: in.Body.Tenants,
	})
	status, pc, err := s.changeStatus(ctx, err, createdStatus(created))
	if err != nil {
		return nil, err
	}
	body := budgetView(b)
	body.PendingChange = pc
	return &budgetOutput{Status: status, Body: body}, nil
}

type idPathInput struct {
	ID string `path:"id" maxLength:"128"`
}

// getBudget serves GET /admin/v1/budgets/{id}: get a budget.
func (s *Server) getBudget(ctx context.Context, in *idPathInput) (*budgetOutput, error) {
	b, err := s.ledger.GetBudget(ctx, principal(ctx), in.ID)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return &budgetOutput{Status: http.StatusOK, Body: budgetView(b)}, nil
}

type putOrgInput struct {
	ID   string `path:"id" maxLength:"128"`
	Body struct {
		Name                  string         `json:"name" minLength:"1" maxLength:"200"`
		SharedCoordinator     bool           `json:"shared_coordinator,omitempty" doc:"The org shares a transaction coordinator with us, so a cancel rolls its effects back: the compensation gate does not apply."`
		JWKS                  map[string]any `json:"jwks,omitempty" doc:"The org's public JWK Set; acks and declarations must be signed by one of its keys. Not with jwks_url."`
		JWKSURL               string         `json:"jwks_url,omitempty" maxLength:"2048" doc:"The org's own JWKS URL (https; the egress policy applies), instead of jwks: its keys are fetched from there every QUITTANCE_ORG_JWKS_REFRESH and when a token names an unknown kid, and keys the org rotates there take effect without approval. Setting or changing it is a privileged change, like jwks."`
		AgentCardURL          string         `json:"agent_card_url,omitempty" maxLength:"2048"`
		AllowedHosts          []string       `json:"allowed_hosts,omitempty" maxItems:"32"`
		RequireSignedReceipts bool           `json:"require_signed_receipts,omitempty"`
		RequireSignedCard     bool           `json:"require_signed_card,omitempty" doc:"Use the org's agent card only when one of its signatures verifies: an unsigned or unverifiable card gets no dispatch and no compensation request. A privileged change."`
		CardJKUHosts          []string       `json:"card_jku_hosts,omitempty" maxItems:"20" doc:"Hosts a card signature's jku may name: its key is then fetched from there (through the egress policy). Without them a jku is refused and card signatures verify with the org's registered keys only. A privileged change."`
	}
}

type orgOutput struct {
	Status int
	Body   OrgBody
}

// putOrg serves PUT /admin/v1/orgs/{id}: register a remote org or replace
// its registration.
func (s *Server) putOrg(ctx context.Context, in *putOrgInput) (*orgOutput, error) {
	b := in.Body
	var jwks []byte
	if b.JWKS != nil {
		var err error
		if jwks, err = json.Marshal(b.JWKS); err != nil {
			return nil, s.fail(ctx, err)
		}
	}
	o, created, err := s.ledger.PutOrg(ctx, principal(ctx), in.ID, ledger.OrgInput{
		Name: b.Name, SharedCoordinator: b.SharedCoordinator, JWKS: jwks, JWKSURL: b.JWKSURL, AgentCardURL: b.AgentCardURL,
		AllowedHosts: b.AllowedHosts, RequireSignedReceipts: b.RequireSignedReceipts,
		RequireSignedCard: b.RequireSignedCard, CardJKUHosts: b.CardJKUHosts,
	})
	status, pc, err := s.changeStatus(ctx, err, createdStatus(created))
	if err != nil {
		return nil, err
	}
	body := orgBody(o)
	if pc != nil {
		body.ID, body.PendingChange = in.ID, pc
	}
	return &orgOutput{Status: status, Body: body}, nil
}

// getOrg serves GET /admin/v1/orgs/{id}: get a remote org.
func (s *Server) getOrg(ctx context.Context, in *idPathInput) (*orgOutput, error) {
	o, err := s.ledger.GetOrg(ctx, principal(ctx), in.ID)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return &orgOutput{Status: http.StatusOK, Body: orgBody(o)}, nil
}

type putTaskClassInput struct {
	Name string `path:"name" maxLength:"64"`
	Body struct {
		EffectCapable       bool     `json:"effect_capable"`
		GateOn              []string `json:"gate_on" doc:"Terminal statuses that gate: a subset of [canceled, failed]."`
		CompensationTimeout string   `json:"compensation_timeout" doc:"A Go duration, e.g. 72h." example:"72h"`
	}
}

type taskClassOutput struct {
	Status int
	Body   TaskClassBody
}

// putTaskClass serves PUT /admin/v1/task-classes/{name}: register or replace
// a task class.
func (s *Server) putTaskClass(ctx context.Context, in *putTaskClassInput) (*taskClassOutput, error) {
	timeout, err := time.ParseDuration(in.Body.CompensationTimeout)
	if err != nil {
		return nil, s.fail(ctx, ledger.Invalid("compensation_timeout", "must be a Go duration such as 72h or 90m"))
	}
	gate := make([]ledger.TaskStatus, 0, len(in.Body.GateOn))
	for _, raw := range in.Body.GateOn {
		st, err := ledger.ParseTaskStatus(raw)
		if err != nil {
			return nil, s.fail(ctx, ledger.Invalid("gate_on", "may contain only canceled and failed"))
		}
		gate = append(gate, st)
	}
	c, err := s.ledger.PutTaskClass(ctx, principal(ctx), ledger.TaskClass{
		Name: in.Name, EffectCapable: in.Body.EffectCapable, GateOn: gate, CompensationTimeout: timeout,
	})
	status, pc, err := s.changeStatus(ctx, err, http.StatusOK)
	if err != nil {
		return nil, err
	}
	body := taskClassBody(c)
	if pc != nil {
		body.Name, body.PendingChange = in.Name, pc
	}
	return &taskClassOutput{Status: status, Body: body}, nil
}

type namePathInput struct {
	Name string `path:"name" maxLength:"64"`
}

// getTaskClass serves GET /admin/v1/task-classes/{name}: get a task class.
func (s *Server) getTaskClass(ctx context.Context, in *namePathInput) (*taskClassOutput, error) {
	c, err := s.ledger.GetTaskClass(ctx, principal(ctx), in.Name)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return &taskClassOutput{Status: http.StatusOK, Body: taskClassBody(c)}, nil
}

type taskClassListOutput struct {
	Body struct {
		TaskClasses []TaskClassBody `json:"task_classes"`
	}
}

// listTaskClasses serves GET /admin/v1/task-classes: list the registered
// task classes.
func (s *Server) listTaskClasses(ctx context.Context, _ *struct{}) (*taskClassListOutput, error) {
	cs, err := s.ledger.ListTaskClasses(ctx, principal(ctx))
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	out := &taskClassListOutput{}
	out.Body.TaskClasses = bodies(cs, taskClassBody)
	return out, nil
}
