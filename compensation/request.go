package compensation

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/internal/jose"
	"github.com/quittance/quittance/ledger"
)

// Compensation over A2A (ledger/DESIGN.md §4). Quittance asks a remote org's agent
// to compensate a task with an ordinary A2A message, and the agent answers
// with a task whose "compensation-receipt" artifact says what it did. This
// file builds the request and judges the receipt; the delegate package makes
// the calls.

// ExtensionURI is the A2A extension of compensation requests and receipts.
// Requests list it in Message.extensions and in the A2A-Extensions header;
// an agent card declaring it with params.atomicCancel true returns a receipt
// in its cancel replies.
const ExtensionURI = "https://quittance.dev/a2a/compensation/v1"

// ReceiptArtifactName is the name (or id) of the artifact that carries a
// compensation receipt as a data part.
const ReceiptArtifactName = "compensation-receipt"

// CompensationRequest is the content of a compensation request's data part,
// under the "compensationRequest" member.
type CompensationRequest struct {
	// TaskID is the remote task whose effects are to be compensated.
	TaskID string `json:"taskId"`
	// IdempotencyKey is the delegation's stable compensation key; the
	// receipt must echo it.
	IdempotencyKey string `json:"idempotencyKey"`
	// Reason says why compensation is sought ("task_canceled", "task_failed").
	Reason string `json:"reason"`
	// ExtraTaskIDs names the other remote tasks the agent created for the
	// same delegation (a second task on a resend of the dispatch or of a
	// compensation request): their effects are to be compensated under
	// the same idempotency key. Absent when there are none.
	ExtraTaskIDs []string `json:"extraTaskIds,omitempty"`
}

// RequestFor returns the compensation request for delegation d, whose
// remote task ended while the gate applied.
func RequestFor(d ledger.Delegation) CompensationRequest {
	key := d.Compensation.IdempotencyKey
	if key == "" {
		key = ledger.CompensationKey(d)
	}
	return CompensationRequest{TaskID: d.Remote.TaskID, IdempotencyKey: key, Reason: "task_" + string(d.TaskStatus)}
}

// Data returns the request as the JSON value of an A2A data part:
// {"compensationRequest": {"taskId", "idempotencyKey", "reason"}}.
func (r CompensationRequest) Data() json.RawMessage {
	b, err := json.Marshal(map[string]CompensationRequest{"compensationRequest": r})
	if err != nil {
		panic(fmt.Sprintf("encode compensation request: %v", err))
	}
	return b
}

// RequestMessageID is the A2A messageId of the round-th compensation request
// for delegation id. It depends on nothing else, so a request resent after a
// timeout or a crash carries the same id and the remote can deduplicate it;
// a new round starts only after the remote definitively failed the previous
// one.
func RequestMessageID(id uuid.UUID, round int) string {
	sum := sha256.Sum256([]byte("quittance/compensation-request/v1:" + id.String()))
	return fmt.Sprintf("qcr-%s-%d", hex.EncodeToString(sum[:12]), round)
}

// ReceiptOutcome is what the remote org says it did.
type ReceiptOutcome string

// The receipt outcomes.
const (
	// ReceiptCompensated: the effects of the task were reversed.
	ReceiptCompensated ReceiptOutcome = "compensated"
	// ReceiptNoEffects: the task committed no effects; only a verified
	// signed declaration (jws) makes this evidence.
	ReceiptNoEffects ReceiptOutcome = "no_effects"
	// ReceiptFailed: the remote tried and could not compensate (yet).
	ReceiptFailed ReceiptOutcome = "failed"
	// ReceiptNotSupported: the remote does not compensate this task, and
	// nobody will send an ack: the obligation becomes
	// compensation_unconfirmed at once (RequestFailed), with the reason.
	ReceiptNotSupported ReceiptOutcome = "not_supported"
	// ReceiptPending: the remote is working on the reversal. Not evidence
	// and not a failure: the worker keeps observing the compensation task
	// until it yields a final receipt, and starts no new round.
	ReceiptPending ReceiptOutcome = "pending"
)

// RemoteReceipt is a compensation receipt as the remote agent returned it,
// in a "compensation-receipt" artifact.
type RemoteReceipt struct {
	// Outcome is what the remote did.
	Outcome ReceiptOutcome `json:"outcome"`
	// ReceiptID is the remote's id of the receipt.
	ReceiptID string `json:"receiptId,omitempty"`
	// TaskID is the task the receipt is about: the delegated task.
	TaskID string `json:"taskId"`
	// IdempotencyKey echoes the request's key.
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
	// JWS is an optional compact JWS: a compensation-ack+jwt for
	// compensated, a no-compensation-required+jwt for no_effects.
	JWS string `json:"jws,omitempty"`
	// Reason is the remote's optional explanation (why not_supported, what
	// a pending reversal waits for); recorded, never trusted.
	Reason string `json:"reason,omitempty"`
	// ReversedAmountMinor is how much of the hold a compensated receipt
	// says was reversed (a non-negative integer; nil: the whole hold).
	ReversedAmountMinor *int64 `json:"reversedAmountMinor,omitempty"`
	// Raw is the receipt's JSON as received.
	Raw json.RawMessage `json:"-"`
}

