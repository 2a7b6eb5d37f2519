package ledger

import "fmt"

// EventType names what an event records. It is stored in events.type and
// published as the "type" of every event record (API, event streams,
// webhook deliveries), and it is part of each event's hash, so the names
// are part of the audit contract: a type may be added, never renamed,
// reused or removed.
//
// The constants below are the whole catalogue; each says which operation
// appends it and to which stream. A delegation's events are on its stream
// (DelegationStream: "delegation:<id>") and are written through Apply,
// when the change may move the obligation (the event then carries
// ObligationFrom and ObligationTo) or updates the delegation, or through
// Record, when the delegation does not change. Events of the other streams
// ("budget:<id>", "org:<id>", "task_class:<name>", "token:<id>") are
// written through Append.
type EventType string

// Events of a delegation's stream appended by this package.
const (
	// EventTypeDelegationCreated: Service.CreateDelegation recorded a new
	// delegation and placed its hold (the obligation starts held), in the
	// same transaction. It is the first event of the delegation's stream;
	// its data repeats the request, the mode ("record" or "dispatch") and
	// the links.
	EventTypeDelegationCreated EventType = "delegation_created"
	// EventTypeTaskStatusChanged: ObserveTaskStatus applied a new status of
	// the remote task, whoever observed it (an orchestrator's report, or a
	// push, poll, stream, dispatch, message or cancel reply of the A2A
	// workers). When the status is the first terminal one and the
	// obligation is held, the event carries its transition: to settled,
	// released, compensated (an atomic cancel-and-compensate receipt) or
	// revocation_pending_compensation (the gate applies).
	EventTypeTaskStatusChanged EventType = "task_status_changed"
	// EventTypeTaskStatusDuplicate: an observation repeated the status
	// already applied (the same terminal status again, or the same status
	// and message). No longer written: such an observation only moves the
	// delegation's LastObservedAt (polling an unchanged task once a minute
	// appended 1,440 of these a day, each fanned out to webhooks). The type
	// stays in the catalogue because streams recorded before have it.
	EventTypeTaskStatusDuplicate EventType = "task_status_duplicate"
	// EventTypeTaskStatusStale: ObserveTaskStatus received a status older
	// than the last applied one; its data has last_applied_at. Recorded,
	// not applied.
	EventTypeTaskStatusStale EventType = "task_status_stale"
	// EventTypeStatusConflict: ObserveTaskStatus received a different
	// status after a terminal one (a terminal status is immutable).
	// Recorded, not applied, and listed as an anomaly: it is the split
	// brain this service exists to expose.
	EventTypeStatusConflict EventType = "status_conflict"
	// EventTypeCancelRequested: Service.RequestCancel recorded the
	// orchestrator's first request to revoke the delegation (a second
	// request records nothing). It moves no obligation: only the remote
	// task's terminal status does.
	EventTypeCancelRequested EventType = "cancel_requested"
	// EventTypeHoldChanged: Service.ChangeHold raised or lowered the hold
	// of a held obligation; its data's hold has old_amount_minor,
	// new_amount_minor, and the movement (hold or return) and amount_minor
	// of the difference.
	EventTypeHoldChanged EventType = "hold_changed"
	// EventTypeTaskStatusReported: an orchestrator reported the remote
	// task's status on a delegation Quittance dispatched
	// (compensation.Service.ReportTaskStatus). It is the orchestrator's
	// word, recorded as it was said (state, timestamp, message,
	// settled_amount_minor): it changes neither the task status, nor the
	// obligation, nor the money, and asks Quittance to observe the task
	// itself (observe_requested).
	EventTypeTaskStatusReported EventType = "task_status_reported"
)

