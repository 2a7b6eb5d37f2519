package ledger_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/quittance/quittance/ledger"
)

// wireNames pins the stored name of every event type: events already in the
// log are hashed with these names, so none may ever change.
var wireNames = map[ledger.EventType]string{
	ledger.EventTypeDelegationCreated:                  "delegation_created",
	ledger.EventTypeTaskStatusChanged:                  "task_status_changed",
	ledger.EventTypeTaskStatusDuplicate:                "task_status_duplicate",
	ledger.EventTypeTaskStatusStale:                    "task_status_stale",
	ledger.EventTypeStatusConflict:                     "status_conflict",
	ledger.EventTypeCancelRequested:                    "cancel_requested",
	ledger.EventTypeBudgetFunded:                       "budget_funded",
	ledger.EventTypeBudgetTenantsChanged:               "budget_tenants_changed",
	ledger.EventTypeOrgUpdated:                         "org_updated",
	ledger.EventTypeTaskClassUpdated:                   "task_class_updated",
	ledger.EventTypeTaskClassPolicyUpdated:             "task_class_policy_updated",
	ledger.EventTypeTaskStatusReported:                 "task_status_reported",
	ledger.EventTypeTokenCreated:                       "token_created",
	ledger.EventTypePrincipalCreated:                   "principal_created",
	ledger.EventTypePrincipalDisabled:                  "principal_disabled",
	ledger.EventTypePrincipalRoleGranted:               "principal_role_granted",
	ledger.EventTypePrincipalOIDCLinked:                "principal_oidc_linked",
	ledger.EventTypePrincipalNoIdentityProviderAccount: "principal_no_identity_provider_account",
	ledger.EventTypeTokenRevoked:                       "token_revoked",
	ledger.EventTypeChangeRequested:                    "change_requested",
	ledger.EventTypeChangeApproved:                     "change_approved",
	ledger.EventTypeChangeRefused:                      "change_refused",
	ledger.EventTypeChangeExpired:                      "change_expired",
	ledger.EventTypeCompensationAcked:                  "compensation_acked",
	ledger.EventTypeNoCompensationDeclared:             "no_compensation_declared",
	ledger.EventTypeLateEvidence:                       "late_evidence",
	ledger.EventTypeTokenRefused:                       "token_refused",
	ledger.EventTypeDeadlinePassed:                     "compensation_deadline_passed",
	ledger.EventTypeIdentityRevoked:                    "identity_revoked",
	ledger.EventTypeOrgIdentityRevoked:                 "org_identity_revoked",
	ledger.EventTypeReleasedOnRevokedIdentity:          "released_on_revoked_identity",
	ledger.EventTypeRevokedReleaseAcknowledged:         "revoked_release_acknowledged",
	ledger.EventTypeWriteOffThresholdChanged:           "write_off_threshold_changed",
	ledger.EventTypeWriteOffRequested:                  "write_off_requested",
	ledger.EventTypeWriteOffExecuted:                   "write_off_executed",
	ledger.EventTypeWriteOffVoided:                     "write_off_voided",
	ledger.EventTypeWriteOffRefused:                    "write_off_refused",
	ledger.EventTypeTaskDispatched:                     "task_dispatched",
	ledger.EventTypeDispatchFailed:                     "dispatch_failed",
	ledger.EventTypeCancelRefused:                      "cancel_refused",
	ledger.EventTypeCancelFailed:                       "cancel_failed",
	ledger.EventTypePushRefused:                        "push_refused",
	ledger.EventTypeRemoteTaskConflict:                 "remote_task_conflict",
	ledger.EventTypeReceiptRefused:                     "compensation_receipt_refused",
	ledger.EventTypeCompensationRequested:              "compensation_requested",
	ledger.EventTypeCompensationRequestFailed:          "compensation_request_failed",
	ledger.EventTypeCompensationRetriesExhausted:       "compensation_retries_exhausted",
	ledger.EventTypeDispatchUnknown:                    "dispatch_unknown",
	ledger.EventTypeRemoteTaskNotFound:                 "remote_task_not_found",
	ledger.EventTypeCompensationRedriven:               "compensation_redriven",
	ledger.EventTypeDispatchResolved:                   "dispatch_resolved",
	ledger.EventTypeHoldChanged:                        "hold_changed",
	ledger.EventTypeRemoteTaskFound:                    "remote_task_found",
	ledger.EventTypeRemoteTaskEnded:                    "remote_task_ended",
	ledger.EventTypeExtraTaskCompensationRequired:      "extra_task_compensation_required",
	ledger.EventTypeExtraTaskCompensated:               "extra_task_compensated",
	ledger.EventTypeExtraTaskCompensationExhausted:     "extra_task_compensation_exhausted",
	ledger.EventTypeExtraTaskWrittenOff:                "extra_task_written_off",
	ledger.EventTypeExtraTaskCompensationRedriven:      "extra_task_compensation_redriven",
	ledger.EventTypeWebhookDeliveriesRedriven:          "webhook_deliveries_redriven",
	ledger.EventTypeMessageQueued:                      "task_message_queued",
	ledger.EventTypeMessageSent:                        "task_message_sent",
	ledger.EventTypeMessageFailed:                      "task_message_failed",
	ledger.EventTypeCaseOwnerAssigned:                  "case_owner_assigned",
	ledger.EventTypeCaseNoteAdded:                      "case_note_added",
	ledger.EventTypeCaseSnoozed:                        "case_snoozed",
	ledger.EventTypeWriteOffRejected:                   "write_off_rejected",
	ledger.EventTypeEvidenceReceived:                   "evidence_received",
	ledger.EventTypeCompensationNotSupported:           "compensation_not_supported",
	ledger.EventTypeEvidenceConflict:                   "evidence_conflict",
	ledger.EventTypeEarlyEvidenceUnused:                "early_evidence_unused",
	ledger.EventTypeOrgKeysFetched:                     "org_keys_fetched",
	ledger.EventTypeOrgCardChecked:                     "org_card_checked",
	ledger.EventTypeOrgCardChangeDetected:              "org_card_change_detected",
	ledger.EventTypeOrgCardAccepted:                    "org_card_accepted",
}

