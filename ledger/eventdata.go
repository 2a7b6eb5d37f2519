package ledger

import (
	"encoding/json"
	"fmt"
	"time"
)

// EventPayload is the data of one event type: one struct of this file per
// type of the catalogue (eventtype.go), in the same order. An event's data
// is only ever built from them (Append, Record and Apply take nothing
// else), so what an event type carries is written down once, as Go, and
// the json tags are the member names of the audit contract.
//
// A member the data of a type has only sometimes is omitempty when it is
// absent exactly when it is empty, and a pointer when it may be present
// and empty. Apply adds the obligation members (obligation_event, reason,
// hold, compensation, settled_amount_minor, reversed_amount_minor) to the
// data of the event it appends, over the payload's.
//
// EventPayload is implemented by the types of this file alone.
type EventPayload interface {
	// EventType is the type of the events whose data the payload is.
	EventType() EventType
	eventPayload()
}

// eventPayloads is one value of every payload type, in the order of the
// catalogue: the test checks it names every event type once.
var eventPayloads = []EventPayload{
	DelegationCreatedData{}, TaskStatusChangedData{}, TaskStatusDuplicateData{}, TaskStatusStaleData{}, StatusConflictData{},
	CancelRequestedData{}, HoldChangedData{}, TaskStatusReportedData{},

	BudgetFundedData{}, BudgetTenantsChangedData{}, OrgUpdatedData{}, OrgKeysFetchedData{}, TaskClassUpdatedData{},
	TaskClassPolicyUpdatedData{}, TokenCreatedData{},

	PrincipalCreatedData{}, PrincipalDisabledData{}, PrincipalRoleGrantedData{}, PrincipalOIDCLinkedData{},
	PrincipalNoIdentityProviderAccountData{}, TokenRevokedData{}, ChangeRequestedData{}, ChangeApprovedData{}, ChangeRefusedData{},
	ChangeExpiredData{},

	CompensationAckedData{}, NoCompensationDeclaredData{}, LateEvidenceData{}, TokenRefusedData{}, EvidenceReceivedData{},
	EvidenceConflictData{}, EarlyEvidenceUnusedData{}, DeadlinePassedData{}, IdentityRevokedData{}, OrgIdentityRevokedData{},
	ReleasedOnRevokedIdentityData{}, RevokedReleaseAcknowledgedData{}, WriteOffThresholdChangedData{}, WriteOffRequestedData{},
	WriteOffExecutedData{}, WriteOffVoidedData{}, WriteOffRefusedData{},

	TaskDispatchedData{}, DispatchFailedData{}, CancelRefusedData{}, CancelFailedData{}, PushRefusedData{}, RemoteTaskConflictData{},
	ReceiptRefusedData{}, CompensationRequestedData{}, CompensationRequestFailedData{}, CompensationRetriesExhaustedData{},
	CompensationNotSupportedData{}, MessageQueuedData{}, MessageSentData{}, MessageFailedData{}, DispatchUnknownData{},
	RemoteTaskNotFoundData{}, CompensationRedrivenData{}, DispatchResolvedData{}, RemoteTaskFoundData{}, RemoteTaskEndedData{},
	ExtraTaskCompensationRequiredData{}, ExtraTaskCompensatedData{}, ExtraTaskCompensationExhaustedData{},
	ExtraTaskCompensationRedrivenData{}, ExtraTaskWrittenOffData{},

	CaseOwnerAssignedData{}, CaseNoteAddedData{}, CaseSnoozedData{}, WriteOffRejectedData{}, WebhookDeliveriesRedrivenData{},
}

// Events of a delegation's stream appended by this package.

// DelegationCreatedData is the data of delegation_created: the request, the
// mode ("record" or "dispatch") and the links.
type DelegationCreatedData struct {
	BusinessOperationID string `json:"business_operation_id"`
	OrgID               string `json:"org_id"`
	TaskClass           string `json:"task_class"`
	BudgetID            string `json:"budget_id"`
	AmountMinor         int64  `json:"amount_minor"`
	Currency            string `json:"currency"`
	RemoteTaskID        string `json:"remote_task_id"`
	RemoteContextID     string `json:"remote_context_id"`
	Mode                string `json:"mode"`
	// ContextFrom is the delegation whose context this one continues.
	ContextFrom string `json:"context_from,omitempty"`
	// References are the delegations this one refers to.
	References []string `json:"references,omitempty"`
}

// TaskObservation is what every event of an observed task status carries:
// the status, its time (the observer's, else Quittance's), the status
// before it, and the message, channel and reported time when there are.
type TaskObservation struct {
	State             string `json:"state"`
	Timestamp         string `json:"timestamp"`
	Previous          string `json:"previous"`
	Message           string `json:"message,omitempty"`
	Source            string `json:"source,omitempty"`
	ReportedTimestamp string `json:"reported_timestamp,omitempty"`
}

// TaskStatusChangedData is the data of task_status_changed: the observation
// and, for the first terminal status of a held obligation, whether the gate
// applies and what the evidence function added.
type TaskStatusChangedData struct {
	TaskObservation
	// GateApplies is set for a terminal status of a held obligation.
	GateApplies *bool `json:"gate_applies,omitempty"`
	// ExtraRemoteTasks are the delegation's other remote tasks, when a
	// gated end waits for their compensation too.
	ExtraRemoteTasks []string `json:"extra_remote_tasks,omitempty"`
	// ResolvedByPerson says the gate applies because one on-call person
	// named the task of an unknown dispatch.
	ResolvedByPerson bool `json:"resolved_by_person,omitempty"`
	// AppliedEvidence is the evidence received early that the status applies.
	*AppliedEvidence
	TokenAcceptance
}

// AppliedEvidence is compensation evidence received while the obligation was
// held, as an event that applies or sets it aside records it.
type AppliedEvidence struct {
	Receipt         json.RawMessage `json:"receipt"`
	EvidenceData    json.RawMessage `json:"evidence_data"`
	EvidenceChannel string          `json:"evidence_channel"`
}

// TaskStatusDuplicateData is the data of task_status_duplicate, no longer
// written: the observation repeated.
type TaskStatusDuplicateData TaskObservation

// TaskStatusStaleData is the data of task_status_stale: the observation, older
// than the status applied at last_applied_at.
type TaskStatusStaleData struct {
	TaskObservation
	LastAppliedAt string `json:"last_applied_at"`
}

// StatusConflictData is the data of status_conflict: a different status
// observed after a terminal one.
type StatusConflictData TaskObservation