// Events of the registry streams appended by this package, one stream per
// budget, org, task class and token.
const (
	// EventTypeBudgetFunded: Service.PutBudget created a budget or set its
	// funding, on the budget's stream ("budget:<id>"), with the funded
	// amount and the change.
	EventTypeBudgetFunded EventType = "budget_funded"
	// EventTypeBudgetTenantsChanged: the tenants whose orchestrators may
	// hold on a budget changed (Service.PutBudget, at once under dev, or
	// the approval of a budget_tenants_update change), on the budget's
	// stream, with tenants, previous_tenants and pending_change_id.
	EventTypeBudgetTenantsChanged EventType = "budget_tenants_changed"
	// EventTypeOrgUpdated: Service.PutOrg registered or replaced a remote
	// org, on the org's stream ("org:<id>").
	EventTypeOrgUpdated EventType = "org_updated"
	// EventTypeOrgKeysFetched: the keys an org serves at its registered
	// JWKS URL changed, and the ledger's copy followed without approval
	// (Service.RefreshOrgKeys), on the org's stream, with keys_added and
	// keys_removed (kid and thumbprint).
	EventTypeOrgKeysFetched EventType = "org_keys_fetched"
	// EventTypeOrgCardChecked: a check of the org's agent card found it in
	// another state than the last (Service.ObserveAgentCard: unsigned,
	// verified, failed; pinned at its first verified use), on the org's
	// stream, with the card's key, params, reason and whether it is used.
	EventTypeOrgCardChecked EventType = "org_card_checked"
	// EventTypeOrgCardChangeDetected: the org's agent card is signed with
	// another key than the pinned one, or its compensation params changed;
	// it is not used until on-call accepts it (ledger/DESIGN.md §4.1).
	EventTypeOrgCardChangeDetected EventType = "org_card_change_detected"
	// EventTypeOrgCardAccepted: the card's key and params became the org's
	// pin (the approval of an org_card_accept change), with the previous
	// pin and pending_change_id.
	EventTypeOrgCardAccepted EventType = "org_card_accepted"
	// EventTypeTaskClassUpdated: Service.PutTaskClass registered or
	// replaced a task class, on its stream ("task_class:<name>").
	EventTypeTaskClassUpdated EventType = "task_class_updated"
	// EventTypeTaskClassPolicyUpdated: Service.PutTaskClassPolicy set
	// which task classes a tenant's orchestrators may use with an org, on
	// its stream ("task_class_policy:<org>/<tenant>"), with the classes.
	EventTypeTaskClassPolicyUpdated EventType = "task_class_policy_updated"
	// EventTypeTokenCreated: access.Service.CreateToken or EnsureToken issued an
	// API token, on the token's stream ("token:<id>"); never the secret.
	EventTypeTokenCreated EventType = "token_created"
)

// Events of the principal, credential and pending change streams
// ("principal:<id>", "token:<id>", "pending_change:<id>"), appended by
// this package through Append.
const (
	// EventTypePrincipalCreated: a principal (a person or a machine) was
	// created, at once or on the approval of a pending change, on its
	// stream ("principal:<id>"), with its kind, name, role and tenant.
	EventTypePrincipalCreated EventType = "principal_created"
	// EventTypePrincipalDisabled: Service.DisablePrincipal disabled a
	// principal, revoked every credential it had and withdrew its pending
	// changes (changes_withdrawn, each with its own change_refused).
	EventTypePrincipalDisabled EventType = "principal_disabled"
	// EventTypePrincipalRoleGranted: a principal was given another role
	// (on approval, or at once by the bootstrap principal under dev).
	EventTypePrincipalRoleGranted EventType = "principal_role_granted"
	// EventTypePrincipalOIDCLinked: an OpenID Connect identity was linked
	// to a person principal (on its confirmation from a session of the
	// identity, by that identity's principal, or at once by the bootstrap
	// principal under dev), on the principal's stream, with the identity
	// and the principal it signed in as before, if any.
	EventTypePrincipalOIDCLinked EventType = "principal_oidc_linked"
	// EventTypePrincipalNoIdentityProviderAccount: a person principal was
	// marked as having no identity-provider account (on approval, or at
	// once by the bootstrap principal under dev), on its stream.
	EventTypePrincipalNoIdentityProviderAccount EventType = "principal_no_identity_provider_account"
	// EventTypeTokenRevoked: an API credential was revoked (by itself, by
	// on-call, by a rotation, or because its principal was disabled), on
	// the credential's stream ("token:<id>").
	EventTypeTokenRevoked EventType = "token_revoked"
	// EventTypeChangeRequested: an on-call principal asked for a privileged
	// change (a person principal, a role, an org's keys, coordinator flag
	// or allowed hosts, a task class's gate or timeout); it waits, on its
	// stream ("pending_change:<id>"), for a different on-call principal.
	EventTypeChangeRequested EventType = "change_requested"
	// EventTypeChangeApproved: a different on-call principal approved a
	// pending change and it was applied in the same transaction.
	EventTypeChangeApproved EventType = "change_approved"
	// EventTypeChangeRefused: a pending change was refused (by an on-call
	// principal, because it could no longer apply, or withdrawn by the
	// disabling of its requester).
	EventTypeChangeRefused EventType = "change_refused"
	// EventTypeChangeExpired: a pending change was not decided in time
	// and will never apply.
	EventTypeChangeExpired EventType = "change_expired"
)

