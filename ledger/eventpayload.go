package ledger

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// The event type of every payload type (eventdata.go).

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
func (OrgCardCheckedData) EventType() EventType { return EventTypeOrgCardChecked }
func (OrgCardCheckedData) eventPayload()        {}

// EventType implements EventPayload.
func (OrgCardChangeDetectedData) EventType() EventType { return EventTypeOrgCardChangeDetected }
func (OrgCardChangeDetectedData) eventPayload()        {}

// EventType implements EventPayload.
func (OrgCardAcceptedData) EventType() EventType { return EventTypeOrgCardAccepted }
func (OrgCardAcceptedData) eventPayload()        {}

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
	return eachMember(raw, func(k string, m json.RawMessage) { members[k] = m })
}

// eachMember calls f with each member of raw, in order: its key as
// json.Unmarshal decodes it (escapes read, invalid UTF-8 made U+FFFD) and
// its value's bytes. raw must be as json.Marshal encodes (valid, compact),
// an object or null (no members). It reads raw once: decoding it into a
// map of raw messages would validate it and then scan it again, for
// every event appended (FuzzEachMember checks the two agree).
func eachMember(raw []byte, f func(string, json.RawMessage)) error {
	if string(raw) == "null" {
		return nil
	}
	if len(raw) < 2 || raw[0] != '{' || raw[len(raw)-1] != '}' {
		return fmt.Errorf("event data %.40q is not a JSON object", raw)
	}
	for i := 1; i < len(raw)-1; {
		end := jsonStringEnd(raw, i)
		key := string(raw[i+1 : end-1])
		if strings.IndexByte(key, '\\') >= 0 || !utf8.ValidString(key) {
			if err := json.Unmarshal(raw[i:end], &key); err != nil {
				return err
			}
		}
		start := end + 1 // past the colon
		i = jsonValueEnd(raw, start)
		f(key, json.RawMessage(raw[start:i]))
		if raw[i] == ',' {
			i++
		}
	}
	return nil
}

// jsonStringEnd is the index just past the string that starts at raw[i].
func jsonStringEnd(raw []byte, i int) int {
	for i++; raw[i] != '"'; i++ {
		if raw[i] == '\\' {
			i++
		}
	}
	return i + 1
}

// jsonValueEnd is the index of the comma or the brace that ends the
// object member's value that starts at raw[i].
func jsonValueEnd(raw []byte, i int) int {
	depth := 0
	for ; ; i++ {
		switch raw[i] {
		case '"':
			i = jsonStringEnd(raw, i) - 1
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i
			}
			depth--
		case ',':
			if depth == 0 {
				return i
			}
		}
	}
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