// CancelRequestedData is the data of cancel_requested: nothing.
type CancelRequestedData struct{}

// HoldChangedData is the data of hold_changed: Apply adds the hold's change.
type HoldChangedData struct{}

// TaskStatusReportedData is the data of task_status_reported: an
// orchestrator's report on a dispatched delegation, as it was said, with
// the task status and obligation state it met.
type TaskStatusReportedData struct {
	State              string `json:"state"`
	Source             string `json:"source"`
	TaskStatus         string `json:"task_status"`
	ObligationState    string `json:"obligation_state"`
	Timestamp          string `json:"timestamp,omitempty"`
	ReportedTimestamp  string `json:"reported_timestamp,omitempty"`
	Message            string `json:"message,omitempty"`
	SettledAmountMinor *int64 `json:"settled_amount_minor,omitempty"`
	// ObserveRequested says Quittance queued an observation of the task.
	ObserveRequested bool `json:"observe_requested"`
}

// Events of the registry streams.

// BudgetFundedData is the data of budget_funded.
type BudgetFundedData struct {
	Currency    string `json:"currency"`
	FundedMinor int64  `json:"funded_minor"`
	DeltaMinor  int64  `json:"delta_minor"`
}

// BudgetTenantsChangedData is the data of budget_tenants_changed.
type BudgetTenantsChangedData struct {
	Tenants         []string `json:"tenants"`
	PreviousTenants []string `json:"previous_tenants"`
	PendingChangeID string   `json:"pending_change_id,omitempty"`
}

// OrgUpdatedData is the data of org_updated.
type OrgUpdatedData struct {
	Name              string   `json:"name"`
	SharedCoordinator bool     `json:"shared_coordinator"`
	JWKSRegistered    bool     `json:"jwks_registered"`
	AgentCardURL      string   `json:"agent_card_url"`
	AllowedHosts      []string `json:"allowed_hosts"`
	JWKSURL           string   `json:"jwks_url,omitempty"`
	KeysAdded         []KeyRef `json:"keys_added,omitempty"`
	KeysRemoved       []KeyRef `json:"keys_removed,omitempty"`
	PendingChangeID   string   `json:"pending_change_id,omitempty"`
}

// OrgKeysFetchedData is the data of org_keys_fetched.
type OrgKeysFetchedData struct {
	JWKSURL     string   `json:"jwks_url"`
	KeysAdded   []KeyRef `json:"keys_added,omitempty"`
	KeysRemoved []KeyRef `json:"keys_removed,omitempty"`
}

// TaskClassUpdatedData is the data of task_class_updated.
type TaskClassUpdatedData struct {
	EffectCapable       bool         `json:"effect_capable"`
	GateOn              []TaskStatus `json:"gate_on"`
	CompensationTimeout string       `json:"compensation_timeout"`
	PendingChangeID     string       `json:"pending_change_id,omitempty"`
}

// TaskClassPolicyUpdatedData is the data of task_class_policy_updated.
type TaskClassPolicyUpdatedData struct {
	OrgID           string   `json:"org_id"`
	Tenant          string   `json:"tenant"`
	Classes         []string `json:"classes"`
	PendingChangeID string   `json:"pending_change_id,omitempty"`
}

// TokenCreatedData is the data of token_created; never the secret.
type TokenCreatedData struct {
	Name            string `json:"name"`
	Role            string `json:"role"`
	Tenant          string `json:"tenant"`
	PrincipalID     string `json:"principal_id"`
	PrincipalName   string `json:"principal_name"`
	ExpiresAt       string `json:"expires_at,omitempty"`
	PendingChangeID string `json:"pending_change_id,omitempty"`
}

// Events of the principal, credential and pending change streams.

// PrincipalCreatedData is the data of principal_created. CreatedBy is a
// principal id, or "identity_provider" with the identity's issuer and
// subject for a person an OpenID Connect sign-in created.
type PrincipalCreatedData struct {
	Kind            string `json:"kind"`
	Name            string `json:"name"`
	Role            string `json:"role"`
	Tenant          string `json:"tenant"`
	Bootstrap       bool   `json:"bootstrap"`
	CreatedBy       string `json:"created_by,omitempty"`
	PendingChangeID string `json:"pending_change_id,omitempty"`
	Issuer          string `json:"issuer,omitempty"`
	Subject         string `json:"subject,omitempty"`
}

// PrincipalDisabledData is the data of principal_disabled.
type PrincipalDisabledData struct {
	Reason             string `json:"reason"`
	CredentialsRevoked int64  `json:"credentials_revoked"`
	ChangesWithdrawn   int    `json:"changes_withdrawn"`
}

// PrincipalRoleGrantedData is the data of principal_role_granted; the issuer
// and subject of the identity whose provider granted it, if one did.
type PrincipalRoleGrantedData struct {
	RoleGranted     string `json:"role_granted"`
	PreviousRole    string `json:"previous_role"`
	Tenant          string `json:"tenant"`
	PendingChangeID string `json:"pending_change_id,omitempty"`
	Issuer          string `json:"issuer,omitempty"`
	Subject         string `json:"subject,omitempty"`
}

// PrincipalOIDCLinkedData is the data of principal_oidc_linked. SamePerson is
// the principal the identity signed in as before, if any.
type PrincipalOIDCLinkedData struct {
	Issuer          string `json:"issuer"`
	Subject         string `json:"subject"`
	SamePerson      string `json:"same_person,omitempty"`
	PendingChangeID string `json:"pending_change_id,omitempty"`
}

// PrincipalNoIdentityProviderAccountData is the data of
// principal_no_identity_provider_account.
type PrincipalNoIdentityProviderAccountData struct {
	PendingChangeID string `json:"pending_change_id,omitempty"`
}

// TokenRevokedData is the data of token_revoked.
type TokenRevokedData struct {
	PrincipalID string `json:"principal_id"`
	Reason      string `json:"reason"`
}

// ChangeRequestedData is the data of change_requested.
type ChangeRequestedData struct {
	Kind      string `json:"kind"`
	Target    string `json:"target"`
	Summary   string `json:"summary"`
	ExpiresAt string `json:"expires_at"`
}

// ChangeDecision is what the event of a pending change's end carries.
type ChangeDecision struct {
	Kind   string `json:"kind"`
	Target string `json:"target"`
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
}

// ChangeApprovedData is the data of change_approved.
type ChangeApprovedData ChangeDecision

// ChangeRefusedData is the data of change_refused.
type ChangeRefusedData ChangeDecision

