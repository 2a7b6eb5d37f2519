package audit

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/quittance/quittance/ledger"
)

// Signed checkpoints (ledger/AUDIT.md). A hash chain shows that nothing in
// the middle of a stream changed, but a valid prefix of a chain verifies:
// removing a stream's last events leaves a chain that still checks. A
// checkpoint is the ledger's signature over stream heads (last stream_seq
// and hash), so a tail removed or rewritten up to a signed head no longer
// reaches it.
//
// Checkpoints are incremental: each one signs the heads of the streams
// that moved in a span of the event feed, the final events after the
// previous checkpoint's span in the feed's order, up to a bounded number of
// them. Together the checkpoints cover the feed with no gap, and a
// stream's signed head is the one in the latest checkpoint that lists it
// (SignedHeads). A checkpoint's size depends on how much moved, never on
// how many streams exist. Events after the latest checkpoint's span are
// covered only by the next one.

// CheckpointType is the JWS "typ" of a signed checkpoint.
const CheckpointType = "quittance-checkpoint+json"

// DefaultCheckpointSpan is the most events one checkpoint's span holds. It
// bounds a checkpoint's payload (a few MB at most) and the memory signing
// one takes; when more moved, checkpoints are signed one after the other
// until the feed is covered.
const DefaultCheckpointSpan = 20_000

// StreamHead is the last event of one stream, as a checkpoint signs it.
type StreamHead struct {
	Stream string `json:"stream"`
	Seq    int32  `json:"seq"`
	// Hash is the hex SHA-256 of the stream's last event.
	Hash string `json:"hash"`
}

// CheckpointPayload is the signed content of a checkpoint, as JSON.
type CheckpointPayload struct {
	LedgerID string    `json:"ledger_id"`
	ID       int64     `json:"id"`
	At       time.Time `json:"at"`
	// Previous is the hex SHA-256 of the previous checkpoint's JWS (empty
	// for the first), so checkpoints form a chain of their own.
	Previous string `json:"previous,omitempty"`
	// Through is the feed position (FeedEvent.Position) of the last event
	// of the checkpoint's span. 0 when its span is empty and no checkpoint
	// before it had one, and in a checkpoint signed before checkpoints were
	// incremental, which lists every stream.
	Through int64 `json:"through,omitempty"`
	// Streams is the head of every stream with an event in the span, as of
	// its end, ordered by stream.
	Streams []StreamHead `json:"streams"`
}

// Checkpoint is a stored, signed checkpoint.
type Checkpoint struct {
	ID        int64
	At        time.Time
	CreatedBy string // the actor: a principal, or "system:checkpoints"
	KeyID     string // the kid of the ledger key that signed it
	Streams   int    // how many heads it signs
	// Through is the payload's Through.
	Through int64
	// HeadsSHA256 is the SHA-256 of the signed heads' JSON.
	HeadsSHA256 []byte
	// Payload is the signed JSON (CheckpointPayload) byte for byte; JWS is
	// its compact JWS.
	Payload []byte
	JWS     string
}

// CheckpointSpan is what the next checkpoint signs: the feed's final
// events after the latest checkpoint's span, up to a limit.
type CheckpointSpan struct {
	// Through is the feed position of the span's last event; the latest
	// checkpoint's Through when the span is empty.
	Through int64
	// Heads is the head of every stream with an event in the span, as of
	// its end, ordered by stream.
	Heads []StreamHead
	// Full says the span holds as many events as asked for: more may
	// follow it now.
	Full bool
	// Signed is the head each stream in Heads was last signed at, by the
	// latest checkpoint listing it; a stream no checkpoint signed yet is
	// absent. The checkpoint must not move one back.
	Signed map[string]SignedHead
}

// CheckpointSigner signs a checkpoint's payload with the ledger's own key
// (the one published at /.well-known/jwks.json). compensation.CheckpointSigner is
// one.
type CheckpointSigner interface {
	// SignCheckpoint returns the compact JWS of payload (typ
	// CheckpointType) and the kid that signed it.
	SignCheckpoint(payload []byte) (jws, kid string, err error)
	// VerifyCheckpoint verifies a checkpoint's compact JWS with the
	// ledger's own keys (the active one and the retired ones it still
	// publishes) and returns its payload.
	VerifyCheckpoint(jws string) (CheckpointPayload, error)
}

