package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/quittance/quittance/ledger"

	"github.com/google/uuid"
)

// EvidencePackFormat names the evidence pack's format. verify-pack also
// reads EvidencePackFormatV1, whose one checkpoint listed every stream;
// it refuses any other.
const (
	EvidencePackFormat   = "quittance-evidence-pack/2"
	EvidencePackFormatV1 = "quittance-evidence-pack/1"
)

// EvidencePack is everything an auditor needs to verify one delegation's
// evidence offline, with no database and no network: its hash-chained
// events, every token stored on them, and the org's keys in force when
// each token was accepted, with the org's stream that records them. Every
// field except GeneratedAt, LedgerJWKS and Checkpoint is checked against
// the chains by verify-pack.
type EvidencePack struct {
	// Format is EvidencePackFormat.
	Format string `json:"format"`
	// GeneratedAt is when the pack was made (informational).
	GeneratedAt time.Time `json:"generated_at"`
	// LedgerID is the ledger's id, the "aud" of every token.
	LedgerID string `json:"ledger_id"`
	// Delegation is what the pack is about.
	Delegation PackDelegation `json:"delegation"`
	// Head is the last event of the delegation's stream when the pack was
	// made; the events must end there.
	Head PackHead `json:"head"`
	// Events is the delegation's whole stream, in order.
	Events []ledger.EventRecord `json:"events"`
	// Tokens lists every token stored on Events, for reading; each must be
	// exactly its event's evidence.
	Tokens []PackToken `json:"tokens"`
	// OrgKeys are the org's keys (from its key history) that were in force
	// when any of Tokens was accepted.
	OrgKeys []ledger.OrgKey `json:"org_keys"`
	// OrgEvents is the org's whole stream, in order (read after the
	// checkpoint, like Events): each of OrgKeys must have been added by one
	// of its events at the key's valid_from, and removed where the key
	// ends, so a key row added or backdated outside the ledger is a break.
	OrgEvents []ledger.EventRecord `json:"org_events"`
	// LedgerJWKS is the ledger's own public JWK Set (/.well-known/jwks.json),
	// the keys a checkpoint is signed with.
	LedgerJWKS json.RawMessage `json:"ledger_jwks,omitempty"`
	// Checkpoints are the compact JWS of the checkpoints that signed the
	// delegation's stream's and the org's stream's latest signed heads, each
	// once, oldest first (read before the events, so they never sign past
	// them): they anchor the streams, so a pack whose tail was cut, head and
	// all, no longer reaches the head they signed. Empty while no
	// checkpoint covers either stream.
	Checkpoints []string `json:"checkpoints,omitempty"`
	// Checkpoint is, in a pack of EvidencePackFormatV1, the ledger's latest
	// checkpoint when the pack was made, which listed every stream. A pack
	// of the current format has none.
	Checkpoint string `json:"checkpoint,omitempty"`
}

// PackAnchor returns the compact JWS of the checkpoints that signed the
// given streams' latest signed heads, oldest first (Checkpoints.Signing).
type PackAnchor func(ctx context.Context, streams ...string) ([]string, error)

// PackDelegation is the delegation an evidence pack is about: the fields
// its chain can confirm.
type PackDelegation struct {
	ID                  string                 `json:"id"`
	Stream              string                 `json:"stream"`
	BusinessOperationID string                 `json:"business_operation_id"`
	OrgID               string                 `json:"org_id"`
	TaskClass           string                 `json:"task_class"`
	BudgetID            string                 `json:"budget_id"`
	AmountMinor         int64                  `json:"amount_minor"`
	Currency            string                 `json:"currency"`
	RemoteTaskID        string                 `json:"remote_task_id"`
	ObligationState     ledger.ObligationState `json:"obligation_state"`
	// CompensationIdempotencyKey is the key an ack must carry; it is
	// derived from the delegation id (CompensationKey).
	CompensationIdempotencyKey string `json:"compensation_idempotency_key"`
}

// PackHead names the last event of a stream.
type PackHead struct {
	StreamSeq int32  `json:"stream_seq"`
	Hash      string `json:"hash"`
}

// PackToken is one token stored on an event of the pack.
type PackToken struct {
	// StreamSeq is the event that stores it.
	StreamSeq int32 `json:"stream_seq"`
	// EventType is that event's type.
	EventType ledger.EventType `json:"event_type"`
	// AcceptedAt is when the ledger accepted it (StoredToken.AcceptedAt;
	// the event's time when that cannot be told): the keys in force then
	// verify it.
	AcceptedAt time.Time `json:"accepted_at"`
	// Token is the compact JWS, verbatim.
	Token string `json:"token"`
}