// ChangeExpiredData is the data of change_expired.
type ChangeExpiredData ChangeDecision

// changeDecided is the data of the event of type typ that ends a pending
// change as d says.
func changeDecided(typ EventType, d ChangeDecision) (EventPayload, error) {
	switch typ {
	case EventTypeChangeApproved:
		return ChangeApprovedData(d), nil
	case EventTypeChangeRefused:
		return ChangeRefusedData(d), nil
	case EventTypeChangeExpired:
		return ChangeExpiredData(d), nil
	}
	return nil, fmt.Errorf("%s does not end a pending change", typ)
}

// Events of a delegation's stream appended by the compensation package.

// TokenRecord is the record of a signed token on every event that stores
// it: its jti, sha256 and the key that verified it.
type TokenRecord struct {
	JTI           string `json:"jti"`
	TokenSHA256   string `json:"token_sha256"`
	KeyID         string `json:"kid"`
	KeyThumbprint string `json:"key_thumbprint"`
}

// TokenAcceptance is how the ledger accepted a stored token: as which kind
// and when (TokenKindKey, TokenAcceptedAtKey). Both are empty on an event
// that stores no token.
type TokenAcceptance struct {
	TokenKind       string `json:"token_kind,omitempty"`
	TokenAcceptedAt string `json:"token_accepted_at,omitempty"`
}

// NewTokenAcceptance is the acceptance of a token as kind at acceptedAt.
func NewTokenAcceptance(kind string, acceptedAt time.Time) TokenAcceptance {
	return TokenAcceptance{TokenKind: kind, TokenAcceptedAt: acceptedAt.UTC().Format(time.RFC3339Nano)}
}

// ReceiptFacts is what an A2A compensation receipt says, on the events of
// evidence it carried.
type ReceiptFacts struct {
	Outcome string `json:"outcome"`
	TaskID  string `json:"task_id"`
}

// EvidenceRecord is the data of the events of verified compensation
// evidence: the channel; what a signed token claims, with its record and
// acceptance; what a receipt says; and what the event adds. Every member
// may be absent: evidence applied after it was held (Held) keeps what was
// stored then, under the members set here.
type EvidenceRecord struct {
	// Held is the data stored with evidence held as received
	// (StoredEvidence.Data): the members of the event's data before the
	// others.
	Held    json.RawMessage `json:"-"`
	Channel string          `json:"channel,omitempty"`
	*ReceiptFacts
	ReceiptID *string `json:"receipt_id,omitempty"`
	*TokenRecord
	TokenAcceptance
	Kind                string `json:"kind,omitempty"`
	Issuer              string `json:"iss,omitempty"`
	Subject             string `json:"sub,omitempty"`
	IssuedAt            string `json:"iat,omitempty"`
	Expiry              string `json:"exp,omitempty"`
	IdempotencyKey      string `json:"idempotency_key,omitempty"`
	ReversedAmountMinor *int64 `json:"reversed_amount_minor,omitempty"`
	// HeldFor and OpenRemoteTasks say why evidence was held, not applied.
	HeldFor         string   `json:"held_for,omitempty"`
	OpenRemoteTasks []string `json:"open_remote_tasks,omitempty"`
	// ObligationState and ContradictsWriteOff are late evidence's.
	ObligationState     string `json:"obligation_state,omitempty"`
	ContradictsWriteOff *bool  `json:"contradicts_write_off,omitempty"`
	// ReceivedAt and EvidenceChannel are held evidence's, once applied.
	ReceivedAt      string `json:"received_at,omitempty"`
	EvidenceChannel string `json:"evidence_channel,omitempty"`
}

func (d EvidenceRecord) held() json.RawMessage { return d.Held }

// CompensationAckedData is the data of compensation_acked.
type CompensationAckedData struct{ EvidenceRecord }

// NoCompensationDeclaredData is the data of no_compensation_declared.
type NoCompensationDeclaredData struct{ EvidenceRecord }

// LateEvidenceData is the data of late_evidence.
type LateEvidenceData struct{ EvidenceRecord }

// TokenRefusedData is the data of token_refused, no longer written: refused
// tokens are counted (TokenRefusal). Its events are read as stored.
type TokenRefusedData struct{ EvidenceRecord }

// EvidenceReceivedData is the data of evidence_received.
type EvidenceReceivedData struct{ EvidenceRecord }

// EvidenceDischarged is the data of the event evidence of kind ev
// discharges an obligation with: compensation_acked, or
// no_compensation_declared for a declaration.
func EvidenceDischarged(ev ObligationEvent, d EvidenceRecord) EventPayload {
	if ev == EventDeclarationVerified {
		return NoCompensationDeclaredData{d}
	}
	return CompensationAckedData{d}
}

// EvidenceConflictData is the data of evidence_conflict: the refusal, the
// receipt id and the token's record (TokenSHA256 whenever there is a
// token, the rest when it was verified).
type EvidenceConflictData struct {
	Code        string `json:"code"`
	Detail      string `json:"detail"`
	Channel     string `json:"channel"`
	Kind        string `json:"kind"`
	ReceiptID   string `json:"receipt_id"`
	TokenSHA256 string `json:"token_sha256,omitempty"`
	*TokenRecord
	TokenAcceptance
}

// EarlyEvidenceUnusedData is the data of early_evidence_unused.
type EarlyEvidenceUnusedData struct {
	State           string          `json:"state"`
	ObligationState string          `json:"obligation_state"`
	EvidenceData    json.RawMessage `json:"evidence_data"`
	EvidenceChannel string          `json:"evidence_channel"`
	ReceivedAt      string          `json:"received_at"`
	TokenAcceptance
}

// DeadlinePassedData is the data of compensation_deadline_passed.
type DeadlinePassedData struct {
	Deadline       string `json:"deadline"`
	IdempotencyKey string `json:"idempotency_key"`
	HoldAmount     int64  `json:"hold_amount"`
}

// IdentityRevokedData is the data of identity_revoked.
type IdentityRevokedData struct {
	OrgID            string `json:"org_id"`
	RevocationReason string `json:"revocation_reason"`
}

// OrgIdentityRevokedData is the data of org_identity_revoked: the reason and
// how many obligations were escalated and releases surfaced.
type OrgIdentityRevokedData struct {
	Reason                    string `json:"reason"`
	Escalated                 int    `json:"escalated"`
	ReleasedOnRevokedIdentity int    `json:"released_on_revoked_identity"`
}