// Events of a delegation's stream appended by the compensation package:
// signed evidence, deadlines, identity revocation and write-offs.
const (
	// EventTypeCompensationAcked: a verified compensation ack (a signed
	// token over HTTP, or a receipt on Quittance's own A2A call) moved the
	// obligation from revocation_pending_compensation or
	// compensation_unconfirmed to compensated. A pending write-off is
	// voided with it (EventTypeWriteOffVoided).
	EventTypeCompensationAcked EventType = "compensation_acked"
	// EventTypeNoCompensationDeclared: a verified declaration that no
	// effects were committed (a signed no_compensation_required token, or a
	// no_effects receipt) moved the obligation from
	// revocation_pending_compensation or compensation_unconfirmed to
	// released. A pending write-off is voided with it.
	EventTypeNoCompensationDeclared EventType = "no_compensation_declared"
	// EventTypeLateEvidence: a verified ack, declaration or receipt arrived
	// after the obligation had ended (settled, released, compensated or
	// written off). Recorded with the token, never applied, and listed as
	// an anomaly; its data has contradicts_write_off: true when the
	// obligation was written off.
	EventTypeLateEvidence EventType = "late_evidence"
	// EventTypeTokenRefused: a signed ack or declaration refused, as
	// recorded before refused tokens stopped being events. Nothing writes
	// it any more — refusals are counted per (org, reason) instead
	// (TokenRefusal) — but chains recorded earlier hold it, so it is still
	// read, verified and listed as an anomaly.
	EventTypeTokenRefused EventType = "token_refused"
	// EventTypeEvidenceReceived: verified compensation evidence (an ack or
	// a declaration) arrived while the obligation was still held, before
	// the remote task's gating terminal status was observed. It is kept as
	// received (compensation.ApplyEvidence) and applied when that status is
	// observed; nothing moves now.
	EventTypeEvidenceReceived EventType = "evidence_received"
	// EventTypeEvidenceConflict: verified evidence carried the delegation's
	// compensation idempotency key with another payload (another receipt
	// id, or the other kind) than the evidence already accepted for that
	// key. Refused (422 evidence_conflict), recorded with the token's
	// sha256, and listed as an anomaly.
	EventTypeEvidenceConflict EventType = "evidence_conflict"
	// EventTypeEarlyEvidenceUnused: evidence received while the
	// obligation was held was not applied, because the task ended in a way
	// that does not call for compensation (completed, rejected, or the
	// gate did not apply). Recorded with the terminal status and listed as
	// an anomaly.
	EventTypeEarlyEvidenceUnused EventType = "early_evidence_unused"
	// EventTypeDeadlinePassed: the sweep found the compensation deadline of
	// a revocation_pending_compensation obligation passed and moved it to
	// compensation_unconfirmed; the hold stays.
	EventTypeDeadlinePassed EventType = "compensation_deadline_passed"
	// EventTypeIdentityRevoked: on-call revoked the org's agent identity
	// while the obligation was open (held, revocation_pending_compensation
	// or compensation_unconfirmed); it moved to escalated. Appended to each
	// such delegation, with one EventTypeOrgIdentityRevoked on the org's
	// stream.
	EventTypeIdentityRevoked EventType = "identity_revoked"
	// EventTypeOrgIdentityRevoked: on-call revoked the org's agent
	// identity, on the org's stream ("org:<id>"), with the reason and the
	// number of obligations escalated.
	EventTypeOrgIdentityRevoked EventType = "org_identity_revoked"
	// EventTypeReleasedOnRevokedIdentity: the org's identity was revoked
	// after the obligation was released on its declaration; the release is
	// surfaced for finance until acknowledged. It moves no obligation.
	EventTypeReleasedOnRevokedIdentity EventType = "released_on_revoked_identity"
	// EventTypeRevokedReleaseAcknowledged: finance acknowledged a release
	// on a revoked identity, with a note. It moves no obligation.
	EventTypeRevokedReleaseAcknowledged EventType = "revoked_release_acknowledged"
	// EventTypeWriteOffThresholdChanged: the write-off approval threshold
	// changed (on a second on-call principal's approval), on the stream
	// "write_off_threshold".
	EventTypeWriteOffThresholdChanged EventType = "write_off_threshold_changed"
	// EventTypeWriteOffRequested: an on-call write-off above the threshold
	// waits for a second on-call principal to approve it. It moves no
	// obligation.
	EventTypeWriteOffRequested EventType = "write_off_requested"
	// EventTypeWriteOffExecuted: a write-off was executed, at once (at or
	// below the threshold) or on a second principal's approval: the
	// obligation moved to written_off and the hold is lost.
	EventTypeWriteOffExecuted EventType = "write_off_executed"
	// EventTypeWriteOffVoided: a pending write-off was voided, because
	// evidence discharged the obligation first or because, at approval, the
	// obligation had left the states a write-off applies to.
	EventTypeWriteOffVoided EventType = "write_off_voided"
	// EventTypeWriteOffRefused: an on-call request to write off was refused
	// because of the obligation's state, or an approval was refused
	// (self-approval, a write-off not pending). Recorded in a transaction
	// of its own after the refused one rolled back, with the refusal code.
	EventTypeWriteOffRefused EventType = "write_off_refused"
)