// CheckpointStore keeps checkpoints. Error contract: as Store.
type CheckpointStore interface {
	// AddCheckpoint, in one transaction and under a lock that serializes
	// every replica's checkpoints, reads the latest checkpoint (nil when
	// there is none) and the span after it, of at most maxEvents events,
	// with the heads its streams were last signed at, and passes them to
	// build; it stores the checkpoint build returns, unless build returns
	// nil. added is false when nothing was stored.
	AddCheckpoint(ctx context.Context, maxEvents int, build func(latest *Checkpoint, span CheckpointSpan) (*Checkpoint, error)) (c Checkpoint, added bool, err error)
	// LatestCheckpoint returns the newest checkpoint, or ErrNotFound.
	LatestCheckpoint(ctx context.Context) (Checkpoint, error)
	// Checkpoints returns up to limit checkpoints after afterID, oldest first.
	Checkpoints(ctx context.Context, afterID int64, limit int) ([]Checkpoint, error)
	// FeedHorizon returns the feed's cut now (events whose commit order is
	// below it are final, and can be in a span) and a horizon every event
	// committed before the call is below: once the cut reaches the horizon,
	// a span can cover them all.
	FeedHorizon(ctx context.Context) (cut, horizon uint64, err error)
	// CheckpointSigning returns the checkpoint that signed the stream's
	// latest signed head (the latest one listing the stream), or
	// ErrNotFound when no checkpoint's span holds any of its events.
	CheckpointSigning(ctx context.Context, stream string) (Checkpoint, error)
}

// Checkpoints signs, stores and serves checkpoints.
type Checkpoints struct {
	store     CheckpointStore
	signer    CheckpointSigner // nil: no signing key, no checkpoints
	ledgerID  string
	clock     ledger.Clock
	log       *slog.Logger
	spanLimit int
}