// ReleasedOnRevokedIdentityData is the data of released_on_revoked_identity;
// IdentityRevokedAt and SurfacedBy are set when a migration surfaced it.
type ReleasedOnRevokedIdentityData struct {
	OrgID             string `json:"org_id"`
	RevocationReason  string `json:"revocation_reason"`
	AmountMinor       int64  `json:"amount_minor"`
	Currency          string `json:"currency"`
	IdentityRevokedAt string `json:"identity_revoked_at,omitempty"`
	SurfacedBy        string `json:"surfaced_by,omitempty"`
}

// RevokedReleaseAcknowledgedData is the data of revoked_release_acknowledged.
type RevokedReleaseAcknowledgedData struct {
	OrgID       string `json:"org_id"`
	AmountMinor int64  `json:"amount_minor"`
	Currency    string `json:"currency"`
	Note        string `json:"note"`
}

// WriteOffThresholdChangedData is the data of write_off_threshold_changed.
type WriteOffThresholdChangedData struct {
	ThresholdMinor         int64  `json:"threshold_minor"`
	PreviousThresholdMinor int64  `json:"previous_threshold_minor"`
	Currency               string `json:"currency,omitempty"`
	PendingChangeID        string `json:"pending_change_id,omitempty"`
}

// WriteOffRecord is a write-off as the events about it record it.
type WriteOffRecord struct {
	WriteOffID    string `json:"write_off_id"`
	Status        string `json:"status"`
	Reason        string `json:"reason"`
	Reference     string `json:"reference"`
	AmountMinor   int64  `json:"amount_minor"`
	Currency      string `json:"currency"`
	RequestedBy   string `json:"requested_by"`
	RequestedByID string `json:"requested_by_id"`
	// ApprovedBy and ApprovedByID are set once a second principal
	// approved it.
	ApprovedBy   string `json:"approved_by,omitempty"`
	ApprovedByID string `json:"approved_by_id,omitempty"`
}

// WriteOffRequestedData is the data of write_off_requested.
type WriteOffRequestedData struct {
	WriteOffRecord
	ApprovalThresholdMinor int64 `json:"approval_threshold_minor"`
}

// WriteOffExecutedData is the data of write_off_executed: Approval is
// "not_required" (with the threshold) or "four_eyes".
type WriteOffExecutedData struct {
	WriteOffRecord
	Approval               string `json:"approval"`
	ApprovalThresholdMinor *int64 `json:"approval_threshold_minor,omitempty"`
}

// WriteOffVoidedData is the data of write_off_voided.
type WriteOffVoidedData struct {
	WriteOffRecord
	ObligationState string `json:"obligation_state"`
	VoidReason      string `json:"void_reason"`
}

// WriteOffRefusedData is the data of write_off_refused: the refused request
// ("write_off", "approve" or "reject") and the refusal's code; for a
// request to write off, its reason and the obligation's state; for a
// decision, the write-off (WriteOffRecord.Refused) and the refusal.
type WriteOffRefusedData struct {
	Request         string  `json:"request"`
	Code            string  `json:"code"`
	Reason          string  `json:"reason"`
	ObligationState string  `json:"obligation_state,omitempty"`
	Refusal         string  `json:"refusal,omitempty"`
	WriteOffID      string  `json:"write_off_id,omitempty"`
	Status          string  `json:"status,omitempty"`
	Reference       *string `json:"reference,omitempty"`
	AmountMinor     *int64  `json:"amount_minor,omitempty"`
	Currency        string  `json:"currency,omitempty"`
	RequestedBy     string  `json:"requested_by,omitempty"`
	RequestedByID   string  `json:"requested_by_id,omitempty"`
	ApprovedBy      string  `json:"approved_by,omitempty"`
	ApprovedByID    string  `json:"approved_by_id,omitempty"`
}

// Refused is the data of the refusal of request on w, with the refusal's
// text; the caller sets the code.
func (w WriteOffRecord) Refused(request, refusal string) WriteOffRefusedData {
	return WriteOffRefusedData{
		Request: request, Reason: w.Reason, Refusal: refusal, WriteOffID: w.WriteOffID, Status: w.Status,
		Reference: &w.Reference, AmountMinor: &w.AmountMinor, Currency: w.Currency, RequestedBy: w.RequestedBy,
		RequestedByID: w.RequestedByID, ApprovedBy: w.ApprovedBy, ApprovedByID: w.ApprovedByID,
	}
}

// Events of a delegation's stream appended by the A2A workers.

// TaskDispatchedData is the data of task_dispatched.
type TaskDispatchedData struct {
	TaskID          string `json:"task_id"`
	ContextID       string `json:"context_id"`
	ProtocolVersion string `json:"protocol_version"`
	MessageID       string `json:"message_id"`
	Attempt         int    `json:"attempt"`
	PushRegistered  bool   `json:"push_registered"`
}

// DispatchFailedData is the data of dispatch_failed.
type DispatchFailedData struct {
	Reason    string `json:"reason"`
	MessageID string `json:"message_id"`
	Attempt   int    `json:"attempt"`
	Error     string `json:"error,omitempty"`
}

// CancelRefusedData is the data of cancel_refused.
type CancelRefusedData struct {
	TaskID string `json:"task_id"`
	Error  string `json:"error"`
}

// CancelFailedData is the data of cancel_failed: the reason when there was no
// task to cancel, else the task and the error.
type CancelFailedData struct {
	Reason  string `json:"reason,omitempty"`
	TaskID  string `json:"task_id,omitempty"`
	Error   string `json:"error,omitempty"`
	Attempt int    `json:"attempt"`
}

// PushRefusedData is the data of push_refused.
type PushRefusedData struct {
	Reason          string  `json:"reason"`
	PushedTaskID    string  `json:"pushed_task_id"`
	PushedContextID *string `json:"pushed_context_id,omitempty"`
}

// RemoteTaskConflictData is the data of remote_task_conflict: which call
// (source) reported which task, and what it conflicts with — the task
// recorded, another delegation (of this tenant, or another's), or, for
// on-call's resolution, the task the agent answered with.
type RemoteTaskConflictData struct {
	Source            string  `json:"source"`
	ReportedTaskID    string  `json:"reported_task_id"`
	RecordedTaskID    string  `json:"recorded_task_id,omitempty"`
	OtherDelegationID string  `json:"other_delegation_id,omitempty"`
	RecordedBy        string  `json:"recorded_by,omitempty"`
	Reason            string  `json:"reason,omitempty"`
	AnsweredTaskID    *string `json:"answered_task_id,omitempty"`
	AnsweredContextID *string `json:"answered_context_id,omitempty"`
	MessageID         string  `json:"message_id,omitempty"`
}