// Events of a delegation's stream appended by the A2A workers of the
// delegate package (actor "system:a2a", except a queued message, which is
// the orchestrator's).
const (
	// EventTypeTaskDispatched: the dispatch job sent the delegated message
	// and the remote created a task; its id, context id and protocol
	// version are recorded on the delegation.
	EventTypeTaskDispatched EventType = "task_dispatched"
	// EventTypeDispatchFailed: the dispatch job gave up (the org's identity
	// is revoked, the message is invalid, the agent is unavailable, the
	// send failed); the hold stays until on-call acts.
	EventTypeDispatchFailed EventType = "dispatch_failed"
	// EventTypeCancelRefused: the cancel job's CancelTask was answered with
	// TaskNotCancelableError; the hold stays and the task is fetched again.
	EventTypeCancelRefused EventType = "cancel_refused"
	// EventTypeCancelFailed: the cancel job gave up (no remote task to
	// cancel, or an error that is not retried); the hold stays.
	EventTypeCancelFailed EventType = "cancel_failed"
	// EventTypePushRefused: a push notification with a valid token named
	// another task than the delegation's.
	EventTypePushRefused EventType = "push_refused"
	// EventTypeRemoteTaskConflict: the remote answered a dispatch, a fetch
	// or a cancel with a task that is not the delegation's, or one already
	// recorded on another delegation (of any tenant, when it would resolve
	// a dispatch_unknown delegation), or on-call named a task the org's
	// agent shows is not the delegation's (source oncall). Nothing is
	// applied.
	EventTypeRemoteTaskConflict EventType = "remote_task_conflict"
	// EventTypeReceiptRefused: an atomic compensation receipt on a task (a
	// cancel reply, or the task as fetched) proved nothing (the data says
	// why); the status is applied without it.
	EventTypeReceiptRefused EventType = "compensation_receipt_refused"
	// EventTypeCompensationRequested: the compensation job sent (or resent
	// after a failure) a compensation request to the org's agent; the
	// attempt is counted on the delegation.
	EventTypeCompensationRequested EventType = "compensation_requested"
	// EventTypeCompensationRequestFailed: a compensation attempt failed
	// (the call failed, the remote answered failed, or its receipt was
	// refused); it is retried with backoff.
	EventTypeCompensationRequestFailed EventType = "compensation_request_failed"
	// EventTypeCompensationRetriesExhausted: the last compensation attempt
	// failed; a revocation_pending_compensation obligation moved to
	// compensation_unconfirmed, and the hold stays.
	EventTypeCompensationRetriesExhausted EventType = "compensation_retries_exhausted"
	// EventTypeCompensationNotSupported: the org's agent answered a
	// compensation request with a not_supported receipt: nobody will send
	// an ack. A revocation_pending_compensation obligation moves to
	// compensation_unconfirmed at once, with the reason, the hold stays,
	// and no more requests are sent (on-call may redrive).
	EventTypeCompensationNotSupported EventType = "compensation_not_supported"
	// EventTypeMessageQueued: the orchestrator answered the remote task
	// (Worker.Continue); the follow-up message waits in the outbox.
	EventTypeMessageQueued EventType = "task_message_queued"
	// EventTypeMessageSent: the message job delivered a follow-up message
	// to the remote task.
	EventTypeMessageSent EventType = "task_message_sent"
	// EventTypeMessageFailed: the remote refused a follow-up message, or it
	// could not be delivered; Quittance stopped trying.
	EventTypeMessageFailed EventType = "task_message_failed"
	// EventTypeDispatchUnknown: a dispatch attempt after one that may have
	// reached the agent got a refusal or a direct message reply, or the
	// dispatch gave up after such an attempt: nothing proves whether the
	// remote created a task. The hold stays active and the delegation is
	// in the dispatch_unknown condition (listed by GET
	// /v1/obligations?condition=dispatch_unknown) until a task id is
	// recorded or a person decides. Listed as an anomaly.
	EventTypeDispatchUnknown EventType = "dispatch_unknown"
	// EventTypeRemoteTaskNotFound: the remote answered a call about a task
	// Quittance knows with TaskNotFoundError (it may have purged it). It
	// is recorded and never read as canceled or rejected: the hold stays.
	EventTypeRemoteTaskNotFound EventType = "remote_task_not_found"
	// EventTypeCompensationRedriven: on-call redrove compensation for a
	// compensation_unconfirmed obligation: the attempt count is reset and
	// a new round of requests, with the same idempotency key, is queued.
	// The obligation stays compensation_unconfirmed until evidence arrives.
	EventTypeCompensationRedriven EventType = "compensation_redriven"
	// EventTypeDispatchResolved: the remote task of a dispatch_unknown
	// delegation was recorded — by on-call as the remote org named it,
	// with a reason (found_by oncall), or by a lookup or a push — once the
	// org's agent showed it is the delegation's (proven_by message_id or
	// context). The condition ends and the task is tracked from then on as
	// if the dispatch had answered; the hold and the obligation do not
	// move, and after on-call's the task's first end does not release.
	EventTypeDispatchResolved EventType = "dispatch_resolved"
	// EventTypeRemoteTaskFound: the org's agent created another task for
	// the delegation than the one it tracks — a second task on a resend of
	// the dispatch or of a compensation request, found by ListTasks on the
	// delegation's context or by a push or stream event naming it. The
	// task is recorded on the delegation (its remote tasks), canceled and
	// named in the compensation request; the obligation does not close
	// while it is unaccounted for.
	EventTypeRemoteTaskFound EventType = "remote_task_found"
	// EventTypeRemoteTaskEnded: an extra remote task of the delegation
	// reached a terminal status (after Quittance canceled it, or on its
	// own).
	EventTypeRemoteTaskEnded EventType = "remote_task_ended"
	// EventTypeExtraTaskCompensationRequired: the delegation's tracked
	// task completed and settled the obligation, but an extra remote task
	// of it may have committed effects of its own (it did not end
	// rejected, nor canceled or failed where the gate does not apply):
	// compensation of that task is requested over A2A under a key of its
	// own. It is an extra_task_compensation anomaly until the task's
	// compensation is resolved (extra_task_compensated or
	// extra_task_written_off). The hold does not move.
	EventTypeExtraTaskCompensationRequired EventType = "extra_task_compensation_required"
	// EventTypeExtraTaskCompensated: a receipt on Quittance's request
	// proved an extra task of a settled delegation compensated, or free of
	// effects (a verified declaration); the anomaly ends. The hold does not
	// move.
	EventTypeExtraTaskCompensated EventType = "extra_task_compensated"
	// EventTypeExtraTaskCompensationExhausted: the compensation requests
	// for an extra task of a settled delegation brought no receipt after
	// every attempt; no more are sent, and the anomaly stays until on-call
	// writes the task off.
	EventTypeExtraTaskCompensationExhausted EventType = "extra_task_compensation_exhausted"
	// EventTypeExtraTaskCompensationRedriven: on-call, with a reason,
	// asked again for the compensation of an extra task of a settled
	// delegation whose requests were exhausted: its attempt count is reset
	// and the compensation request job is queued again, under the task's
	// own idempotency key. The anomaly stays open until a receipt resolves
	// it or on-call writes the task off. The hold does not move.
	EventTypeExtraTaskCompensationRedriven EventType = "extra_task_compensation_redriven"
	// EventTypeExtraTaskWrittenOff: on-call accepted, with a reason, that
	// the effects of an extra task of a settled delegation may stand; the
	// anomaly ends. No money moves.
	EventTypeExtraTaskWrittenOff EventType = "extra_task_written_off"
)

