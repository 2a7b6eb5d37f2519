package compensation

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	gojose "github.com/go-jose/go-jose/v4"

	"github.com/quittance/quittance/internal/jose"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/failpoint"
	"github.com/quittance/quittance/ledger/report"
)

// CodeEvidenceNotExpected is the refusal code of a valid token for a
// delegation whose obligation is not waiting for compensation evidence yet
// (the remote task has not ended as far as the ledger knows).
const CodeEvidenceNotExpected = "evidence_not_expected"

// DefaultSweepBatchSize is how many delegations one sweep transaction moves.
const DefaultSweepBatchSize = 100

// Service is the compensation use cases: accepting signed acks and
// declarations, the deadline sweep, identity revocation and write-offs. It
// holds no state of its own; everything is in the Store, and every change
// goes through ledger.Apply or ledger.Record.
type Service struct {
	store      Store
	clock      ledger.Clock
	log        *slog.Logger
	ledgerID   string
	thresholds ledger.ThresholdConfig
	// dev waives the four-eyes refusal of an identity not yet linked to
	// its person's token principal (access.CheckSecondPerson).
	dev       bool
	batch     int
	keys      jose.KeyCache
	onRefusal func(report.TokenRefusal)
	// refreshKeys is Config.RefreshOrgKeysForKid.
	refreshKeys func(ctx context.Context, orgID, kid string) bool
	// refusalTime is Config.RefusalTime.
	refusalTime time.Duration
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
	// WriteOffApprovalThresholdsMinor are configured thresholds of their
	// own for some currencies (ISO 4217 code to minor units); the others
	// follow WriteOffApprovalThresholdMinor.
	WriteOffApprovalThresholdsMinor map[string]int64
	// Dev is what `quittance dev` runs: an OpenID Connect identity not yet
	// linked to its person's token principal may then be the second person
	// of a write-off (access.CheckSecondPerson).
	Dev bool
	// SweepBatchSize bounds the delegations one sweep transaction moves;
	// DefaultSweepBatchSize when zero.
	SweepBatchSize int
	// OnRefusal, when set, is told of every refused posted token after it
	// was counted (the metrics); it must not block.
	OnRefusal func(report.TokenRefusal)
	// RefreshOrgKeysForKid is asked, when a token names a kid none of its
	// org's keys in force has and the org's keys come from a JWKS URL, to
	// fetch that URL (ledger.Service.RefreshOrgKeysForKid); when it reports
	// that the kid came into force, the token is tried once more. Nil never
	// refreshes.
	RefreshOrgKeysForKid func(ctx context.Context, orgID, kid string) bool
	// RefusalTime is how long after it arrived a posted token that is
	// refused without telling the signer why is answered; zero answers at
	// once. It hides, in the response time, what the work done before the
	// refusal says: whether an org serving its keys at a JWKS URL was
	// read again and its URL fetched for an unknown kid, how large an
	// org's RSA key is, whether the token's task is recorded. It also
	// bounds that fetch to three quarters of it: one still running then is
	// given up (the org's periodic refresh brings the key in later).
	RefusalTime time.Duration
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
	// Generated here, once per process, rather than by the first token
	// that needs one: that token would take longer than any other.
	jose.GenerateDecoyKeys()
	return &Service{
		store: cfg.Store, clock: cfg.Clock, log: cfg.Log, ledgerID: cfg.LedgerID,
		thresholds: ledger.ThresholdConfig{DefaultMinor: cfg.WriteOffApprovalThresholdMinor, Currencies: cfg.WriteOffApprovalThresholdsMinor},
		dev:        cfg.Dev, batch: cfg.SweepBatchSize, onRefusal: cfg.OnRefusal,
		refreshKeys: cfg.RefreshOrgKeysForKid, refusalTime: cfg.RefusalTime,
	}
}

// now is the clock's time at PostgreSQL's precision, as in the ledger.
func (s *Service) now() time.Time { return ledger.StoredTime(s.clock.Now()) }

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
	// OutcomeUncovered: a receipt answering a compensation request round
	// that did not name every extra remote task of the delegation
	// (EvidenceResult.Unnamed): it cannot cover them, so it is not evidence
	// for the obligation and nothing is recorded; a new round names them.
	// Only Quittance's own A2A requests get it, never a posted token.
	OutcomeUncovered Outcome = "uncovered"
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
	// OpenTasks, for evidence held as received or uncovered while the
	// obligation waits for compensation, are the extra remote tasks not
	// yet accounted for (compensation.RemoteTask.Accounted); Unnamed are
	// those among them that no request of the evidence's round named.
	OpenTasks, Unnamed []string
}