// ReceiptRefusedData is the data of compensation_receipt_refused: the
// refusal of verified evidence (code, detail, channel, kind), or a receipt
// that could not be verified (source, problem).
type ReceiptRefusedData struct {
	Code    string `json:"code,omitempty"`
	Detail  string `json:"detail,omitempty"`
	Channel string `json:"channel,omitempty"`
	Kind    string `json:"kind,omitempty"`
	Source  string `json:"source,omitempty"`
	Problem string `json:"problem,omitempty"`
}

// CompensationRequestedData is the data of compensation_requested.
type CompensationRequestedData struct {
	MessageID          string   `json:"message_id"`
	Round              int      `json:"round"`
	Attempt            int      `json:"attempt"`
	CompensationTaskID string   `json:"compensation_task_id"`
	TaskID             string   `json:"task_id"`
	IdempotencyKey     string   `json:"idempotency_key"`
	ExtraTaskIDs       []string `json:"extra_task_ids"`
}

// CompensationAttempt is a compensation request attempt that brought no
// evidence.
type CompensationAttempt struct {
	Attempt     int    `json:"attempt"`
	MaxAttempts int    `json:"max_attempts"`
	Round       int    `json:"round"`
	Error       string `json:"error"`
	Outcome     string `json:"outcome"`
	MessageID   string `json:"message_id"`
}

// CompensationRequestFailedData is the data of compensation_request_failed.
type CompensationRequestFailedData CompensationAttempt

// CompensationRetriesExhaustedData is the data of
// compensation_retries_exhausted.
type CompensationRetriesExhaustedData CompensationAttempt

// CompensationNotSupportedData is the data of compensation_not_supported.
type CompensationNotSupportedData CompensationAttempt

// CompensationAttemptFailed is the data of the event of type typ that
// records attempt a.
func CompensationAttemptFailed(typ EventType, a CompensationAttempt) (EventPayload, error) {
	switch typ {
	case EventTypeCompensationRequestFailed:
		return CompensationRequestFailedData(a), nil
	case EventTypeCompensationRetriesExhausted:
		return CompensationRetriesExhaustedData(a), nil
	case EventTypeCompensationNotSupported:
		return CompensationNotSupportedData(a), nil
	}
	return nil, fmt.Errorf("%s records no compensation attempt", typ)
}

// MessageQueuedData is the data of task_message_queued.
type MessageQueuedData struct {
	MessageID    string `json:"message_id"`
	A2AMessageID string `json:"a2a_message_id"`
	TaskID       string `json:"task_id"`
	TaskStatus   string `json:"task_status"`
}

// MessageSentData is the data of task_message_sent; TaskState is the state of
// the task the remote answered with, if it did.
type MessageSentData struct {
	MessageID    string  `json:"message_id"`
	A2AMessageID string  `json:"a2a_message_id"`
	TaskID       string  `json:"task_id"`
	TaskState    *string `json:"task_state,omitempty"`
}

// MessageFailedData is the data of task_message_failed.
type MessageFailedData struct {
	MessageID    string `json:"message_id"`
	A2AMessageID string `json:"a2a_message_id"`
	Error        string `json:"error"`
}

// DispatchUnknownData is the data of dispatch_unknown.
type DispatchUnknownData struct {
	Reason         string `json:"reason"`
	MessageID      string `json:"message_id"`
	Attempt        int    `json:"attempt"`
	Error          string `json:"error,omitempty"`
	Lookup         string `json:"lookup"`
	ReportedTaskID string `json:"reported_task_id,omitempty"`
}

// RemoteTaskNotFoundData is the data of remote_task_not_found.
type RemoteTaskNotFoundData struct {
	TaskID  string `json:"task_id"`
	Source  string `json:"source"`
	Error   string `json:"error"`
	Attempt *int   `json:"attempt,omitempty"`
}

// CompensationRedrivenData is the data of compensation_redriven.
type CompensationRedrivenData struct {
	Reason           string `json:"reason"`
	PreviousAttempts int    `json:"previous_attempts"`
	IdempotencyKey   string `json:"idempotency_key"`
	TaskID           string `json:"task_id"`
}

// DispatchResolvedData is the data of dispatch_resolved: who found the task
// and how it is proven the delegation's; TasksFound when a lookup found it.
type DispatchResolvedData struct {
	Reason     string `json:"reason"`
	FoundBy    string `json:"found_by"`
	ProvenBy   string `json:"proven_by"`
	TasksFound int    `json:"tasks_found,omitempty"`
	TaskID     string `json:"task_id"`
	ContextID  string `json:"context_id"`
	MessageID  string `json:"message_id"`
}

// RemoteTaskFoundData is the data of remote_task_found.
type RemoteTaskFoundData struct {
	TaskID        string `json:"task_id"`
	ContextID     string `json:"context_id"`
	Purpose       string `json:"purpose"`
	FoundBy       string `json:"found_by"`
	State         string `json:"state"`
	TrackedTaskID string `json:"tracked_task_id"`
	MessageID     string `json:"message_id"`
}

// RemoteTaskEndedData is the data of remote_task_ended.
type RemoteTaskEndedData struct {
	TaskID  string `json:"task_id"`
	Purpose string `json:"purpose"`
	State   string `json:"state"`
	Source  string `json:"source"`
}

// ExtraTaskCompensationRequiredData is the data of
// extra_task_compensation_required.
type ExtraTaskCompensationRequiredData struct {
	TaskID         string `json:"task_id"`
	Purpose        string `json:"purpose"`
	State          string `json:"state"`
	TrackedTaskID  string `json:"tracked_task_id"`
	IdempotencyKey string `json:"idempotency_key"`
	Requested      bool   `json:"requested"`
}

// ExtraTaskCompensatedData is the data of extra_task_compensated: the receipt,
// with its token's record when it was signed.
type ExtraTaskCompensatedData struct {
	TaskID         string          `json:"task_id"`
	Resolution     string          `json:"resolution"`
	Outcome        string          `json:"outcome"`
	ReceiptID      string          `json:"receipt_id"`
	IdempotencyKey string          `json:"idempotency_key"`
	Receipt        json.RawMessage `json:"receipt"`
	*TokenRecord
	TokenAcceptance
}

// ExtraTaskCompensationExhaustedData is the data of
// extra_task_compensation_exhausted.
type ExtraTaskCompensationExhaustedData struct {
	TaskID string `json:"task_id"`
	CompensationAttempt
}

