package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/google/uuid"

	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/webhook"
)

// Push notification configs (GATEWAY.md, "Push notifications"): a task's
// configs are stored and delivered by ledger/webhook, as a webhook
// delivery of their own kind; the gateway checks the task is the caller's
// and renders what is pushed, the task as the gateway shows it.

// inlinePushID is the id of a config given with SendMessage without one,
// so that a resent message replaces it instead of adding another.
const inlinePushID = "default"

// errNoPushConfig answers a config id the task does not have.
func errNoPushConfig() error {
	return a2a.NewError(a2a.ErrInvalidParams, "the task has no push notification config with this id")
}

// pushConfig is an A2A push config, registered in call c, as
// ledger/webhook takes it: pushed in the version c speaks.
func pushConfig(c call, d uuid.UUID, in *a2a.PushConfig) webhook.PushConfig {
	out := webhook.PushConfig{DelegationID: d, ID: in.ID, URL: in.URL, Token: in.Token, ProtocolVersion: c.version}
	if in.Auth != nil {
		out.AuthScheme, out.AuthCredentials = in.Auth.Scheme, in.Auth.Credentials
	}
	return out
}

// a2aPushConfig is a stored config as A2A shows it: secrets only where
// the stored config still has them (the answer that registered it).
func a2aPushConfig(c webhook.PushConfig) *a2a.PushConfig {
	out := &a2a.PushConfig{TaskID: a2a.TaskID(c.DelegationID.String()), ID: c.ID, URL: c.URL, Token: c.Token}
	if c.AuthScheme != "" {
		out.Auth = &a2a.PushAuthInfo{Scheme: c.AuthScheme, Credentials: c.AuthCredentials}
	}
	return out
}

// pushable is the caller's call and the task's delegation, once the
// gateway serves pushes (Config.Webhooks) and the task is the caller's.
func (h *handler) pushable(ctx context.Context, tenant string, id a2a.TaskID) (call, ledger.Delegation, error) {
	c, err := h.begin(ctx, tenant)
	if err != nil {
		return call{}, ledger.Delegation{}, err
	}
	if h.g.cfg.Webhooks == nil {
		return call{}, ledger.Delegation{}, a2a.ErrPushNotificationNotSupported
	}
	d, err := h.delegation(ctx, c, id)
	return c, d, err
}

// CreateTaskPushConfig registers a push config on one of the caller's
// tasks at the org (or replaces the one of its id). The answer is the only
// one that shows its token (Quittance's, when the client gave none) and
// credentials.
func (h *handler) CreateTaskPushConfig(ctx context.Context, req *a2a.PushConfig) (*a2a.PushConfig, error) {
	c, d, err := h.pushable(ctx, req.Tenant, req.TaskID)
	if err != nil {
		return nil, err
	}
	out, err := h.g.cfg.Webhooks.PutPushConfig(ctx, c.p, pushConfig(c, d.ID, req))
	if err != nil {
		return nil, h.fail(ctx, err)
	}
	return a2aPushConfig(out), nil
}

// GetTaskPushConfig answers a push config of one of the caller's tasks,
// without its token and credentials.
func (h *handler) GetTaskPushConfig(ctx context.Context, req *a2a.GetTaskPushConfigRequest) (*a2a.PushConfig, error) {
	c, d, err := h.pushable(ctx, req.Tenant, req.TaskID)
	if err != nil {
		return nil, err
	}
	out, err := h.g.cfg.Webhooks.PushConfig(ctx, c.p, d.ID, req.ID)
	if errors.Is(err, ledger.ErrNotFound) {
		return nil, errNoPushConfig()
	}
	if err != nil {
		return nil, h.fail(ctx, err)
	}
	return a2aPushConfig(out), nil
}

// ListTaskPushConfigs lists the push configs of one of the caller's
// tasks, oldest first, without their tokens and credentials: one page, a
// task having at most webhook.MaxPushConfigs.
func (h *handler) ListTaskPushConfigs(ctx context.Context, req *a2a.ListTaskPushConfigRequest) (*a2a.ListTaskPushConfigResponse, error) {
	c, d, err := h.pushable(ctx, req.Tenant, req.TaskID)
	if err != nil {
		return nil, err
	}
	cs, err := h.g.cfg.Webhooks.PushConfigs(ctx, c.p, d.ID)
	if err != nil {
		return nil, h.fail(ctx, err)
	}
	out := &a2a.ListTaskPushConfigResponse{Configs: make([]*a2a.PushConfig, 0, len(cs))}
	for _, pc := range cs {
		out.Configs = append(out.Configs, a2aPushConfig(pc))
	}
	return out, nil
}

