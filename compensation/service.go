package compensation

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/failpoint"
)

// CodeEvidenceNotExpected is the refusal code of a valid token for a
// delegation whose obligation is not waiting for compensation evidence yet
// (the remote task has not ended as far as the ledger knows).
const CodeEvidenceNotExpected = "evidence_not_expected"

// ErrSelfApproval is returned when an on-call identity tries to approve its
// own write-off: the second pair of eyes must be a different token, with a
// different name.
var ErrSelfApproval = errors.New("a write-off must be approved by a different on-call principal")

// DefaultSweepBatchSize is how many delegations one sweep transaction moves.
const DefaultSweepBatchSize = 100

// Service is the compensation use cases: accepting signed acks and
// declarations, the deadline sweep, identity revocation and write-offs. It
// holds no state of its own; everything is in the Store, and every change
// goes through ledger.Apply or ledger.Record.
type Service struct {
	store     Store
	clock     ledger.Clock
	log       *slog.Logger
	ledgerID  string
	threshold int64
	batch     int
	keys      keyCache
	// refreshKeys is Config.RefreshOrgKeysForKid.
	refreshKeys func(ctx context.Context, orgID, kid string) bool
}

// Config wires a Service.
type Config struct {
	// Store is the persistence.
	Store Store
	// Clock tells the time; the system clock when nil.
	Clock ledger.Clock
	// Log receives operational logs; never tokens.
	Log *slog.Logger
	// LedgerID is this ledger's id: the "aud" every token must carry.
	LedgerID string
	// WriteOffApprovalThresholdMinor is the largest amount a single on-call
	// identity may write off; above it a second identity must approve.
	WriteOffApprovalThresholdMinor int64
	// SweepBatchSize bounds the delegations one sweep transaction moves;
	// DefaultSweepBatchSize when zero.
	SweepBatchSize int
	// RefreshOrgKeysForKid is asked, when a token names a kid none of its
	// org's keys in force has, to fetch the org's JWKS URL
	// (ledger.Service.RefreshOrgKeysForKid); when it reports that the kid
	// came into force, the token is tried once more. Nil never refreshes.
	RefreshOrgKeysForKid func(ctx context.Context, orgID, kid string) bool
}