// ExtraTaskCompensationRedrivenData is the data of
// extra_task_compensation_redriven.
type ExtraTaskCompensationRedrivenData struct {
	TaskID           string `json:"task_id"`
	Reason           string `json:"reason"`
	PreviousAttempts int    `json:"previous_attempts"`
	Round            int    `json:"round"`
	IdempotencyKey   string `json:"idempotency_key"`
}

// ExtraTaskWrittenOffData is the data of extra_task_written_off.
type ExtraTaskWrittenOffData struct {
	TaskID   string `json:"task_id"`
	Reason   string `json:"reason"`
	Attempts int    `json:"attempts"`
}

// Events of case handling and of a write-off's rejection.

// CaseOwnerAssignedData is the data of case_owner_assigned.
type CaseOwnerAssignedData struct {
	Owner         string `json:"owner"`
	PreviousOwner string `json:"previous_owner"`
}

// CaseNoteAddedData is the data of case_note_added.
type CaseNoteAddedData struct {
	Note string `json:"note"`
}

// CaseSnoozedData is the data of case_snoozed: Until is null when the entry
// was woken.
type CaseSnoozedData struct {
	Until           *string `json:"until"`
	PreviousUntil   string  `json:"previous_until,omitempty"`
	Reason          string  `json:"reason,omitempty"`
	ObligationState string  `json:"obligation_state"`
}

// WriteOffRejectedData is the data of write_off_rejected.
type WriteOffRejectedData struct {
	WriteOffRecord
	RejectedBy      string `json:"rejected_by"`
	RejectedByID    string `json:"rejected_by_id"`
	RejectionReason string `json:"rejection_reason"`
	ObligationState string `json:"obligation_state"`
}

// WebhookDeliveriesRedrivenData is the data of webhook_deliveries_redriven.
type WebhookDeliveriesRedrivenData struct {
	Tenant     string `json:"tenant"`
	EndpointID string `json:"endpoint_id"`
	Redriven   int    `json:"redriven"`
}

// The payload types' event types.

// EventType implements EventPayload.
func (DelegationCreatedData) EventType() EventType { return EventTypeDelegationCreated }
func (DelegationCreatedData) eventPayload()        {}

// EventType implements EventPayload.
func (TaskStatusChangedData) EventType() EventType { return EventTypeTaskStatusChanged }
func (TaskStatusChangedData) eventPayload()        {}

// EventType implements EventPayload.
func (TaskStatusDuplicateData) EventType() EventType { return EventTypeTaskStatusDuplicate }
func (TaskStatusDuplicateData) eventPayload()        {}

// EventType implements EventPayload.
func (TaskStatusStaleData) EventType() EventType { return EventTypeTaskStatusStale }
func (TaskStatusStaleData) eventPayload()        {}

// EventType implements EventPayload.
func (StatusConflictData) EventType() EventType { return EventTypeStatusConflict }
func (StatusConflictData) eventPayload()        {}

// EventType implements EventPayload.
func (CancelRequestedData) EventType() EventType { return EventTypeCancelRequested }
func (CancelRequestedData) eventPayload()        {}

// EventType implements EventPayload.
func (HoldChangedData) EventType() EventType { return EventTypeHoldChanged }
func (HoldChangedData) eventPayload()        {}

// EventType implements EventPayload.
func (TaskStatusReportedData) EventType() EventType { return EventTypeTaskStatusReported }
func (TaskStatusReportedData) eventPayload()        {}

// EventType implements EventPayload.
func (BudgetFundedData) EventType() EventType { return EventTypeBudgetFunded }
func (BudgetFundedData) eventPayload()        {}

// EventType implements EventPayload.
func (BudgetTenantsChangedData) EventType() EventType { return EventTypeBudgetTenantsChanged }
func (BudgetTenantsChangedData) eventPayload()        {}

// EventType implements EventPayload.
func (OrgUpdatedData) EventType() EventType { return EventTypeOrgUpdated }
func (OrgUpdatedData) eventPayload()        {}

// EventType implements EventPayload.
func (OrgKeysFetchedData) EventType() EventType { return EventTypeOrgKeysFetched }
func (OrgKeysFetchedData) eventPayload()        {}

// EventType implements EventPayload.
func (TaskClassUpdatedData) EventType() EventType { return EventTypeTaskClassUpdated }
func (TaskClassUpdatedData) eventPayload()        {}

// EventType implements EventPayload.
func (TaskClassPolicyUpdatedData) EventType() EventType { return EventTypeTaskClassPolicyUpdated }
func (TaskClassPolicyUpdatedData) eventPayload()        {}

// EventType implements EventPayload.
func (TokenCreatedData) EventType() EventType { return EventTypeTokenCreated }
func (TokenCreatedData) eventPayload()        {}

// EventType implements EventPayload.
func (PrincipalCreatedData) EventType() EventType { return EventTypePrincipalCreated }
func (PrincipalCreatedData) eventPayload()        {}

// EventType implements EventPayload.
func (PrincipalDisabledData) EventType() EventType { return EventTypePrincipalDisabled }
func (PrincipalDisabledData) eventPayload()        {}

// EventType implements EventPayload.
func (PrincipalRoleGrantedData) EventType() EventType { return EventTypePrincipalRoleGranted }
func (PrincipalRoleGrantedData) eventPayload()        {}

// EventType implements EventPayload.
func (PrincipalOIDCLinkedData) EventType() EventType { return EventTypePrincipalOIDCLinked }
func (PrincipalOIDCLinkedData) eventPayload()        {}

// EventType implements EventPayload.
func (PrincipalNoIdentityProviderAccountData) EventType() EventType {
	return EventTypePrincipalNoIdentityProviderAccount
}
func (PrincipalNoIdentityProviderAccountData) eventPayload() {}

// EventType implements EventPayload.
func (TokenRevokedData) EventType() EventType { return EventTypeTokenRevoked }
func (TokenRevokedData) eventPayload()        {}

// EventType implements EventPayload.
func (ChangeRequestedData) EventType() EventType { return EventTypeChangeRequested }
func (ChangeRequestedData) eventPayload()        {}

// EventType implements EventPayload.
func (ChangeApprovedData) EventType() EventType { return EventTypeChangeApproved }
func (ChangeApprovedData) eventPayload()        {}

// EventType implements EventPayload.
func (ChangeRefusedData) EventType() EventType { return EventTypeChangeRefused }
func (ChangeRefusedData) eventPayload()        {}