// maxReceiptBytes caps a receipt's JSON.
const maxReceiptBytes = 64 << 10

// ParseRemoteReceipt parses the data of a compensation-receipt part: the
// receipt object itself, or one wrapped as {"compensationReceipt": {...}}.
func ParseRemoteReceipt(data []byte) (RemoteReceipt, error) {
	if len(data) > maxReceiptBytes {
		return RemoteReceipt{}, fmt.Errorf("compensation receipt: more than %d bytes", maxReceiptBytes)
	}
	var wrapped struct {
		Receipt json.RawMessage `json:"compensationReceipt"`
	}
	if err := json.Unmarshal(data, &wrapped); err != nil {
		return RemoteReceipt{}, fmt.Errorf("compensation receipt: %w", err)
	}
	raw := data
	if len(wrapped.Receipt) > 0 && !bytes.Equal(wrapped.Receipt, []byte("null")) {
		raw = wrapped.Receipt
	}
	var r RemoteReceipt
	if err := json.Unmarshal(raw, &r); err != nil {
		return RemoteReceipt{}, fmt.Errorf("compensation receipt: %w", err)
	}
	switch r.Outcome {
	case ReceiptCompensated, ReceiptNoEffects, ReceiptFailed, ReceiptNotSupported, ReceiptPending:
	default:
		return RemoteReceipt{}, fmt.Errorf("compensation receipt: unknown outcome %q", r.Outcome)
	}
	if r.TaskID == "" {
		return RemoteReceipt{}, errors.New("compensation receipt: no taskId")
	}
	if n := r.ReversedAmountMinor; n != nil && (*n < 0 || r.Outcome != ReceiptCompensated) {
		return RemoteReceipt{}, errors.New("compensation receipt: reversedAmountMinor is a non-negative integer, on a compensated receipt only")
	}
	r.Raw = bytes.Clone(raw)
	return r, nil
}

// ReceiptInput is what a receipt is judged against.
type ReceiptInput struct {
	// Delegation is the delegation the receipt is for.
	Delegation ledger.Delegation
	// Org is the delegation's org, as registered.
	Org ledger.Org
	// Receipt is the receipt.
	Receipt RemoteReceipt
	// LedgerID is this ledger's id, the "aud" of a receipt's JWS.
	LedgerID string
	// Now is the time the receipt is judged at.
	Now time.Time
	// Atomic is set for an atomic cancel-and-compensate receipt, on the
	// task in a cancel reply or as GetTask returned it: it answers no
	// request of its own, so the receipt's key (and its jws's) is not
	// checked.
	Atomic bool
	// TaskID and IdempotencyKey are the task the receipt must be about and
	// the key it must echo, for a request about an extra remote task of a
	// settled delegation (ExtraTaskRequest); empty, the delegation's own
	// task and compensation idempotency key.
	TaskID, IdempotencyKey string
}

// subject is the task the receipt must be about, and key the idempotency
// key it must echo.
func (in ReceiptInput) subject() (task, key string) {
	task, key = in.TaskID, in.IdempotencyKey
	if task == "" {
		task = in.Delegation.Remote.TaskID
	}
	if key == "" {
		key = ledger.CompensationKey(in.Delegation)
	}
	return task, key
}

// ReceiptVerdict is the judgment of a receipt.
type ReceiptVerdict struct {
	// Event is the obligation event the receipt proves —
	// ledger.EventCompensationAck or ledger.EventDeclarationVerified — or ""
	// when it proves nothing, in which case Problem says why.
	Event ledger.ObligationEvent
	// Claims are the verified claims of the receipt's JWS, if it had one.
	Claims *Claims
	// ReversedAmountMinor is how much of the hold a compensated receipt
	// proves reversed, checked against the hold; nil: the whole hold.
	ReversedAmountMinor *int64
	// Problem says why the receipt proves nothing; safe to record.
	Problem string
	// VerifiedAt is when the receipt's JWS was verified (ReceiptInput.Now),
	// when it had one: the ledger records it as the token's acceptance.
	VerifiedAt time.Time
	// UnknownKid is the kid of the receipt's jws when it was refused
	// because no key of the org in force has it (CodeTokenKeyUnknown, the
	// org having no usable keys at all included); "" otherwise. A key the
	// org just rotated in at its JWKS URL is not in force until that URL
	// is fetched again: the A2A worker asks for that fetch and judges the
	// receipt once more (delegate's Worker.judgeReceipt), so this judgment
	// stays free of I/O.
	UnknownKid string
}

