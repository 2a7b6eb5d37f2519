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
// declarations of eventtype.go: the test checks it names every event type
// once.
var eventPayloads = []EventPayload{
	DelegationCreatedData{}, TaskStatusChangedData{}, TaskStatusDuplicateData{}, TaskStatusStaleData{}, StatusConflictData{},
	CancelRequestedData{}, HoldChangedData{}, TaskStatusReportedData{},

	BudgetFundedData{}, BudgetTenantsChangedData{}, OrgUpdatedData{}, OrgKeysFetchedData{}, OrgCardCheckedData{}, OrgCardChangeDetectedData{},
	OrgCardAcceptedData{}, TaskClassUpdatedData{},
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
	// Binding is the A2A protocol binding (JSONRPC, HTTP+JSON, GRPC) of
	// the call the status was read with; absent for a push or a report.
	Binding string `json:"binding,omitempty"`
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
	RequireSignedCard bool     `json:"require_signed_card,omitempty"`
	CardJKUHosts      []string `json:"card_jku_hosts,omitempty"`
}

// OrgKeysFetchedData is the data of org_keys_fetched.
type OrgKeysFetchedData struct {
	JWKSURL     string   `json:"jwks_url"`
	KeysAdded   []KeyRef `json:"keys_added,omitempty"`
	KeysRemoved []KeyRef `json:"keys_removed,omitempty"`
}

// OrgCardCheckedData is the data of org_card_checked: what a check of the
// org's agent card found (ledger.CardCheck), and the pin after it
// (Pinned: this check pinned it).
type OrgCardCheckedData struct {
	Status             CardStatus      `json:"status"`
	KeyID              string          `json:"kid,omitempty"`
	Thumbprint         string          `json:"thumbprint,omitempty"`
	CompensationParams json.RawMessage `json:"compensation_params,omitempty"`
	Reason             string          `json:"reason,omitempty"`
	Used               bool            `json:"used"`
	Pinned             bool            `json:"pinned,omitempty"`
	PinnedKeyID        string          `json:"pinned_kid,omitempty"`
	PinnedThumbprint   string          `json:"pinned_thumbprint,omitempty"`
}

// OrgCardChangeDetectedData is the data of org_card_change_detected, as
// org_card_checked's.
type OrgCardChangeDetectedData OrgCardCheckedData

// OrgCardAcceptedData is the data of org_card_accepted: the pin the
// approval set, the one it replaced, and the change.
type OrgCardAcceptedData struct {
	Status             CardStatus      `json:"status"`
	KeyID              string          `json:"kid,omitempty"`
	Thumbprint         string          `json:"thumbprint,omitempty"`
	CompensationParams json.RawMessage `json:"compensation_params,omitempty"`
	Used               bool            `json:"used"`
	PinnedKeyID        string          `json:"pinned_kid,omitempty"`
	PinnedThumbprint   string          `json:"pinned_thumbprint,omitempty"`
	PreviousKeyID      string          `json:"previous_kid,omitempty"`
	PreviousThumbprint string          `json:"previous_thumbprint,omitempty"`
	PendingChangeID    string          `json:"pending_change_id,omitempty"`
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

// ChangeDecidedData is the data of the event of type typ that ends a pending
// change as d says.
func ChangeDecidedData(typ EventType, d ChangeDecision) (EventPayload, error) {
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
	// Binding is the A2A protocol binding the task was sent over
	// (JSONRPC, HTTP+JSON, GRPC); absent on events from before bindings
	// other than JSON-RPC, which were all JSON-RPC.
	Binding        string `json:"binding,omitempty"`
	MessageID      string `json:"message_id"`
	Attempt        int    `json:"attempt"`
	PushRegistered bool   `json:"push_registered"`
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
	TaskID  string `json:"task_id"`
	Error   string `json:"error"`
	Binding string `json:"binding,omitempty"`
}

// CancelFailedData is the data of cancel_failed: the reason when there was no
// task to cancel, else the task and the error.
type CancelFailedData struct {
	Reason  string `json:"reason,omitempty"`
	TaskID  string `json:"task_id,omitempty"`
	Error   string `json:"error,omitempty"`
	Attempt int    `json:"attempt"`
	Binding string `json:"binding,omitempty"`
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
	Binding            string   `json:"binding,omitempty"`
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
	Binding string `json:"binding,omitempty"`
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