// SubmitAck accepts a compact JWS compensation ack (typ
// compensation-ack+jwt) posted from clientAddress. See Submit.
func (s *Service) SubmitAck(ctx context.Context, token []byte, clientAddress string) (EvidenceResult, error) {
	return s.Submit(ctx, KindAck, token, clientAddress)
}

// SubmitDeclaration accepts a compact JWS no-compensation-required
// declaration (typ no-compensation-required+jwt) posted from
// clientAddress. See Submit.
func (s *Service) SubmitDeclaration(ctx context.Context, token []byte, clientAddress string) (EvidenceResult, error) {
	return s.Submit(ctx, KindDeclaration, token, clientAddress)
}

// Submit verifies signed evidence of the given kind and applies it, in
// one transaction: the delegations recording the task it names locked,
// the signature checked against the keys of the org its iss names, then
// the delegation it matches chosen among them and ApplyEvidence
// (ledger/DESIGN.md §3). Every refusal is a *RefusalError; one decided
// before the token verified and matched is CodeTokenRefused, answered
// alike after the same work and Config.RefusalTime after arrival, its
// reason kept on the server (report.TokenRefusal).
func (s *Service) Submit(ctx context.Context, kind TokenKind, token []byte, clientAddress string) (EvidenceResult, error) {
	if !kind.Valid() {
		return EvidenceResult{}, fmt.Errorf("submit evidence: unknown token kind %q", kind)
	}
	answerAt := time.Now().Add(s.refusalTime) // the wall clock's: ledger time may be a test's
	sum := sha256.Sum256(token)
	sub := &submission{kind: kind, token: token, refusal: report.TokenRefusal{
		Kind: string(kind), TokenSHA256: sum[:], TokenBytes: len(token), ClientAddress: storable(clientAddress, 256),
	}}
	peek, err := PeekToken(token)
	if err != nil {
		return EvidenceResult{}, s.refused(ctx, sub.refusal, err, false, answerAt)
	}
	sub.peek = peek
	sub.refusal.ClaimedIssuer = storable(peek.Issuer, report.MaxClaimedIssuer)
	attempt := func(tx Tx) error { return s.attempt(ctx, tx, sub) }
	// The delegations recording the task the token names are those it may
	// change: the flush's pre-read locks them, and reads whether its token
	// id is used.
	keys := ledger.WriteKeys{RemoteTasks: []ledger.RemoteTaskKey{{OrgID: peek.Issuer, TaskID: peek.Subject}}}
	if peek.TokenID != "" {
		keys.UsedTokens = []ledger.UsedTokenKey{{OrgID: peek.Issuer, JTI: peek.TokenID}}
	}
	keyed := ledger.WithWriteKeys(ctx, keys)
	err = s.store.InTx(keyed, attempt)
	var ref *RefusalError
	// Only an org whose keys come from a JWKS URL can have rotated a key in
	// (refreshKeys reports false for any other): asking for the others
	// would read the org again, and so take longer for a registered org
	// than for an unknown one.
	if errors.As(err, &ref) && ref.Code == CodeTokenKeyUnknown && sub.refusal.OrgID != "" && sub.fetched &&
		s.refreshKeys != nil && s.refreshKeysBy(ctx, answerAt, sub.refusal.OrgID, peek.KeyID) {
		// The org rotated the key in at its JWKS URL: once more, with it.
		err = s.store.InTx(keyed, attempt)
	}
	if errors.As(err, &ref) {
		return EvidenceResult{}, s.answerRefusal(ctx, sub, ref, err, answerAt)
	}
	if err != nil {
		return EvidenceResult{}, err
	}
	res := sub.res
	if res.Outcome == OutcomeLateEvidence {
		s.log.WarnContext(ctx, "late compensation evidence recorded",
			slog.String("delegation_id", res.Delegation.ID.String()), slog.String("kind", string(kind)),
			slog.String("obligation_state", string(res.Delegation.ObligationState)),
			slog.Bool("contradicts_write_off", res.ContradictsWriteOff))
	}
	return res, nil
}