// Events of a delegation's stream appended by case handling (Cases, with
// Record: the delegation and its hold never move) and by the rejection of
// a write-off.
const (
	// EventTypeCaseOwnerAssigned: on-call took (or gave up, with an empty
	// owner) ownership of the obligation; its data has the owner and the
	// previous owner.
	EventTypeCaseOwnerAssigned EventType = "case_owner_assigned"
	// EventTypeCaseNoteAdded: on-call added a note to the obligation; its
	// data holds the note.
	EventTypeCaseNoteAdded EventType = "case_note_added"
	// EventTypeCaseSnoozed: on-call snoozed the obligation's needs-action
	// entry until a time, or woke it (until null). The hold does not move
	// and reports still list the obligation.
	EventTypeCaseSnoozed EventType = "case_snoozed"
	// EventTypeWriteOffRejected: a second on-call principal rejected a
	// pending write-off, with a reason (compensation.RejectWriteOff). The
	// obligation stays where it was and its hold stays active.
	EventTypeWriteOffRejected EventType = "write_off_rejected"
	// EventTypeWebhookDeliveriesRedriven: on-call put dead-lettered webhook
	// deliveries back in the queue (webhook.Service.Redrive), on the
	// "webhooks" stream, with the tenant and endpoint_id asked for (empty:
	// all) and how many were dead (redriven).
	EventTypeWebhookDeliveriesRedriven EventType = "webhook_deliveries_redriven"
)