// DeleteTaskPushConfig removes a push config of one of the caller's tasks
// and the pushes not yet delivered to it; an id the task does not have is
// no error, so a retried delete succeeds.
func (h *handler) DeleteTaskPushConfig(ctx context.Context, req *a2a.DeleteTaskPushConfigRequest) error {
	c, d, err := h.pushable(ctx, req.Tenant, req.TaskID)
	if err != nil {
		return err
	}
	if err := h.g.cfg.Webhooks.DeletePushConfig(ctx, c.p, d.ID, req.ID); err != nil {
		return h.fail(ctx, err)
	}
	return nil
}

// inlinePush is the push config a SendMessage request gives
// (configuration.taskPushNotificationConfig), or nil.
func inlinePush(req *a2a.SendMessageRequest) *a2a.PushConfig {
	if req.Config == nil {
		return nil
	}
	return req.Config.PushConfig
}

// sendWithPush is SendMessage with a push config: the config is checked
// first, so a refused one creates no task; the message is then sent as
// without it, and the config registered on the task it answers (id
// inlinePushID when it has none). It needs a token: the answer is the
// task, which cannot show one Quittance would make. A resend of the
// message is the same task and replaces the config.
func (h *handler) sendWithPush(ctx context.Context, req *a2a.SendMessageRequest) (a2a.SendMessageResult, error) {
	c, err := h.begin(ctx, req.Tenant)
	if err != nil {
		return nil, err
	}
	if h.g.cfg.Webhooks == nil {
		return nil, a2a.ErrPushNotificationNotSupported
	}
	in := *req.Config.PushConfig
	if in.ID == "" {
		in.ID = inlinePushID
	}
	if in.Token == "" {
		// The answer is the task: it could not show a token Quittance made.
		return nil, a2a.NewError(a2a.ErrInvalidParams, "a push notification config given with a message needs a token")
	}
	if err := h.g.cfg.Webhooks.CheckPushConfig(c.p, pushConfig(c, uuid.Nil, &in)); err != nil {
		return nil, h.fail(ctx, err)
	}
	plain, conf := *req, *req.Config
	conf.PushConfig, plain.Config = nil, &conf
	res, err := h.SendMessage(ctx, &plain)
	if err != nil {
		return nil, err
	}
	task, ok := res.(*a2a.Task)
	if !ok {
		return res, nil
	}
	did, err := uuid.Parse(string(task.ID))
	if err != nil {
		return nil, errTaskNotFound()
	}
	if _, err := h.g.cfg.Webhooks.PutPushConfig(ctx, c.p, pushConfig(c, did, &in)); err != nil {
		return nil, h.fail(ctx, err)
	}
	return res, nil
}

// PushRenderer renders the pushes of the gateway's tasks
// (webhook.PushRenderer): the webhook deliveries call it, so it is built
// before the gateway, on the services the gateway reads tasks through.
type PushRenderer struct {
	h *handler
}

// NewPushRenderer returns the renderer of pushes over ledger and
// orchestrator.
func NewPushRenderer(l *ledger.Service, o *delegate.Orchestrator, log *slog.Logger) *PushRenderer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &PushRenderer{h: &handler{g: &Gateway{cfg: Config{Ledger: l, Orchestrator: o, Log: log}}}}
}

// RenderPush is the body of a push of delegationID, a delegation of
// tenant: an A2A 1.0 StreamResponse with the task as the gateway shows it
// to the tenant now, as a2a-go v2's push sender sends an event; for a
// config of 0.3 (webhook.PushV03), the 0.3 task, as a2a-go v0.3's does.
func (r *PushRenderer) RenderPush(ctx context.Context, tenant string, delegationID uuid.UUID, version string) ([]byte, error) {
	p := ledger.Principal{Role: ledger.RoleOrchestrator, Tenant: tenant, Name: "gateway push"}
	d, err := r.h.g.cfg.Ledger.GetDelegation(ctx, p, delegationID)
	if err != nil {
		return nil, err
	}
	t, err := r.h.task(ctx, call{p: p, org: d.OrgID}, d)
	if err != nil {
		return nil, err
	}
	if version == webhook.PushV03 {
		return json.Marshal(v03TaskOf(t))
	}
	return json.Marshal(a2a.StreamResponse{Event: t})
}