// submission is a posted token as Submit carries it through its
// attempts, and what the latest attempt found.
type submission struct {
	kind  TokenKind
	token []byte
	peek  Peek
	// refusal is the record of a refusal, as far as it is known.
	refusal report.TokenRefusal
	res     EvidenceResult
	// found is the delegation the token matched, once known.
	found ledger.Delegation
	// verified is the evidence, once its token verified.
	verified Evidence
	// told says the refusal, if any, may be told to the signer.
	told bool
	// fetched says the token's org serves its keys at a JWKS URL.
	fetched bool
}

// attempt is one try, in tx, at verifying sub's token with the keys of
// the org its iss names, matching it with a delegation and applying it.
func (s *Service) attempt(ctx context.Context, tx Tx, sub *submission) error {
	sub.res, sub.found, sub.verified, sub.told, sub.fetched, sub.refusal.OrgID = EvidenceResult{}, ledger.Delegation{}, Evidence{}, false, false, ""
	var (
		org    ledger.Org
		issRef *RefusalError // the refusal the iss alone decides
		err    error
	)
	// The delegations recording the task the token names are locked
	// first, whatever the token turns out to be, so that the org and
	// its keys are read under their locks: a revocation, which locks the
	// org's open delegations, committed before this read or waits for
	// this transaction. Which of them it is about, if any, is decided
	// once the token verified (match).
	candidates, err := s.recording(ctx, tx, sub.peek)
	if err != nil {
		return err
	}
	if _, replaced := ledger.StorableText(sub.peek.Issuer); replaced {
		// No org id holds a NUL or invalid UTF-8; PostgreSQL would
		// refuse the lookup.
		issRef = Refuse(CodeTokenOrgUnknown, "the token's iss is no org id")
	} else if org, err = tx.Org(ctx, sub.peek.Issuer); errors.Is(err, ledger.ErrNotFound) {
		issRef = Refuse(CodeTokenOrgUnknown, "no registered org has the token's iss")
	} else if err != nil {
		return fmt.Errorf("load org for evidence: %w", err)
	} else {
		sub.refusal.OrgID, sub.fetched = org.ID, org.JWKSURL != ""
	}
	now := s.now()
	claims, err := s.verify(ctx, sub, org, issRef, now)
	if err != nil {
		return err
	}
	d, known, err := s.match(ctx, org.ID, claims, sub.peek, candidates)
	if err != nil || !known {
		sub.told = known
		return err
	}
	sub.found, sub.told = d, true
	failpoint.Inject("after-evidence-verified") // crash tests: verified, nothing released yet
	sub.verified = Evidence{
		Kind: sub.kind.ObligationEvent(), Channel: ledger.ChannelHTTP, Claims: &claims, Token: sub.token, VerifiedAt: now, Actor: "org:" + org.ID,
		ReversedAmountMinor: claims.ReversedAmountMinor,
	}
	sub.res, err = s.ApplyEvidence(ctx, tx, d, sub.verified, now)
	return err
}

// answerRefusal is what Submit returns for sub's token refused with ref
// (err, as the transaction returned it): an evidence conflict, told to
// its signer, is recorded on the delegation; any other refusal goes
// through refused.
func (s *Service) answerRefusal(ctx context.Context, sub *submission, ref *RefusalError, err error, answerAt time.Time) error {
	if !sub.told || ref.Code != CodeEvidenceConflict {
		return s.refused(ctx, sub.refusal, ref, sub.told, answerAt)
	}
	s.logRefusal(ctx, sub.refusal, ref)
	if rerr := s.store.InTx(ctx, func(tx Tx) error {
		return RecordRefusedEvidence(ctx, tx, sub.found, sub.verified, ref, s.now())
	}); rerr != nil {
		// The refusal stands; failing to record it is logged, not
		// turned into a 500 that would hide the refusal code.
		s.log.ErrorContext(ctx, "record evidence conflict", slog.String("delegation_id", sub.found.ID.String()), slog.Any("error", rerr))
	}
	return err
}