// eventTypes is the catalogue, in the order of the declarations above.
var eventTypes = []EventType{
	EventTypeDelegationCreated, EventTypeTaskStatusChanged, EventTypeTaskStatusDuplicate,
	EventTypeTaskStatusStale, EventTypeStatusConflict, EventTypeCancelRequested,

	EventTypeBudgetFunded, EventTypeBudgetTenantsChanged, EventTypeOrgUpdated, EventTypeOrgKeysFetched,
	EventTypeOrgCardChecked, EventTypeOrgCardChangeDetected, EventTypeOrgCardAccepted, EventTypeTaskClassUpdated, EventTypeTaskClassPolicyUpdated,
	EventTypeTokenCreated,

	EventTypePrincipalCreated, EventTypePrincipalDisabled, EventTypePrincipalRoleGranted, EventTypePrincipalOIDCLinked, EventTypePrincipalNoIdentityProviderAccount, EventTypeTokenRevoked,
	EventTypeChangeRequested, EventTypeChangeApproved, EventTypeChangeRefused, EventTypeChangeExpired,

	EventTypeCompensationAcked, EventTypeNoCompensationDeclared, EventTypeLateEvidence,
	EventTypeTokenRefused, EventTypeEvidenceReceived, EventTypeEvidenceConflict, EventTypeEarlyEvidenceUnused,
	EventTypeDeadlinePassed, EventTypeIdentityRevoked, EventTypeOrgIdentityRevoked,
	EventTypeReleasedOnRevokedIdentity, EventTypeRevokedReleaseAcknowledged, EventTypeWriteOffThresholdChanged,
	EventTypeWriteOffRequested, EventTypeWriteOffExecuted, EventTypeWriteOffVoided, EventTypeWriteOffRefused,

	EventTypeTaskDispatched, EventTypeDispatchFailed, EventTypeCancelRefused, EventTypeCancelFailed,
	EventTypePushRefused, EventTypeRemoteTaskConflict, EventTypeReceiptRefused,
	EventTypeCompensationRequested, EventTypeCompensationRequestFailed, EventTypeCompensationRetriesExhausted,
	EventTypeCompensationNotSupported,
	EventTypeMessageQueued, EventTypeMessageSent, EventTypeMessageFailed,

	EventTypeCaseOwnerAssigned, EventTypeCaseNoteAdded, EventTypeCaseSnoozed, EventTypeWriteOffRejected,
	EventTypeDispatchUnknown, EventTypeRemoteTaskNotFound, EventTypeCompensationRedriven, EventTypeDispatchResolved,
	EventTypeHoldChanged, EventTypeTaskStatusReported, EventTypeRemoteTaskFound, EventTypeRemoteTaskEnded,
	EventTypeExtraTaskCompensationRequired, EventTypeExtraTaskCompensated, EventTypeExtraTaskCompensationExhausted,
	EventTypeExtraTaskWrittenOff, EventTypeExtraTaskCompensationRedriven,
	EventTypeWebhookDeliveriesRedriven,
}

// EventTypes returns every event type of the catalogue, in a new slice.
func EventTypes() []EventType { return append([]EventType(nil), eventTypes...) }

// Known reports whether t is in the catalogue.
func (t EventType) Known() bool {
	for _, known := range eventTypes {
		if t == known {
			return true
		}
	}
	return false
}

// ParseEventType accepts exactly the names of the catalogue: it is the one
// check of an event type a client names (a webhook subscription's filter).
func ParseEventType(raw string) (EventType, error) {
	if t := EventType(raw); t.Known() {
		return t, nil
	}
	return "", fmt.Errorf("unknown event type %q", raw)
}