// JudgeReceipt decides what a receipt returned on Quittance's own call to the
// org's registered agent proves (ledger/DESIGN.md §3, §4). It must be about the
// delegation's task and echo its idempotency key (or, for a request about an
// extra task of a settled delegation, in.TaskID and in.IdempotencyKey). "compensated" is an ack:
// channel-authenticated, unless the org requires signed receipts, when a jws
// of type compensation-ack+jwt must verify against the org's keys. A jws
// that is present is always verified. "no_effects" proves something only
// with a jws of type no-compensation-required+jwt that verifies. "failed"
// and "not_supported" prove nothing. Nothing from an org whose identity is
// revoked proves anything.
func JudgeReceipt(in ReceiptInput) ReceiptVerdict {
	v := judgeReceipt(in)
	if v.Claims != nil {
		v.VerifiedAt = in.Now
	}
	return v
}

func judgeReceipt(in ReceiptInput) ReceiptVerdict {
	r := in.Receipt
	refuse := func(format string, args ...any) ReceiptVerdict {
		return ReceiptVerdict{Problem: fmt.Sprintf(format, args...)}
	}
	if in.Org.IdentityRevoked() {
		return refuse("the org's identity is revoked; its receipts prove nothing")
	}
	task, key := in.subject()
	if r.TaskID != task {
		return refuse("the receipt is about another task")
	}
	// An atomic receipt answers no request, so it cannot echo the
	// delegation's key: it is bound to the task alone (taskId, and sub in
	// its jws) and to the agent's own answer about that task (the reply to
	// Quittance's cancel, or to its GetTask).
	if !in.Atomic && r.IdempotencyKey != key {
		return refuse("the receipt does not carry the delegation's compensation idempotency key")
	}
	switch r.Outcome {
	case ReceiptCompensated:
		if r.JWS == "" {
			if in.Org.RequireSignedReceipts {
				return refuse("the org requires signed receipts and this one has no jws")
			}
			return reversedVerdict(in, ReceiptVerdict{Event: ledger.EventCompensationAck})
		}
		claims, problem, unknownKid := verifyReceiptJWS(in, KindAck)
		if problem != "" {
			return ReceiptVerdict{Problem: problem, UnknownKid: unknownKid}
		}
		if !in.Atomic && claims.IdempotencyKey != key {
			return refuse("the receipt's jws does not carry the delegation's compensation idempotency key")
		}
		return reversedVerdict(in, ReceiptVerdict{Event: ledger.EventCompensationAck, Claims: &claims})
	case ReceiptNoEffects:
		if r.JWS == "" {
			return refuse("a no_effects receipt proves nothing without a signed declaration")
		}
		claims, problem, unknownKid := verifyReceiptJWS(in, KindDeclaration)
		if problem != "" {
			return ReceiptVerdict{Problem: problem, UnknownKid: unknownKid}
		}
		return ReceiptVerdict{Event: ledger.EventDeclarationVerified, Claims: &claims}
	case ReceiptFailed, ReceiptNotSupported, ReceiptPending:
		return refuse("the remote answered %s", r.Outcome)
	}
	return refuse("unknown receipt outcome %q", r.Outcome)
}

// verifyReceiptJWS verifies the receipt's jws as a token of kind against
// the org's keys in force. When it proves nothing, problem says why and,
// when no key in force has the jws's kid (or the org has no usable keys),
// unknownKid is that kid.
func verifyReceiptJWS(in ReceiptInput, kind TokenKind) (claims Claims, problem, unknownKid string) {
	// The kid of a jws that names one, for a refusal that no key in force
	// has it.
	kid := func() string {
		peek, err := PeekToken([]byte(in.Receipt.JWS))
		if err != nil {
			return ""
		}
		return peek.KeyID
	}
	if len(in.Org.KeySet()) == 0 {
		return Claims{}, "the org has no registered keys to verify the receipt's jws", kid()
	}
	keys, err := jose.ParseOrgJWKS(in.Org.KeySet())
	if err != nil {
		return Claims{}, "the org's registered keys do not parse", kid()
	}
	claims, err = Verify(VerifyInput{
		Token: []byte(in.Receipt.JWS), Kind: kind, OrgID: in.Org.ID, Keys: keys, LedgerID: in.LedgerID, Now: in.Now,
	})
	if err != nil {
		var ref *RefusalError
		if errors.As(err, &ref) {
			if ref.Code == CodeTokenKeyUnknown {
				unknownKid = kid()
			}
			return Claims{}, "the receipt's jws is refused: " + ref.Code, unknownKid
		}
		return Claims{}, "the receipt's jws cannot be verified", ""
	}
	if task, _ := in.subject(); claims.Subject != task {
		return Claims{}, "the receipt's jws is about another task", ""
	}
	return claims, "", ""
}