// verify checks sub's token against the registered keys of org, the org
// the token's iss names: the org must be registered (issRef, the refusal the
// iss alone decided, is nil), not revoked, and have usable keys.
//
// Whatever it refuses for, it calls Verify once — with no keys when the
// org is unknown, revoked or has no usable keys, so that a token passing
// Verify's header rules has its signature checked against a decoy key
// (jose.Verify) — and only then returns the refusal decided here, which
// comes first. A token thus costs one signature verification of its alg
// whether its org exists, is revoked or has keys, and response times do
// not tell registered orgs from unknown ones (ledger/DESIGN.md §3). See
// Submit.
func (s *Service) verify(ctx context.Context, sub *submission, org ledger.Org, issRef *RefusalError, now time.Time) (Claims, error) {
	var (
		keys   *gojose.JSONWebKeySet
		orgRef = issRef
	)
	switch {
	case orgRef != nil:
	case org.IdentityRevoked():
		orgRef = Refuse(CodeTokenOrgRevoked, "the issuing org's identity is revoked; its signatures are no longer accepted")
	case len(org.KeySet()) == 0:
		orgRef = Refuse(CodeTokenKeyUnknown, "the issuing org has no registered keys")
	default:
		var err error
		if keys, err = s.keys.Keys(org.ID, org.KeySet()); err != nil {
			s.log.ErrorContext(ctx, "registered JWK Set does not parse", slog.String("org_id", org.ID), slog.Any("error", err))
			keys, orgRef = nil, Refuse(CodeTokenKeyUnknown, "the issuing org has no usable registered keys")
		}
	}
	iss := sub.peek.Issuer
	if org.ID != "" {
		iss = org.ID
	}
	claims, err := Verify(VerifyInput{Token: sub.token, Kind: sub.kind, OrgID: iss, Keys: keys, LedgerID: s.ledgerID, Now: now})
	if orgRef != nil {
		return Claims{}, orgRef
	}
	return claims, err
}

// recording locks and returns the delegations recording the task a
// token names by its iss and sub (peek), one per tenant at most: none when
// either cannot be an org's or a task's id (no recorded one holds a NUL
// or invalid UTF-8, and PostgreSQL would refuse the lookup).
func (s *Service) recording(ctx context.Context, tx Tx, peek Peek) ([]ledger.Delegation, error) {
	_, badIss := ledger.StorableText(peek.Issuer)
	_, badSub := ledger.StorableText(peek.Subject)
	if badIss || badSub {
		return nil, nil
	}
	return tx.DelegationsByRemoteTaskForUpdate(ctx, peek.Issuer, peek.Subject)
}

// match picks, among candidates, the delegations recording the task the
// token named (recording), the one the token of the org orgID, verified
// with claims c, is about: the one whose compensation idempotency key it
// carries, or the only one. known is false when no delegation records the
// task (a refusal not told to the signer); a token that carries no key,
// or a key of none of them, for a task more than one tenant recorded is
// refused and told (the signer's own task: nothing about which tenants
// recorded it).
func (s *Service) match(ctx context.Context, orgID string, c Claims, peek Peek, candidates []ledger.Delegation) (d ledger.Delegation, known bool, err error) {
	if orgID != peek.Issuer || c.Subject != peek.Subject {
		// The verified token is the token peeked at, parsed alike: its
		// iss and sub cannot differ.
		return ledger.Delegation{}, false, fmt.Errorf("verified token names %s/%s, peeked at as %s/%s", orgID, c.Subject, peek.Issuer, peek.Subject)
	}
	switch len(candidates) {
	case 0:
		return ledger.Delegation{}, false, Refuse(CodeTokenDelegationUnknown, "no delegation records the org's task named by sub")
	case 1:
		return candidates[0], true, nil
	}
	for _, d := range candidates {
		if c.IdempotencyKey != "" && ledger.CompensationKey(d) == c.IdempotencyKey {
			return d, true, nil
		}
	}
	s.log.WarnContext(ctx, "evidence for a remote task recorded by several tenants matches none by its idempotency key",
		slog.String("org_id", orgID), slog.Int("delegations", len(candidates)), slog.Bool("carries_key", c.IdempotencyKey != ""))
	if c.IdempotencyKey == "" {
		return ledger.Delegation{}, true, Refuse(CodeTokenIdempotencyKeyRequired, "the task is recorded on more than one delegation: the token must carry the compensation idempotency key of the one it is about")
	}
	return ledger.Delegation{}, true, Refuse(CodeTokenIdempotencyKeyMismatch, "claim idempotency_key is not this delegation's compensation idempotency key")
}

// ObligationEvent is the obligation event a token of kind k proves.
func (k TokenKind) ObligationEvent() ledger.ObligationEvent {
	if k == KindDeclaration {
		return ledger.EventDeclarationVerified
	}
	return ledger.EventCompensationAck
}