// TestEventTypeCatalogue: the catalogue lists every event type once, under
// its pinned wire name, and ParseEventType accepts exactly those names.
func TestEventTypeCatalogue(t *testing.T) {
	t.Parallel()
	all := ledger.EventTypes()
	if len(all) != len(wireNames) {
		t.Errorf("the catalogue has %d event types, the pinned names %d", len(all), len(wireNames))
	}
	seen := map[ledger.EventType]bool{}
	for _, typ := range all {
		if seen[typ] {
			t.Errorf("%s is listed twice", typ)
		}
		seen[typ] = true
		want, ok := wireNames[typ]
		if !ok || string(typ) != want {
			t.Errorf("event type %q: pinned name %q", typ, want)
		}
		if got, err := ledger.ParseEventType(want); err != nil || got != typ {
			t.Errorf("ParseEventType(%q) = %q, %v", want, got, err)
		}
		if !typ.Known() {
			t.Errorf("%s is not Known", typ)
		}
	}
	for typ := range wireNames {
		if !seen[typ] {
			t.Errorf("%s is missing from the catalogue", typ)
		}
	}
	for _, bad := range []string{"", "Delegation_created", "TASK_STATUS_CHANGED", "task-status-changed", " late_evidence", "marker"} {
		if got, err := ledger.ParseEventType(bad); err == nil {
			t.Errorf("ParseEventType(%q) = %q, want an error", bad, got)
		}
	}
	all[0] = "changed"
	if ledger.EventTypes()[0] == "changed" {
		t.Error("EventTypes returns the catalogue itself, not a copy")
	}
}

// TestEveryEventTypeConstantIsCatalogued: an EventType constant declared
// anywhere in the package is in the catalogue, so validation against it
// (a webhook filter) never refuses a type the ledger writes.
func TestEveryEventTypeConstantIsCatalogued(t *testing.T) {
	t.Parallel()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	all := ledger.EventTypes()
	declared := 0
	for _, entry := range entries {
		if !strings.HasSuffix(entry.Name(), ".go") || strings.HasSuffix(entry.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), entry.Name(), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.CONST {
				continue
			}
			for _, spec := range gen.Specs {
				vs := spec.(*ast.ValueSpec)
				if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "EventType" {
					continue
				}
				for i, name := range vs.Names {
					declared++
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok {
						t.Errorf("%s is not a string literal", name.Name)
						continue
					}
					if !slices.Contains(all, ledger.EventType(strings.Trim(lit.Value, `"`))) {
						t.Errorf("%s (%s) is not in the catalogue", name.Name, lit.Value)
					}
				}
			}
		}
	}
	if declared != len(all) {
		t.Errorf("%d EventType constants declared, %d in the catalogue", declared, len(all))
	}
}