// ApplyRemoteReceipt hands a receipt that JudgeReceipt found to prove
// j.Verdict.Event, on channel (ledger.ChannelA2AReceipt for a reply to Quittance's
// compensation request, ledger.ChannelAtomicCancel for one in a cancel
// reply), to ApplyEvidence inside tx. The receipt's jws, if any, is the
// evidence's token.
func (s *Service) ApplyRemoteReceipt(ctx context.Context, tx ReceiptTx, d ledger.Delegation, j JudgedReceipt, channel ledger.EvidenceChannel, st Stamp) (EvidenceResult, error) {
	if v := j.Verdict; v.Event != ledger.EventCompensationAck && v.Event != ledger.EventDeclarationVerified {
		return EvidenceResult{}, fmt.Errorf("apply compensation receipt: verdict proves nothing (%s)", v.Problem)
	}
	return s.ApplyEvidence(ctx, tx, d, ReceiptEvidence(j.Receipt, j.Verdict, channel, st.Actor), st.At)
}

// JudgedReceipt is a remote receipt with the verdict JudgeReceipt gave it.
type JudgedReceipt struct {
	Receipt RemoteReceipt
	Verdict ReceiptVerdict
}

// Stamp is who records the events of a step and when: the actor and time
// each event it appends carries.
type Stamp struct {
	Actor string
	At    time.Time
}

// ReceiptEvidence is the Evidence a judged receipt carries.
func ReceiptEvidence(r RemoteReceipt, v ReceiptVerdict, channel ledger.EvidenceChannel, actor string) Evidence {
	return Evidence{
		Kind: v.Event, Channel: channel, Claims: v.Claims, Receipt: &r, Token: []byte(r.JWS), VerifiedAt: v.VerifiedAt, Actor: actor,
		ReversedAmountMinor: v.ReversedAmountMinor,
	}
}

// RequestFailure is what the A2A worker reports about a compensation
// request attempt that brought no evidence: facts, never a decision.
type RequestFailure struct {
	// Attempt is the number of attempts made so far, this one included.
	Attempt int
	// MaxAttempts is the worker's configured bound on attempts.
	MaxAttempts int
	// Round is the request round the attempt belonged to.
	Round int
	// MessageID is the round's A2A messageId.
	MessageID string
	// Outcome is the receipt's outcome, or "error" when there was no
	// usable receipt.
	Outcome string
	// Problem says what went wrong; safe to record.
	Problem string
}

// Exhausted reports whether the worker has made all the attempts it may.
func (f RequestFailure) Exhausted() bool { return f.Attempt >= f.MaxAttempts }

// RequestFailed records, inside tx, a compensation request attempt that
// brought no evidence, and decides what it means for the obligation. A
// not_supported receipt says nobody will ever send an ack: an obligation
// still in revocation_pending_compensation becomes compensation_unconfirmed
// at once, with the reason (compensation_not_supported), and requests
// stop, so on-call sees it now rather than after every retry. Once the
// attempts are exhausted the same happens (compensation_retries_exhausted).
// Otherwise the attempt is recorded (compensation_request_failed) and the
// obligation does not move. The hold stays in every case. It returns the
// delegation after it and whether requests should stop.
func (s *Service) RequestFailed(ctx context.Context, tx ReceiptTx, d ledger.Delegation, f RequestFailure, actor string, now time.Time) (ledger.Delegation, bool, error) {
	attempt := ledger.CompensationAttempt{
		Attempt: f.Attempt, MaxAttempts: f.MaxAttempts, Round: f.Round,
		Error: f.Problem, Outcome: f.Outcome, MessageID: f.MessageID,
	}
	change := ledger.Change{Type: ledger.EventTypeCompensationRequestFailed, Actor: actor, At: now}
	stop := true
	switch {
	case f.Outcome == string(ReceiptNotSupported):
		change.Type = ledger.EventTypeCompensationNotSupported
	case f.Exhausted():
		change.Type = ledger.EventTypeCompensationRetriesExhausted
	default:
		stop = false
	}
	if stop && d.ObligationState == ledger.ObligationRevocationPendingCompensation {
		change.Obligation = ledger.EventCompensationUnconfirmed
	}
	var err error
	if change.Data, err = ledger.CompensationAttemptFailed(change.Type, attempt); err != nil {
		return ledger.Delegation{}, false, err
	}
	d, _, err = ledger.Apply(ctx, tx, d, change)
	return d, stop, err
}
