package audit

import "github.com/quittance/quittance/ledger"

// This file holds the code that exists only for events written before
// the ledger recorded what the audit now reads from them. Each piece says
// what was missing; once no chain holds such events, the piece can go.
// Events read this way are marked (StoredToken.Derived) and the CLI's
// verify-chain reports how many there are.

// derivedTokenKind is the kind of the token stored on an event of type
// typ written before events recorded it, from its data top and its
// evidence_data nested; "" when they do not tell. It is, in order: its
// data's kind when that is a token kind (evidence_received, late_evidence
// and the acks and declarations applied at once record the typ there),
// what the event's type or obligation event proves (compensation_acked,
// no_compensation_declared, task_ended_acked, task_ended_compensated,
// task_ended_declared), its evidence_data's kind (early_evidence_unused),
// the evidence an evidence_conflict names (compensation_ack,
// declaration_verified) or the resolution of an extra task's receipt
// (compensated, no_effects).
//
// Such a token's acceptance time is the time of the first event of the
// stream that stores it (the evidence_received of evidence applied or
// found unused later), else the event's own time (StoredTokens). What
// cannot be told: a receipt's verification time, when it was judged a
// moment before its event was written (an A2A receipt, an
// evidence_conflict); the event's time stands for it.
func derivedTokenKind(typ ledger.EventType, top, nested tokenRecord) string {
	switch {
	case validTokenKind(top.Kind):
		return top.Kind
	case typ == ledger.EventTypeCompensationAcked:
		return ledger.TokenKindAck
	case typ == ledger.EventTypeNoCompensationDeclared:
		return ledger.TokenKindDeclaration
	}
	switch ledger.ObligationEvent(top.ObligationEvent) {
	case ledger.EventTaskEndedAcked, ledger.EventTaskEndedCompensated:
		return ledger.TokenKindAck
	case ledger.EventTaskEndedDeclared:
		return ledger.TokenKindDeclaration
	}
	if validTokenKind(nested.Kind) {
		return nested.Kind
	}
	switch {
	case typ == ledger.EventTypeEvidenceConflict && top.Kind == string(ledger.EventCompensationAck):
		return ledger.TokenKindAck
	case typ == ledger.EventTypeEvidenceConflict && top.Kind == string(ledger.EventDeclarationVerified):
		return ledger.TokenKindDeclaration
	case typ == ledger.EventTypeExtraTaskCompensated && top.Resolution == "compensated":
		return ledger.TokenKindAck
	case typ == ledger.EventTypeExtraTaskCompensated && top.Resolution == "no_effects":
		return ledger.TokenKindDeclaration
	}
	return ""
}
