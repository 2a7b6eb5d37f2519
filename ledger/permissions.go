package ledger

import "slices"

// Action names something a principal may be allowed to do. The roles that
// may do each action are listed once, in actionRoles: the services refuse
// with Authorize, and the console asks Permits to decide which controls to
// show, so a control is never shown for an action the service would refuse.
type Action string

// The actions.
const (
	// ActionReadReports: reconciliation listings, summaries, anomalies,
	// evidence chains, budgets, scorecards, write-off listings and cases.
	ActionReadReports Action = "read_reports"
	// ActionRequestWriteOff: ask for an obligation to be written off.
	ActionRequestWriteOff Action = "request_write_off"
	// ActionDecideWriteOff: approve or reject another principal's pending
	// write-off.
	ActionDecideWriteOff Action = "decide_write_off"
	// ActionRevokeIdentity: revoke a remote org's agent identity.
	ActionRevokeIdentity Action = "revoke_identity"
	// ActionHandleCase: assign an owner, add a note, snooze a needs-action
	// entry.
	ActionHandleCase Action = "handle_case"
	// ActionRedriveWebhooks: put dead-lettered webhook deliveries back in
	// the queue.
	ActionRedriveWebhooks Action = "redrive_webhooks"
	// ActionRedriveCompensation: ask an org's agent for compensation again
	// for a compensation_unconfirmed obligation (compensation.Service.
	// Redrive), or for an extra remote task of a completed delegation whose
	// requests are exhausted (compensation.Service.RedriveExtraTask).
	ActionRedriveCompensation Action = "redrive_compensation"
	// ActionWriteOffExtraTask: accept that an extra remote task of a
	// completed delegation may keep its effects, ending its open
	// compensation (compensation.Service.WriteOffExtraTask).
	ActionWriteOffExtraTask Action = "write_off_extra_task"
	// ActionAcknowledgeRevokedRelease: acknowledge an obligation released
	// on a declaration of an identity revoked since (finance's call).
	ActionAcknowledgeRevokedRelease Action = "acknowledge_revoked_release"
	// ActionAdminister: budgets, orgs, task classes and tokens.
	ActionAdminister Action = "administer"
	// ActionUseConsole: sign in to the operator console, with a token or
	// through OpenID Connect (the roles a role map may name).
	ActionUseConsole Action = "use_console"
	// ActionReadAllEvents: read the event feed of every tenant.
	ActionReadAllEvents Action = "read_all_events"
	// ActionReadTenantEvents: read the event feed of the principal's own
	// tenant.
	ActionReadTenantEvents Action = "read_tenant_events"
)

// actionRoles is the one table of which roles may do what.
var actionRoles = map[Action][]Role{
	ActionReadReports:               {RoleFinance, RoleOncall},
	ActionRequestWriteOff:           {RoleOncall},
	ActionDecideWriteOff:            {RoleOncall},
	ActionRevokeIdentity:            {RoleOncall},
	ActionHandleCase:                {RoleOncall},
	ActionRedriveWebhooks:           {RoleOncall},
	ActionRedriveCompensation:       {RoleOncall},
	ActionWriteOffExtraTask:         {RoleOncall},
	ActionAdminister:                {RoleOncall},
	ActionAcknowledgeRevokedRelease: {RoleFinance},
	ActionUseConsole:                {RoleFinance, RoleOncall},
	ActionReadAllEvents:             {RoleFinance, RoleOncall},
	ActionReadTenantEvents:          {RoleOrchestrator},
}

// Permits reports whether the principal's role may do a. An unknown
// action is permitted to nobody.
func (p Principal) Permits(a Action) bool { return p.Role.Permits(a) }

// Permits reports whether the role may do a, for a role not yet held by a
// principal (a role map's). An unknown action is permitted to nobody.
func (r Role) Permits(a Action) bool {
	return slices.Contains(actionRoles[a], r)
}

// SameAccess reports whether q holds p's role and tenant: everything p may
// do and see was decided from those two, so a decision taken for p still
// holds for q.
func (p Principal) SameAccess(q Principal) bool {
	return p.Role == q.Role && p.Tenant == q.Tenant
}

// Authorize returns ErrForbidden unless the principal may do a.
func Authorize(p Principal, a Action) error {
	if p.Permits(a) {
		return nil
	}
	return ErrForbidden
}
