package ledger

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"
)

// Signed checkpoints (ledger/AUDIT.md). A hash chain shows that nothing in
// the middle of a stream changed, but a valid prefix of a chain verifies:
// removing a stream's last events leaves a chain that still checks. A
// checkpoint is the ledger's signature over the head (last stream_seq and
// hash) of every stream at one moment, so a tail removed or rewritten up to
// a checkpoint no longer reaches the head it signed. Events appended after
// the latest checkpoint are covered only by the next one.

// CheckpointType is the JWS "typ" of a signed checkpoint.
const CheckpointType = "quittance-checkpoint+json"

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
	// Streams is every stream's head, ordered by stream.
	Streams []StreamHead `json:"streams"`
}

// Checkpoint is a stored, signed checkpoint.
type Checkpoint struct {
	ID        int64
	At        time.Time
	CreatedBy string // the actor: a principal, or "system:checkpoints"
	KeyID     string // the kid of the ledger key that signed it
	Streams   int
	// HeadsSHA256 is the SHA-256 of the heads' JSON, to tell whether any
	// stream moved since.
	HeadsSHA256 []byte
	// Payload is the signed JSON (CheckpointPayload) byte for byte; JWS is
	// its compact JWS.
	Payload []byte
	JWS     string
}

// CheckpointSigner signs a checkpoint's payload with the ledger's own key
// (the one published at /.well-known/jwks.json). compensation.Identity is
// one.
type CheckpointSigner interface {
	// SignCheckpoint returns the compact JWS of payload (typ
	// CheckpointType) and the kid that signed it.
	SignCheckpoint(payload []byte) (jws, kid string, err error)
}

// CheckpointStore keeps checkpoints. Error contract: as Store.
type CheckpointStore interface {
	// AddCheckpoint, in one transaction and under a lock that serializes
	// every replica's checkpoints, reads the latest checkpoint (nil when
	// there is none) and every stream's head, ordered by stream, and
	// passes them to build; it stores the checkpoint build returns, unless
	// build returns nil. added is false when nothing was stored.
	AddCheckpoint(ctx context.Context, build func(latest *Checkpoint, heads []StreamHead) (*Checkpoint, error)) (c Checkpoint, added bool, err error)
	// LatestCheckpoint returns the newest checkpoint, or ErrNotFound.
	LatestCheckpoint(ctx context.Context) (Checkpoint, error)
	// Checkpoints returns up to limit checkpoints after afterID, oldest first.
	Checkpoints(ctx context.Context, afterID int64, limit int) ([]Checkpoint, error)
}

// Checkpoints signs, stores and serves checkpoints.
type Checkpoints struct {
	store    CheckpointStore
	signer   CheckpointSigner // nil: no signing key, no checkpoints
	ledgerID string
	clock    Clock
	log      *slog.Logger
}