// NewService returns a Service.
func NewService(cfg Config) *Service {
	if cfg.Clock == nil {
		cfg.Clock = ledger.SystemClock{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.SweepBatchSize <= 0 {
		cfg.SweepBatchSize = DefaultSweepBatchSize
	}
	return &Service{
		store: cfg.Store, clock: cfg.Clock, log: cfg.Log, ledgerID: cfg.LedgerID,
		threshold: cfg.WriteOffApprovalThresholdMinor, batch: cfg.SweepBatchSize, refreshKeys: cfg.RefreshOrgKeysForKid,
	}
}

// now is the clock's time at PostgreSQL's precision, as in the ledger.
func (s *Service) now() time.Time { return s.clock.Now().UTC().Truncate(time.Microsecond) }

// Outcome says what became of verified evidence.
type Outcome string

// The evidence outcomes.
const (
	// OutcomeApplied: the evidence moved the obligation.
	OutcomeApplied Outcome = "applied"
	// OutcomeDuplicate: the identical token was accepted before; nothing new
	// was recorded and the current delegation is returned.
	OutcomeDuplicate Outcome = "duplicate"
	// OutcomeLateEvidence: the evidence was recorded as a late_evidence event
	// and not applied; the obligation had already ended.
	OutcomeLateEvidence Outcome = "late_evidence"
	// OutcomeReceived: the evidence arrived while the obligation was held
	// (the remote task has not ended as far as the ledger knows); it is
	// kept and applied when the gating terminal status is observed.
	OutcomeReceived Outcome = "received"
)

// EvidenceResult is the answer to an accepted ack or declaration.
type EvidenceResult struct {
	// Delegation is the delegation after the evidence was handled.
	Delegation ledger.Delegation
	// Outcome says whether the evidence was applied, a duplicate, or late.
	Outcome Outcome
	// ContradictsWriteOff is set for late evidence arriving after a write-off:
	// the remote org says it compensated a loss we already accepted.
	ContradictsWriteOff bool
}

// SubmitAck accepts a compact JWS compensation ack (typ
// compensation-ack+jwt). See Submit.
func (s *Service) SubmitAck(ctx context.Context, token []byte) (EvidenceResult, error) {
	return s.Submit(ctx, KindAck, token)
}

// SubmitDeclaration accepts a compact JWS no-compensation-required
// declaration (typ no-compensation-required+jwt). See Submit.
func (s *Service) SubmitDeclaration(ctx context.Context, token []byte) (EvidenceResult, error) {
	return s.Submit(ctx, KindDeclaration, token)
}

// Submit verifies signed evidence of the given kind and applies it.
//
// Everything happens in one transaction, with the delegation the token's
// (iss, sub) names locked first, so a revocation or other evidence for it
// cannot interleave: its org must not be revoked; the signature is verified
// against that org's registered JWK Set only; an identical token accepted
// before is answered with the current delegation (OutcomeDuplicate, nothing
// recorded); another token reusing an accepted jti is refused
// (token_replayed); the jti is recorded as used; an ack must carry the
// delegation's compensation idempotency key; and the evidence is applied
// through ledger.Apply (OutcomeApplied) — or, when the obligation has
// already ended, recorded through ledger.Record as late_evidence
// (OutcomeLateEvidence). The token is stored verbatim as the event's
// evidence either way.
//
// Every refusal is a *RefusalError and changes nothing; when the delegation
// is known, the refusal is recorded afterwards as a token_refused event
// holding the code and the token's sha256, never the token.
func (s *Service) Submit(ctx context.Context, kind TokenKind, token []byte) (EvidenceResult, error) {
	if !kind.Valid() {
		return EvidenceResult{}, fmt.Errorf("submit evidence: unknown token kind %q", kind)
	}
	peek, err := PeekToken(token)
	if err != nil {
		s.logRefusal(ctx, kind, err, "")
		return EvidenceResult{}, err
	}
	var (
		res      EvidenceResult
		found    ledger.Delegation // the delegation the token names, once known
		verified Evidence          // the evidence, once its token verified
	)
	attempt := func(tx Tx) error {
		res, found, verified = EvidenceResult{}, ledger.Delegation{}, Evidence{}
		d, err := tx.DelegationByRemoteTaskForUpdate(ctx, peek.Issuer, peek.Subject)
		if errors.Is(err, ledger.ErrNotFound) {
			return Refuse(CodeTokenDelegationUnknown, "no delegation matches the token's iss and sub")
		} else if err != nil {
			return fmt.Errorf("find delegation for evidence: %w", err)
		}
		found = d
		res, verified, err = s.accept(ctx, tx, kind, token, d)
		return err
	}
	err = s.store.InTx(ctx, attempt)
	var ref *RefusalError
	if errors.As(err, &ref) && ref.Code == CodeTokenKeyUnknown && found.ID != uuid.Nil &&
		s.refreshKeys != nil && s.refreshKeys(ctx, found.OrgID, peek.KeyID) {
		// The org rotated the key in at its JWKS URL: once more, with it.
		err = s.store.InTx(ctx, attempt)
	}
	if errors.As(err, &ref) {
		if found.ID == uuid.Nil {
			s.logRefusal(ctx, kind, ref, "")
			return EvidenceResult{}, err
		}
		s.logRefusal(ctx, kind, ref, found.ID.String())
		record := func() error { return s.recordRefusal(ctx, found, kind, token, ref) }
		if ref.Code == CodeEvidenceConflict {
			record = func() error {
				return s.store.InTx(ctx, func(tx Tx) error {
					return RecordRefusedEvidence(ctx, tx, found, verified, ref, s.now())
				})
			}
		}
		if rerr := record(); rerr != nil {
			// The refusal stands; failing to record it is logged, not
			// turned into a 500 that would hide the refusal code.
			s.log.ErrorContext(ctx, "record token refusal", slog.String("delegation_id", found.ID.String()), slog.Any("error", rerr))
		}
		return EvidenceResult{}, err
	}
	if err != nil {
		return EvidenceResult{}, err
	}
	if res.Outcome == OutcomeLateEvidence {
		s.log.WarnContext(ctx, "late compensation evidence recorded",
			slog.String("delegation_id", res.Delegation.ID.String()), slog.String("kind", string(kind)),
			slog.String("obligation_state", string(res.Delegation.ObligationState)),
			slog.Bool("contradicts_write_off", res.ContradictsWriteOff))
	}
	return res, nil
}

// accept verifies the token against d's org and hands it to ApplyEvidence,
// in tx, with d locked. See Submit.
func (s *Service) accept(ctx context.Context, tx Tx, kind TokenKind, token []byte, d ledger.Delegation) (EvidenceResult, Evidence, error) {
	org, err := tx.Org(ctx, d.OrgID)
	if err != nil {
		return EvidenceResult{}, Evidence{}, fmt.Errorf("load org %s: %w", d.OrgID, err)
	}
	if org.IdentityRevoked() {
		return EvidenceResult{}, Evidence{}, Refuse(CodeTokenOrgRevoked, "the issuing org's identity is revoked; its signatures are no longer accepted")
	}
	if len(org.KeySet()) == 0 {
		return EvidenceResult{}, Evidence{}, Refuse(CodeTokenKeyUnknown, "the issuing org has no registered keys")
	}
	keys, err := s.keys.keys(org.ID, org.KeySet())
	if err != nil {
		s.log.ErrorContext(ctx, "registered JWK Set does not parse", slog.String("org_id", org.ID), slog.Any("error", err))
		return EvidenceResult{}, Evidence{}, Refuse(CodeTokenKeyUnknown, "the issuing org has no usable registered keys")
	}
	now := s.now()
	claims, err := Verify(VerifyInput{Token: token, Kind: kind, OrgID: org.ID, Keys: keys, LedgerID: s.ledgerID, Now: now})
	if err != nil {
		return EvidenceResult{}, Evidence{}, err
	}
	failpoint.Inject("after-evidence-verified") // crash tests: verified, nothing released yet
	ev := Evidence{
		Kind: kind.ObligationEvent(), Channel: ledger.ChannelHTTP, Claims: &claims, Token: token, Actor: "org:" + org.ID,
		ReversedAmountMinor: claims.ReversedAmountMinor,
	}
	res, err := s.ApplyEvidence(ctx, tx, d, ev, now)
	return res, ev, err
}

// ObligationEvent is the obligation event a token of kind k proves.
func (k TokenKind) ObligationEvent() ledger.ObligationEvent {
	if k == KindDeclaration {
		return ledger.EventDeclarationVerified
	}
	return ledger.EventCompensationAck
}

// evidenceData is the event data of accepted evidence.
func evidenceData(kind TokenKind, c Claims, sum []byte) map[string]any {
	data := map[string]any{
		"kind": string(kind), "jti": c.JTI, "iss": c.Issuer, "sub": c.Subject,
		"iat": c.IssuedAt.UTC().Format(time.RFC3339), "exp": c.Expiry.UTC().Format(time.RFC3339),
		"token_sha256": hex.EncodeToString(sum), "kid": c.KeyID, "key_thumbprint": c.KeyThumbprint,
	}
	if c.ReceiptID != "" {
		data["receipt_id"] = c.ReceiptID
	}
	if c.IdempotencyKey != "" {
		data["idempotency_key"] = c.IdempotencyKey
	}
	return data
}

// Receipt is what the delegation shows as its compensation receipt once
// signed evidence discharged it.
type Receipt struct {
	// Kind is the token's typ: compensation-ack+jwt or no-compensation-required+jwt.
	Kind string `json:"kind"`
	// ReceiptID is the ack's receipt_id; empty for a declaration.
	ReceiptID string `json:"receipt_id,omitempty"`
	// JTI is the token's jti.
	JTI string `json:"jti"`
	// TokenSHA256 is the hex sha256 of the token, which is stored verbatim
	// on the event.
	TokenSHA256 string `json:"token_sha256"`
	// ReceivedAt is when the ledger accepted it.
	ReceivedAt time.Time `json:"received_at"`
}

// recordRefusal appends a token_refused event to d's stream, in its own
// transaction (the refused one rolled back). It stores the token's sha256
// and the refusal code, never the unverified token.
func (s *Service) recordRefusal(ctx context.Context, d ledger.Delegation, kind TokenKind, token []byte, ref *RefusalError) error {
	sum := sha256.Sum256(token)
	return s.store.InTx(ctx, func(tx Tx) error {
		_, err := ledger.Record(ctx, tx, d, ledger.Change{
			Type: ledger.EventTypeTokenRefused, Actor: "remote:unverified", At: s.now(),
			Data: map[string]any{
				"code": ref.Code, "detail": ref.Detail, "kind": string(kind),
				"token_sha256": hex.EncodeToString(sum[:]), "token_bytes": len(token),
			},
		})
		return err
	})
}

func (s *Service) logRefusal(ctx context.Context, kind TokenKind, err error, delegationID string) {
	var ref *RefusalError
	if !errors.As(err, &ref) {
		return
	}
	attrs := []any{slog.String("kind", string(kind)), slog.String("code", ref.Code)}
	if delegationID != "" {
		attrs = append(attrs, slog.String("delegation_id", delegationID))
	}
	s.log.InfoContext(ctx, "compensation evidence refused", attrs...)
}