// NewCheckpoints returns the checkpoint service. A nil signer (the service
// runs without QUITTANCE_SIGNING_KEY_FILE) signs nothing: creating one is
// a conflict, and the periodic loop does nothing.
func NewCheckpoints(store CheckpointStore, signer CheckpointSigner, ledgerID string, clock ledger.Clock, log *slog.Logger) *Checkpoints {
	if clock == nil {
		clock = ledger.SystemClock{}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Checkpoints{store: store, signer: signer, ledgerID: ledgerID, clock: clock, log: log, spanLimit: DefaultCheckpointSpan}
}

// SetSpanLimit sets the most events one checkpoint's span holds
// (DefaultCheckpointSpan unless set), so that tests can make a database
// take several checkpoints to cover.
func (c *Checkpoints) SetSpanLimit(events int) {
	if events > 0 {
		c.spanLimit = events
	}
}

// errNoCheckpointKey refuses a checkpoint when the ledger has no signing key.
var errNoCheckpointKey = &ledger.ConflictError{Code: "checkpoints_unavailable",
	Detail: "the ledger has no signing key (QUITTANCE_SIGNING_KEY_FILE), so it signs no checkpoints"}

// checkpointHeldBackWait bounds how long Create waits for the events
// committed before it to become final.
const checkpointHeldBackWait = 10 * time.Second

// Create signs and stores checkpoints now, on an on-call principal's
// request, until they cover every event committed before the call, and
// returns the last; it signs one even when nothing moved since the latest.
// An event becomes final, and can be covered, once every transaction that
// was open when it committed has ended (the feed's rule); Create waits for
// that up to checkpointHeldBackWait, and is then a conflict naming the
// checkpoint it did sign.
func (c *Checkpoints) Create(ctx context.Context, p ledger.Principal) (Checkpoint, error) {
	if err := ledger.Authorize(p, ledger.ActionAdminister); err != nil {
		return Checkpoint{}, err
	}
	if c.signer == nil {
		return Checkpoint{}, errNoCheckpointKey
	}
	_, horizon, err := c.store.FeedHorizon(ctx)
	if err != nil {
		return Checkpoint{}, err
	}
	deadline := time.Now().Add(checkpointHeldBackWait)
	cut := uint64(0)
	for {
		// The cut is read before the spans: once it has passed the horizon,
		// the spans read after it hold every event up to the horizon.
		if cut, _, err = c.store.FeedHorizon(ctx); err != nil {
			return Checkpoint{}, err
		}
		if cut >= horizon || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return Checkpoint{}, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	cp, _, err := c.create(ctx, p.Actor(), true)
	if err != nil {
		return Checkpoint{}, err
	}
	if cut < horizon {
		return Checkpoint{}, &ledger.ConflictError{Code: "checkpoint_held_back", Detail: fmt.Sprintf(
			"checkpoint %d is signed, but events committed before the request are held back by a transaction open on the "+
				"database server for over %s (see pg_stat_activity): it covers the feed up to them, and the next one covers the rest",
			cp.ID, checkpointHeldBackWait)}
	}
	return cp, nil
}

// Latest returns the newest checkpoint (finance and on-call).
func (c *Checkpoints) Latest(ctx context.Context, p ledger.Principal) (Checkpoint, error) {
	if err := ledger.Authorize(p, ledger.ActionReadReports); err != nil {
		return Checkpoint{}, err
	}
	return c.store.LatestCheckpoint(ctx)
}

// List returns up to limit checkpoints after afterID, oldest first
// (finance and on-call).
func (c *Checkpoints) List(ctx context.Context, p ledger.Principal, afterID int64, limit int) ([]Checkpoint, error) {
	if err := ledger.Authorize(p, ledger.ActionReadReports); err != nil {
		return nil, err
	}
	if afterID < 0 {
		return nil, ledger.Invalid("after", "must not be negative")
	}
	if limit <= 0 {
		limit = ledger.DefaultListLimit
	}
	return c.store.Checkpoints(ctx, afterID, min(limit, ledger.MaxListLimit))
}

// Signing returns the checkpoints that signed the given streams' latest
// signed heads, each once, oldest first (finance and on-call). A stream no
// checkpoint covers yet adds none.
func (c *Checkpoints) Signing(ctx context.Context, p ledger.Principal, streams ...string) ([]Checkpoint, error) {
	if err := ledger.Authorize(p, ledger.ActionReadReports); err != nil {
		return nil, err
	}
	var out []Checkpoint
	for _, s := range streams {
		cp, err := c.store.CheckpointSigning(ctx, s)
		switch {
		case errors.Is(err, ledger.ErrNotFound):
			continue
		case err != nil:
			return nil, err
		}
		if !slices.ContainsFunc(out, func(o Checkpoint) bool { return o.ID == cp.ID }) {
			out = append(out, cp)
		}
	}
	slices.SortFunc(out, func(a, b Checkpoint) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// Run signs checkpoints every interval while any stream moved since the
// latest, until ctx ends. Every replica runs it; the store's lock makes
// them take turns, and a replica that finds nothing new signs nothing.
func (c *Checkpoints) Run(ctx context.Context, interval time.Duration) error {
	if c.signer == nil {
		return nil
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if _, _, err := c.create(ctx, "system:checkpoints", false); err != nil && ctx.Err() == nil {
				c.log.WarnContext(ctx, "checkpoint failed", slog.Any("error", err)) // retried on the next tick
			}
		}
	}
}

// create signs checkpoints, one span after another, until the feed's final
// events are all covered, and returns the last one signed. Unless always,
// it signs none when nothing moved since the latest checkpoint.
func (c *Checkpoints) create(ctx context.Context, actor string, always bool) (Checkpoint, bool, error) {
	var (
		last  Checkpoint
		added bool
	)
	for {
		cp, ok, more, err := c.createOne(ctx, actor, always && !added)
		if err != nil {
			return last, added, err
		}
		if ok {
			last, added = cp, true
		}
		if !more {
			return last, added, nil
		}
	}
}

// createOne signs the span after the latest checkpoint; unless always, only
// when it holds an event. more says a full span was signed, so another may
// follow at once.
func (c *Checkpoints) createOne(ctx context.Context, actor string, always bool) (cp Checkpoint, added, more bool, err error) {
	if c.signer == nil {
		return Checkpoint{}, false, false, errNoCheckpointKey
	}
	now := ledger.StoredTime(c.clock.Now())
	cp, added, err = c.store.AddCheckpoint(ctx, c.spanLimit, func(latest *Checkpoint, span CheckpointSpan) (*Checkpoint, error) {
		more = span.Full
		if !always && len(span.Heads) == 0 {
			return nil, nil
		}
		id := int64(1)
		if latest != nil {
			id = latest.ID + 1
			if err := c.checkLatest(ctx, *latest); err != nil {
				return nil, err
			}
		}
		for _, h := range span.Heads {
			if prev, ok := span.Signed[h.Stream]; ok {
				if problem := movedBack(prev, h, id); problem != "" {
					// Signing it would let a tail removed after prev go
					// unseen: the feed's positions were changed.
					c.log.ErrorContext(ctx, "checkpoint refused: a stream's signed head would move back",
						slog.Int64("checkpoint", id), slog.String("stream", h.Stream),
						slog.Int64("signed_seq", int64(prev.Seq)), slog.Int64("signed_by", prev.Checkpoint),
						slog.Int64("span_seq", int64(h.Seq)))
					return nil, &ledger.ConflictError{Code: "checkpoint_head_moved_back", Detail: "the ledger refuses to sign: " + problem +
						"; the events' feed positions were changed behind the ledger's back (ledger/AUDIT.md)"}
				}
			}
		}
		heads := span.Heads
		if heads == nil {
			heads = []StreamHead{}
		}
		headsJSON, err := json.Marshal(heads)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(headsJSON)
		payload := CheckpointPayload{LedgerID: c.ledgerID, ID: id, At: now, Through: span.Through, Streams: heads}
		if latest != nil {
			prev := sha256.Sum256([]byte(latest.JWS))
			payload.Previous = hex.EncodeToString(prev[:])
			if !payload.At.After(latest.At) {
				payload.At = latest.At.Add(time.Microsecond) // checkpoints are ordered in time too
			}
		}
		raw, err := json.Marshal(payload)
		if err != nil {
			return nil, err
		}
		jws, kid, err := c.signer.SignCheckpoint(raw)
		if err != nil {
			return nil, fmt.Errorf("sign checkpoint %d: %w", payload.ID, err)
		}
		return &Checkpoint{
			ID: payload.ID, At: payload.At, CreatedBy: actor, KeyID: kid, Streams: len(heads), Through: span.Through,
			HeadsSHA256: sum[:], Payload: raw, JWS: jws,
		}, nil
	})
	return cp, added, more && added, err
}

// checkLatest refuses to chain onto a latest checkpoint the ledger did not
// sign: its JWS must verify with the ledger's own keys and sign the id and
// span end stored with it. A row inserted at the next id by a role that
// may append to checkpoints but holds no key would otherwise have every
// later checkpoint chain onto it, and verify-chain stops reading at a
// checkpoint that does not verify.
func (c *Checkpoints) checkLatest(ctx context.Context, latest Checkpoint) error {
	p, err := c.signer.VerifyCheckpoint(latest.JWS)
	problem := ""
	switch {
	case err != nil:
		problem = fmt.Sprintf("checkpoint %d does not verify with the ledger's keys: %v", latest.ID, err)
	case p.ID != latest.ID || p.Through != latest.Through:
		problem = fmt.Sprintf("checkpoint %d is stored with the JWS of checkpoint %d (through %d, stored %d)", latest.ID, p.ID, p.Through, latest.Through)
	default:
		return nil
	}
	c.log.ErrorContext(ctx, "checkpoint refused: the latest checkpoint is not the ledger's", slog.Int64("checkpoint", latest.ID), slog.String("problem", problem))
	return &ledger.ConflictError{Code: "checkpoint_previous_invalid", Detail: "the ledger refuses to chain onto it: " + problem +
		"; the row was written behind the ledger's back (ledger/AUDIT.md)"}
}

// CheckpointFollows checks that next is the checkpoint after prev, whose
// compact JWS is prevJWS: the next id, prev's JWS hash as its previous,
// and a later time. A checkpoint missing from a chain, or one put back
// changed, breaks it there.
func CheckpointFollows(prev CheckpointPayload, prevJWS string, next CheckpointPayload) error {
	sum := sha256.Sum256([]byte(prevJWS))
	switch {
	case next.ID != prev.ID+1:
		return fmt.Errorf("checkpoint %d follows checkpoint %d: checkpoints %d..%d are missing", next.ID, prev.ID, prev.ID+1, next.ID-1)
	case next.Previous != hex.EncodeToString(sum[:]):
		return fmt.Errorf("checkpoint %d does not name checkpoint %d's JWS as its previous: checkpoint %d was changed", next.ID, prev.ID, prev.ID)
	case !next.At.After(prev.At):
		return fmt.Errorf("checkpoint %d is signed at %s, not after checkpoint %d (%s)", next.ID, next.At.Format(time.RFC3339Nano), prev.ID, prev.At.Format(time.RFC3339Nano))
	}
	return nil
}

// SignedHead is a stream's head as the latest checkpoint listing the
// stream signed it.
type SignedHead struct {
	StreamHead
	// Checkpoint is the id of the checkpoint that signed it.
	Checkpoint int64
	// Full says that checkpoint is one signed before checkpoints were
	// incremental (no Through), which lists every stream: the incremental
	// checkpoints after it cover the feed again from its start, and sign
	// older heads of a stream until they reach the one it signed.
	Full bool
	// MovedBack, when not empty, says how a later checkpoint signed the
	// stream back at an older head (movedBack): a break, since it would
	// hide a tail removed after the head signed before. StreamHead stays
	// the furthest head signed.
	MovedBack string
}

// movedBack says how next, signed by checkpoint nextID after prev for the
// same stream, moves the stream back — a lower position, or the same
// position with another hash — and is empty when it does not. A stream's
// events are only ever appended, so its signed head only moves forward;
// one signed again at the same head is the same head. Only a lower
// position after a full checkpoint's head is not a move back: the
// incremental checkpoints after it start again from the feed's start.
func movedBack(prev SignedHead, next StreamHead, nextID int64) string {
	switch {
	case next.Seq < prev.Seq && !prev.Full:
		return fmt.Sprintf("checkpoint %d signs this stream at event %d, behind event %d that checkpoint %d signed", nextID, next.Seq, prev.Seq, prev.Checkpoint)
	case next.Seq == prev.Seq && next.Hash != prev.Hash:
		return fmt.Sprintf("checkpoint %d signs event %d of this stream with hash %s; checkpoint %d signed it with hash %s", nextID, next.Seq, next.Hash, prev.Checkpoint, prev.Hash)
	}
	return ""
}

// SignedHeads is each stream's signed head, folded from checkpoints read
// oldest first: a later checkpoint's head of a stream replaces an earlier
// one's, unless it moves the stream back (a break CheckStreams reports).
type SignedHeads map[string]SignedHead

// Add folds in the heads p signs. A head that moves its stream back is
// kept as the stream's MovedBack, and the furthest head stays the one the
// stream must reach.
func (s SignedHeads) Add(p CheckpointPayload) {
	for _, h := range p.Streams {
		prev, ok := s[h.Stream]
		if ok {
			if problem := movedBack(prev, h, p.ID); problem != "" {
				if prev.MovedBack == "" {
					prev.MovedBack = problem
				}
				s[h.Stream] = prev
				continue
			}
		}
		if ok && prev.Full && h.Seq < prev.Seq {
			continue // not there yet: the stream must still reach the full checkpoint's head
		}
		s[h.Stream] = SignedHead{StreamHead: h, Checkpoint: p.ID, Full: p.Through == 0, MovedBack: prev.MovedBack}
	}
}

// CheckpointBreak is one way a stream's events fail to reach the head a
// checkpoint signed.
type CheckpointBreak struct {
	Stream  string
	Problem string
}

// CheckStreams compares every stream's events (each in stream order, as
// read back) with its signed head: a stream with a signed head must still
// have an event at the signed position, with the signed hash. A stream that
// is shorter (its tail was removed), whose event there has another hash
// (rewritten), or that is gone is a break, and so is a stream a later
// checkpoint signed back at an older head (SignedHead.MovedBack). Events after the head are not
// judged here: the next checkpoint covers them. The chains themselves are
// checked by VerifyChain.
func CheckStreams(heads SignedHeads, streams map[string][]ledger.Event) []CheckpointBreak {
	var breaks []CheckpointBreak
	for _, name := range slices.Sorted(maps.Keys(heads)) {
		h := heads[name]
		if h.MovedBack != "" {
			breaks = append(breaks, CheckpointBreak{h.Stream, h.MovedBack + " (a signed head never moves back)"})
		}
		events := streams[h.Stream]
		switch {
		case h.Seq < 1:
			breaks = append(breaks, CheckpointBreak{h.Stream, fmt.Sprintf("checkpoint %d names position %d, which no event has", h.Checkpoint, h.Seq)})
		case len(events) == 0:
			breaks = append(breaks, CheckpointBreak{h.Stream, fmt.Sprintf("checkpoint %d signed %d event(s) in this stream; none is left", h.Checkpoint, h.Seq)})
		case int(h.Seq) > len(events):
			breaks = append(breaks, CheckpointBreak{h.Stream, fmt.Sprintf("checkpoint %d signed %d event(s) in this stream; only %d are left (its tail was removed)", h.Checkpoint, h.Seq, len(events))})
		default:
			if e := events[h.Seq-1]; e.StreamSeq != h.Seq || hex.EncodeToString(e.Hash) != h.Hash {
				breaks = append(breaks, CheckpointBreak{h.Stream, fmt.Sprintf("checkpoint %d signed event %d with hash %s; the log has %s there (rewritten)", h.Checkpoint, h.Seq, h.Hash, hex.EncodeToString(e.Hash))})
			}
		}
	}
	return breaks
}