// evidenceData sets in data, the event data of evidence accepted at
// acceptedAt, the token's record (tokenData) and what it claims.
func evidenceData(data *ledger.EvidenceRecord, c Claims, sum []byte, acceptedAt time.Time) {
	data.TokenRecord, data.TokenAcceptance = tokenData(c, sum, acceptedAt)
	data.Kind, data.Issuer, data.Subject = string(c.Kind), c.Issuer, c.Subject
	data.IssuedAt, data.Expiry = c.IssuedAt.UTC().Format(time.RFC3339), c.Expiry.UTC().Format(time.RFC3339)
	if c.ReceiptID != "" {
		data.ReceiptID = &c.ReceiptID
	}
	data.IdempotencyKey = c.IdempotencyKey
}

// tokenData is the record of a signed token on every event that stores
// it, one shape everywhere: the kind the ledger accepted it as and when
// (ledger.TokenAcceptance), its jti and sha256 (sum), and the key that
// verified it. verify-chain, verify-pack and the console verify the token
// by it (VerifyStoredTokens).
func tokenData(c Claims, sum []byte, acceptedAt time.Time) (*ledger.TokenRecord, ledger.TokenAcceptance) {
	return &ledger.TokenRecord{JTI: c.JTI, TokenSHA256: hex.EncodeToString(sum), KeyID: c.KeyID, KeyThumbprint: c.KeyThumbprint},
		ledger.NewTokenAcceptance(string(c.Kind), acceptedAt)
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

// uniformRefusalDetail is the one detail of every refusal not told to the
// caller: it says where the reason is, not what it is.
const uniformRefusalDetail = "the token was refused; the ledger keeps the reason, which its operators find by the token's sha256"

// refreshKeysBy asks RefreshOrgKeysForKid for org's key kid, giving it,
// when a refusal time is set, until three quarters of that time before
// answerAt: the last quarter is left for trying the token again and
// counting a refusal, so that a refusal is not answered later than the
// others.
func (s *Service) refreshKeysBy(ctx context.Context, answerAt time.Time, orgID, kid string) bool {
	if s.refusalTime > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, answerAt.Add(-s.refusalTime/4))
		defer cancel()
	}
	return s.refreshKeys(ctx, orgID, kid)
}

// refused counts and samples a refusal (report.TokenRefusal), in its own
// transaction — the refused one rolled back — and reports it to
// OnRefusal. It returns what the caller is told: the refusal itself when
// told, else, at answerAt (Config.RefusalTime), CodeTokenRefused with
// uniformRefusalDetail. Nothing is appended to any delegation's chain.
func (s *Service) refused(ctx context.Context, r report.TokenRefusal, err error, told bool, answerAt time.Time) error {
	var ref *RefusalError
	if !errors.As(err, &ref) {
		return err
	}
	r.Reason, r.At = ref.Code, s.now()
	s.logRefusal(ctx, r, ref)
	if rerr := s.store.InTx(ctx, func(tx Tx) error { return tx.RecordTokenRefusal(ctx, r) }); rerr != nil {
		// The refusal stands; failing to count it is logged, not turned
		// into a 500 that would tell a refused token from another.
		s.log.ErrorContext(ctx, "count token refusal", slog.String("org_id", r.OrgID), slog.String("reason", r.Reason), slog.Any("error", rerr))
	}
	if s.onRefusal != nil {
		s.onRefusal(r)
	}
	if told {
		return ref
	}
	waitUntil(ctx, answerAt)
	return Refuse(CodeTokenRefused, uniformRefusalDetail)
}

// waitUntil returns at t by the wall clock, or when ctx ends.
func waitUntil(ctx context.Context, t time.Time) {
	wait := time.Until(t)
	if wait <= 0 {
		return
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
}

// storable is untrusted text as a sample keeps it: at most n bytes, with
// NUL and invalid UTF-8 replaced, which PostgreSQL text cannot hold.
func storable(s string, n int) string { return ledger.StorableTruncated(s, n) }

// logRefusal logs a refusal with its reason and the token's sha256, never
// the token.
func (s *Service) logRefusal(ctx context.Context, r report.TokenRefusal, ref *RefusalError) {
	s.log.InfoContext(ctx, "compensation evidence refused",
		slog.String("kind", r.Kind), slog.String("code", ref.Code), slog.String("detail", ref.Detail),
		slog.String("org_id", r.OrgID), slog.String("token_sha256", hex.EncodeToString(r.TokenSHA256)),
		slog.String("client_address", r.ClientAddress))
}