// EventType implements EventPayload.
func (ChangeExpiredData) EventType() EventType { return EventTypeChangeExpired }
func (ChangeExpiredData) eventPayload()        {}

// EventType implements EventPayload.
func (CompensationAckedData) EventType() EventType { return EventTypeCompensationAcked }
func (CompensationAckedData) eventPayload()        {}

// EventType implements EventPayload.
func (NoCompensationDeclaredData) EventType() EventType { return EventTypeNoCompensationDeclared }
func (NoCompensationDeclaredData) eventPayload()        {}

// EventType implements EventPayload.
func (LateEvidenceData) EventType() EventType { return EventTypeLateEvidence }
func (LateEvidenceData) eventPayload()        {}

// EventType implements EventPayload.
func (TokenRefusedData) EventType() EventType { return EventTypeTokenRefused }
func (TokenRefusedData) eventPayload()        {}

// EventType implements EventPayload.
func (EvidenceReceivedData) EventType() EventType { return EventTypeEvidenceReceived }
func (EvidenceReceivedData) eventPayload()        {}

// EventType implements EventPayload.
func (EvidenceConflictData) EventType() EventType { return EventTypeEvidenceConflict }
func (EvidenceConflictData) eventPayload()        {}

// EventType implements EventPayload.
func (EarlyEvidenceUnusedData) EventType() EventType { return EventTypeEarlyEvidenceUnused }
func (EarlyEvidenceUnusedData) eventPayload()        {}

// EventType implements EventPayload.
func (DeadlinePassedData) EventType() EventType { return EventTypeDeadlinePassed }
func (DeadlinePassedData) eventPayload()        {}

// EventType implements EventPayload.
func (IdentityRevokedData) EventType() EventType { return EventTypeIdentityRevoked }
func (IdentityRevokedData) eventPayload()        {}

// EventType implements EventPayload.
func (OrgIdentityRevokedData) EventType() EventType { return EventTypeOrgIdentityRevoked }
func (OrgIdentityRevokedData) eventPayload()        {}

// EventType implements EventPayload.
func (ReleasedOnRevokedIdentityData) EventType() EventType { return EventTypeReleasedOnRevokedIdentity }
func (ReleasedOnRevokedIdentityData) eventPayload()        {}

// EventType implements EventPayload.
func (RevokedReleaseAcknowledgedData) EventType() EventType {
	return EventTypeRevokedReleaseAcknowledged
}
func (RevokedReleaseAcknowledgedData) eventPayload() {}

// EventType implements EventPayload.
func (WriteOffThresholdChangedData) EventType() EventType { return EventTypeWriteOffThresholdChanged }
func (WriteOffThresholdChangedData) eventPayload()        {}

// EventType implements EventPayload.
func (WriteOffRequestedData) EventType() EventType { return EventTypeWriteOffRequested }
func (WriteOffRequestedData) eventPayload()        {}

// EventType implements EventPayload.
func (WriteOffExecutedData) EventType() EventType { return EventTypeWriteOffExecuted }
func (WriteOffExecutedData) eventPayload()        {}

// EventType implements EventPayload.
func (WriteOffVoidedData) EventType() EventType { return EventTypeWriteOffVoided }
func (WriteOffVoidedData) eventPayload()        {}

// EventType implements EventPayload.
func (WriteOffRefusedData) EventType() EventType { return EventTypeWriteOffRefused }
func (WriteOffRefusedData) eventPayload()        {}

// EventType implements EventPayload.
func (TaskDispatchedData) EventType() EventType { return EventTypeTaskDispatched }
func (TaskDispatchedData) eventPayload()        {}

// EventType implements EventPayload.
func (DispatchFailedData) EventType() EventType { return EventTypeDispatchFailed }
func (DispatchFailedData) eventPayload()        {}

// EventType implements EventPayload.
func (CancelRefusedData) EventType() EventType { return EventTypeCancelRefused }
func (CancelRefusedData) eventPayload()        {}

// EventType implements EventPayload.
func (CancelFailedData) EventType() EventType { return EventTypeCancelFailed }
func (CancelFailedData) eventPayload()        {}

// EventType implements EventPayload.
func (PushRefusedData) EventType() EventType { return EventTypePushRefused }
func (PushRefusedData) eventPayload()        {}

// EventType implements EventPayload.
func (RemoteTaskConflictData) EventType() EventType { return EventTypeRemoteTaskConflict }
func (RemoteTaskConflictData) eventPayload()        {}

// EventType implements EventPayload.
func (ReceiptRefusedData) EventType() EventType { return EventTypeReceiptRefused }
func (ReceiptRefusedData) eventPayload()        {}

// EventType implements EventPayload.
func (CompensationRequestedData) EventType() EventType { return EventTypeCompensationRequested }
func (CompensationRequestedData) eventPayload()        {}

// EventType implements EventPayload.
func (CompensationRequestFailedData) EventType() EventType { return EventTypeCompensationRequestFailed }
func (CompensationRequestFailedData) eventPayload()        {}

// EventType implements EventPayload.
func (CompensationRetriesExhaustedData) EventType() EventType {
	return EventTypeCompensationRetriesExhausted
}
func (CompensationRetriesExhaustedData) eventPayload() {}

// EventType implements EventPayload.
func (CompensationNotSupportedData) EventType() EventType { return EventTypeCompensationNotSupported }
func (CompensationNotSupportedData) eventPayload()        {}

// EventType implements EventPayload.
func (MessageQueuedData) EventType() EventType { return EventTypeMessageQueued }
func (MessageQueuedData) eventPayload()        {}

// EventType implements EventPayload.
func (MessageSentData) EventType() EventType { return EventTypeMessageSent }
func (MessageSentData) eventPayload()        {}

// EventType implements EventPayload.
func (MessageFailedData) EventType() EventType { return EventTypeMessageFailed }
func (MessageFailedData) eventPayload()        {}

// EventType implements EventPayload.
func (DispatchUnknownData) EventType() EventType { return EventTypeDispatchUnknown }
func (DispatchUnknownData) eventPayload()        {}

// EventType implements EventPayload.
func (RemoteTaskNotFoundData) EventType() EventType { return EventTypeRemoteTaskNotFound }
func (RemoteTaskNotFoundData) eventPayload()        {}

// EventType implements EventPayload.
func (CompensationRedrivenData) EventType() EventType { return EventTypeCompensationRedriven }
func (CompensationRedrivenData) eventPayload()        {}

// EventType implements EventPayload.
func (DispatchResolvedData) EventType() EventType { return EventTypeDispatchResolved }
func (DispatchResolvedData) eventPayload()        {}