// NewCheckpoints returns the checkpoint service. A nil signer (the service
// runs without QUITTANCE_SIGNING_KEY_FILE) signs nothing: creating one is
// a conflict, and the periodic loop does nothing.
func NewCheckpoints(store CheckpointStore, signer CheckpointSigner, ledgerID string, clock Clock, log *slog.Logger) *Checkpoints {
	if clock == nil {
		clock = SystemClock{}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Checkpoints{store: store, signer: signer, ledgerID: ledgerID, clock: clock, log: log}
}

// errNoCheckpointKey refuses a checkpoint when the ledger has no signing key.
var errNoCheckpointKey = &ConflictError{Code: "checkpoints_unavailable",
	Detail: "the ledger has no signing key (QUITTANCE_SIGNING_KEY_FILE), so it signs no checkpoints"}

// Create signs and stores a checkpoint now, on an on-call principal's
// request, even when no stream moved since the latest one.
func (c *Checkpoints) Create(ctx context.Context, p Principal) (Checkpoint, error) {
	if err := Authorize(p, ActionAdminister); err != nil {
		return Checkpoint{}, err
	}
	cp, _, err := c.create(ctx, p.Actor(), true)
	return cp, err
}

// Latest returns the newest checkpoint (finance and on-call).
func (c *Checkpoints) Latest(ctx context.Context, p Principal) (Checkpoint, error) {
	if err := Authorize(p, ActionReadReports); err != nil {
		return Checkpoint{}, err
	}
	return c.store.LatestCheckpoint(ctx)
}

// List returns up to limit checkpoints after afterID, oldest first
// (finance and on-call).
func (c *Checkpoints) List(ctx context.Context, p Principal, afterID int64, limit int) ([]Checkpoint, error) {
	if err := Authorize(p, ActionReadReports); err != nil {
		return nil, err
	}
	if afterID < 0 {
		return nil, Invalid("after", "must not be negative")
	}
	if limit <= 0 {
		limit = defaultListLimit
	}
	return c.store.Checkpoints(ctx, afterID, min(limit, maxListLimit))
}

// Run signs a checkpoint every interval while any stream moved since the
// latest, until ctx ends. Every replica runs it; the store's lock makes
// them take turns, and a replica that finds the heads already signed by
// another signs nothing.
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

// create signs the current heads; unless always, only when they differ
// from the latest checkpoint's.
func (c *Checkpoints) create(ctx context.Context, actor string, always bool) (Checkpoint, bool, error) {
	if c.signer == nil {
		return Checkpoint{}, false, errNoCheckpointKey
	}
	now := c.clock.Now().UTC().Truncate(time.Microsecond)
	return c.store.AddCheckpoint(ctx, func(latest *Checkpoint, heads []StreamHead) (*Checkpoint, error) {
		headsJSON, err := json.Marshal(heads)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(headsJSON)
		if !always && latest != nil && bytes.Equal(latest.HeadsSHA256, sum[:]) {
			return nil, nil
		}
		payload := CheckpointPayload{LedgerID: c.ledgerID, ID: 1, At: now, Streams: heads}
		if latest != nil {
			payload.ID = latest.ID + 1
			prev := sha256.Sum256([]byte(latest.JWS))
			payload.Previous = hex.EncodeToString(prev[:])
			if !payload.At.After(latest.At) {
				payload.At = latest.At.Add(time.Microsecond) // checkpoints are ordered in time too
			}
		}
		if payload.Streams == nil {
			payload.Streams = []StreamHead{}
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
			ID: payload.ID, At: payload.At, CreatedBy: actor, KeyID: kid, Streams: len(heads),
			HeadsSHA256: sum[:], Payload: raw, JWS: jws,
		}, nil
	})
}

// CheckpointBreak is one way a stream's events fail to reach the head a
// checkpoint signed.
type CheckpointBreak struct {
	Stream  string
	Problem string
}

// CheckStreamsAgainstCheckpoint compares every stream's events (each in
// stream order, as read back) with a checkpoint's heads: a stream the
// checkpoint names must still have an event at the signed position, with
// the signed hash. A stream that is shorter (its tail was removed), whose
// event there has another hash (rewritten), or that is gone is a break.
// Events after the head are not judged here: the next checkpoint covers
// them. The chains themselves are checked by VerifyChain.
func CheckStreamsAgainstCheckpoint(p CheckpointPayload, streams map[string][]Event) []CheckpointBreak {
	var breaks []CheckpointBreak
	for _, h := range p.Streams {
		events := streams[h.Stream]
		switch {
		case h.Seq < 1:
			breaks = append(breaks, CheckpointBreak{h.Stream, fmt.Sprintf("checkpoint %d names position %d, which no event has", p.ID, h.Seq)})
		case len(events) == 0:
			breaks = append(breaks, CheckpointBreak{h.Stream, fmt.Sprintf("checkpoint %d signed %d event(s) in this stream; none is left", p.ID, h.Seq)})
		case int(h.Seq) > len(events):
			breaks = append(breaks, CheckpointBreak{h.Stream, fmt.Sprintf("checkpoint %d signed %d event(s) in this stream; only %d are left (its tail was removed)", p.ID, h.Seq, len(events))})
		default:
			if e := events[h.Seq-1]; e.StreamSeq != h.Seq || hex.EncodeToString(e.Hash) != h.Hash {
				breaks = append(breaks, CheckpointBreak{h.Stream, fmt.Sprintf("checkpoint %d signed event %d with hash %s; the log has %s there (rewritten)", p.ID, h.Seq, h.Hash, hex.EncodeToString(e.Hash))})
			}
		}
	}
	return breaks
}