// PackTokens lists the tokens stored on events, a delegation's stream in
// stream order, with when each was accepted (StoredTokens).
func PackTokens(events []ledger.Event) []PackToken {
	out := []PackToken{}
	for _, st := range StoredTokens(events, ledger.EventTimeSlack) {
		at := st.AcceptedAt
		if at.IsZero() {
			at = st.Event.At
		}
		out = append(out, PackToken{StreamSeq: st.Event.StreamSeq, EventType: st.Event.Type, AcceptedAt: at, Token: st.Event.Evidence})
	}
	return out
}

// PackSource is where an evidence pack is read from and what signs for it:
// the ledger's identity (LedgerID, LedgerJWKS) and its checkpoints (Anchor;
// nil: the ledger signs no checkpoints).
type PackSource struct {
	Reader     ledger.Reader
	LedgerID   string
	LedgerJWKS []byte
	Anchor     PackAnchor
	// Now is the pack's generation time.
	Now time.Time
}

// AssemblePack assembles the evidence pack of a delegation for finance and
// on-call (the access of reports). The checkpoints are read after the
// delegation, to know its org, and before any event.
func AssemblePack(ctx context.Context, p ledger.Principal, id uuid.UUID, src PackSource) (EvidencePack, error) {
	if err := ledger.Authorize(p, ledger.ActionReadReports); err != nil {
		return EvidencePack{}, err
	}
	ledgerID, ledgerJWKS, anchor, reader := src.LedgerID, src.LedgerJWKS, src.Anchor, src.Reader
	d, err := reader.Delegation(ctx, id)
	if err != nil {
		return EvidencePack{}, err
	}
	var checkpoints []string
	if anchor != nil {
		if checkpoints, err = anchor(ctx, d.Stream(), "org:"+d.OrgID); err != nil {
			return EvidencePack{}, fmt.Errorf("evidence pack of %s: %w", id, err)
		}
	}
	events, err := reader.StreamEvents(ctx, d.Stream())
	if err != nil {
		return EvidencePack{}, fmt.Errorf("evidence pack of %s: %w", id, err)
	}
	history, err := reader.OrgKeys(ctx, d.OrgID)
	if err != nil {
		return EvidencePack{}, fmt.Errorf("evidence pack of %s: %w", id, err)
	}
	orgEvents, err := reader.StreamEvents(ctx, "org:"+d.OrgID)
	if err != nil {
		return EvidencePack{}, fmt.Errorf("evidence pack of %s: %w", id, err)
	}
	pack := EvidencePack{
		Format: EvidencePackFormat, GeneratedAt: src.Now.UTC(), LedgerID: ledgerID,
		Delegation: PackDelegation{
			ID: d.ID.String(), Stream: d.Stream(), BusinessOperationID: d.BusinessOperationID, OrgID: d.OrgID,
			TaskClass: d.TaskClass, BudgetID: d.BudgetID, AmountMinor: d.Hold.AmountMinor, Currency: d.Hold.Currency,
			RemoteTaskID: d.Remote.TaskID, ObligationState: d.ObligationState, CompensationIdempotencyKey: ledger.CompensationKey(d),
		},
		Events: make([]ledger.EventRecord, len(events)), Tokens: []PackToken{}, OrgKeys: []ledger.OrgKey{},
		OrgEvents:   make([]ledger.EventRecord, len(orgEvents)),
		Checkpoints: checkpoints,
	}
	if len(ledgerJWKS) > 0 {
		pack.LedgerJWKS = ledgerJWKS
	}
	included := map[string]bool{} // kid, thumbprint and valid_from: one history row
	for i, e := range events {
		pack.Events[i] = ledger.NewEventRecord(e)
	}
	pack.Tokens = PackTokens(events)
	for _, t := range pack.Tokens {
		for _, k := range ledger.KeysInForceAt(history, t.AcceptedAt) {
			key := k.KeyID + " " + k.Thumbprint + " " + k.ValidFrom.Format(time.RFC3339Nano)
			if !included[key] {
				included[key] = true
				pack.OrgKeys = append(pack.OrgKeys, k)
			}
		}
	}
	for i, e := range orgEvents {
		pack.OrgEvents[i] = ledger.NewEventRecord(e)
	}
	if n := len(pack.Events); n > 0 {
		pack.Head = PackHead{StreamSeq: pack.Events[n-1].StreamSeq, Hash: pack.Events[n-1].Hash}
	}
	return pack, nil
}