// EventType implements EventPayload.
func (RemoteTaskFoundData) EventType() EventType { return EventTypeRemoteTaskFound }
func (RemoteTaskFoundData) eventPayload()        {}

// EventType implements EventPayload.
func (RemoteTaskEndedData) EventType() EventType { return EventTypeRemoteTaskEnded }
func (RemoteTaskEndedData) eventPayload()        {}

// EventType implements EventPayload.
func (ExtraTaskCompensationRequiredData) EventType() EventType {
	return EventTypeExtraTaskCompensationRequired
}
func (ExtraTaskCompensationRequiredData) eventPayload() {}

// EventType implements EventPayload.
func (ExtraTaskCompensatedData) EventType() EventType { return EventTypeExtraTaskCompensated }
func (ExtraTaskCompensatedData) eventPayload()        {}

// EventType implements EventPayload.
func (ExtraTaskCompensationExhaustedData) EventType() EventType {
	return EventTypeExtraTaskCompensationExhausted
}
func (ExtraTaskCompensationExhaustedData) eventPayload() {}

// EventType implements EventPayload.
func (ExtraTaskCompensationRedrivenData) EventType() EventType {
	return EventTypeExtraTaskCompensationRedriven
}
func (ExtraTaskCompensationRedrivenData) eventPayload() {}

// EventType implements EventPayload.
func (ExtraTaskWrittenOffData) EventType() EventType { return EventTypeExtraTaskWrittenOff }
func (ExtraTaskWrittenOffData) eventPayload()        {}

// EventType implements EventPayload.
func (CaseOwnerAssignedData) EventType() EventType { return EventTypeCaseOwnerAssigned }
func (CaseOwnerAssignedData) eventPayload()        {}

// EventType implements EventPayload.
func (CaseNoteAddedData) EventType() EventType { return EventTypeCaseNoteAdded }
func (CaseNoteAddedData) eventPayload()        {}

// EventType implements EventPayload.
func (CaseSnoozedData) EventType() EventType { return EventTypeCaseSnoozed }
func (CaseSnoozedData) eventPayload()        {}

// EventType implements EventPayload.
func (WriteOffRejectedData) EventType() EventType { return EventTypeWriteOffRejected }
func (WriteOffRejectedData) eventPayload()        {}

// EventType implements EventPayload.
func (WebhookDeliveriesRedrivenData) EventType() EventType { return EventTypeWebhookDeliveriesRedriven }
func (WebhookDeliveriesRedrivenData) eventPayload()        {}

// heldData is a payload that carries data stored earlier, which its own
// members extend (EvidenceRecord.Held).
type heldData interface{ held() json.RawMessage }

// obligationData is what Apply adds to the data of the event it appends:
// the obligation event and reason of a transition, with its hold split and
// amounts and, into revocation_pending_compensation, the compensation
// deadline; or the change of a held obligation's hold.
type obligationData struct {
	ObligationEvent     *ObligationEvent      `json:"obligation_event,omitempty"`
	Reason              *string               `json:"reason,omitempty"`
	Hold                any                   `json:"hold,omitempty"` // holdSplit or holdChange
	SettledAmountMinor  *int64                `json:"settled_amount_minor,omitempty"`
	ReversedAmountMinor *int64                `json:"reversed_amount_minor,omitempty"`
	Compensation        *compensationDeadline `json:"compensation,omitempty"`
}

// holdSplit is where a transition moved the hold: movement and
// amount_minor name the whole hold's destination, the parts what really
// moved. Its members are in key order, as every nested object of event
// data.
type holdSplit struct {
	AmountMinor     int64  `json:"amount_minor"`
	Currency        string `json:"currency"`
	Movement        string `json:"movement"`
	ReturnedMinor   int64  `json:"returned_minor"`
	SpentMinor      int64  `json:"spent_minor"`
	WrittenOffMinor int64  `json:"written_off_minor"`
}

// holdChange is a held obligation's hold raised or cut: the movement of
// the difference.
type holdChange struct {
	AmountMinor    int64  `json:"amount_minor"`
	Currency       string `json:"currency"`
	Movement       string `json:"movement"`
	NewAmountMinor int64  `json:"new_amount_minor"`
	OldAmountMinor int64  `json:"old_amount_minor"`
}

// compensationDeadline is the compensation sought when the obligation
// enters revocation_pending_compensation.
type compensationDeadline struct {
	Deadline       string `json:"deadline"`
	IdempotencyKey string `json:"idempotency_key"`
}

// encodeEventData is the JSON data of an event of type typ: p's members,
// over the data p holds from earlier (heldData), and under the obligation
// members of move, if any. It is one object with its members in key order
// (as a Go map is encoded), which is how event data was always given to
// the store before it is made storable and canonical (StorableEvent).
func encodeEventData(typ EventType, p EventPayload, move *obligationData) (json.RawMessage, error) {
	if p != nil && p.EventType() != typ {
		return nil, fmt.Errorf("%s event with the payload of %s", typ, p.EventType())
	}
	members := map[string]json.RawMessage{}
	if p == nil {
		// No members of its own, as a change that moves only the
		// obligation or the hold has none.
		return encodeMembers(members, move)
	}
	if h, ok := p.(heldData); ok && len(h.held()) > 0 {
		if err := json.Unmarshal(h.held(), &members); err != nil {
			return nil, fmt.Errorf("held data of %s event: %w", typ, err)
		}
		if members == nil { // the held data was null
			members = map[string]json.RawMessage{}
		}
	}
	if err := addMembers(members, p); err != nil {
		return nil, err
	}
	return encodeMembers(members, move)
}

// encodeMembers is members, with those of move over them, as one object.
func encodeMembers(members map[string]json.RawMessage, move *obligationData) (json.RawMessage, error) {
	if move != nil {
		if err := addMembers(members, move); err != nil {
			return nil, err
		}
	}
	return json.Marshal(members)
}

// addMembers sets in members those of the JSON object v encodes to.
func addMembers(members map[string]json.RawMessage, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return err
	}
	for k, m := range top {
		members[k] = m
	}
	return nil
}

// PayloadJSON is v, a payload or a part of one, encoded as event data is
// (its members in key order): how data stored beside an event, such as
// held compensation evidence, is kept in the same form.
func PayloadJSON(v any) (json.RawMessage, error) {
	members := map[string]json.RawMessage{}
	if err := addMembers(members, v); err != nil {
		return nil, err
	}
	return json.Marshal(members)
}
