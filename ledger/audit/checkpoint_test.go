package audit_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/audit"
)

// TestCheckStreams: each way a stream can fail to reach its signed head is
// a break naming the stream and the checkpoint; a stream that grew after
// the checkpoint, or that no checkpoint names, is not. A stream's signed
// head is the one in the latest checkpoint that lists it.
func TestCheckStreams(t *testing.T) {
	chain := func(n int) []ledger.Event {
		events := make([]ledger.Event, n)
		for i := range events {
			events[i] = ledger.Event{StreamSeq: int32(i + 1), Hash: []byte{byte(i + 1), 0xaa}}
		}
		return events
	}
	head := func(stream string, seq int32) audit.StreamHead {
		return audit.StreamHead{Stream: stream, Seq: seq, Hash: hex.EncodeToString([]byte{byte(seq), 0xaa})}
	}
	heads := audit.SignedHeads{}
	heads.Add(audit.CheckpointPayload{ID: 6, Streams: []audit.StreamHead{
		head("budget:ok", 1), head("budget:short", 1), head("budget:earlier", 1),
	}})
	heads.Add(audit.CheckpointPayload{ID: 7, Streams: []audit.StreamHead{
		head("budget:ok", 2), head("budget:grew", 2), head("budget:short", 3), head("budget:gone", 1),
		head("budget:rewritten", 2), {Stream: "budget:zero", Seq: 0, Hash: "00"},
	}})
	rewritten := chain(2)
	rewritten[1].Hash = []byte{0xff}
	streams := map[string][]ledger.Event{
		"budget:ok": chain(2), "budget:grew": chain(5), "budget:short": chain(2),
		"budget:rewritten": rewritten, "budget:zero": chain(1), "budget:unnamed": chain(1),
		"budget:earlier": chain(1),
	}
	got := map[string]string{}
	for _, b := range audit.CheckStreams(heads, streams) {
		got[b.Stream] = b.Problem
	}
	want := map[string]string{
		"budget:short":     "only 2 are left",
		"budget:gone":      "none is left",
		"budget:rewritten": "rewritten",
		"budget:zero":      "which no event has",
	}
	if len(got) != len(want) {
		t.Errorf("breaks %v, want %v", got, want)
	}
	for stream, w := range want {
		if !strings.Contains(got[stream], w) || !strings.Contains(got[stream], "checkpoint 7") {
			t.Errorf("%s: %q, want it to say %q", stream, got[stream], w)
		}
	}
}

// TestSignedHeadsNeverMoveBack: a later checkpoint that signs a stream at
// an older head than an earlier one did — a lower position, or the same
// one with another hash — is a break, and the stream must still reach the
// furthest head signed, so a tail removed after it is one too. Signing the
// same head again is not; nor is an incremental checkpoint signing a lower
// head than a full one (from before checkpoints were incremental) did.
func TestSignedHeadsNeverMoveBack(t *testing.T) {
	chain := func(n int) []ledger.Event {
		events := make([]ledger.Event, n)
		for i := range events {
			events[i] = ledger.Event{StreamSeq: int32(i + 1), Hash: []byte{byte(i + 1), 0xaa}}
		}
		return events
	}
	head := func(stream string, seq int32) audit.StreamHead {
		return audit.StreamHead{Stream: stream, Seq: seq, Hash: hex.EncodeToString([]byte{byte(seq), 0xaa})}
	}
	heads := audit.SignedHeads{}
	heads.Add(audit.CheckpointPayload{ID: 1, Streams: []audit.StreamHead{head("budget:full", 3)}}) // full: no Through
	heads.Add(audit.CheckpointPayload{ID: 2, Through: 10, Streams: []audit.StreamHead{
		head("budget:full", 1), head("budget:a", 2), head("budget:b", 2), head("budget:same", 2),
	}})
	heads.Add(audit.CheckpointPayload{ID: 3, Through: 20, Streams: []audit.StreamHead{
		head("budget:full", 3), head("budget:a", 1), {Stream: "budget:b", Seq: 2, Hash: "ff"}, head("budget:same", 2),
	}})
	heads.Add(audit.CheckpointPayload{ID: 4, Through: 30, Streams: []audit.StreamHead{head("budget:a", 3)}})
	streams := map[string][]ledger.Event{
		// budget:a lost its events 2 and 3, which checkpoints 2 and 4 signed.
		"budget:a": chain(1), "budget:b": chain(2), "budget:same": chain(2), "budget:full": chain(3),
	}
	got := map[string][]string{}
	for _, b := range audit.CheckStreams(heads, streams) {
		got[b.Stream] = append(got[b.Stream], b.Problem)
	}
	want := map[string][]string{
		"budget:a": {"checkpoint 3 signs this stream at event 1, behind event 2 that checkpoint 2 signed", "checkpoint 4 signed 3 event(s) in this stream; only 1 are left"},
		"budget:b": {"checkpoint 3 signs event 2 of this stream with hash ff; checkpoint 2 signed it with hash 02aa"},
	}
	if len(got) != len(want) {
		t.Errorf("breaks %v, want %v", got, want)
	}
	for stream, ws := range want {
		if len(got[stream]) != len(ws) {
			t.Errorf("%s: %q, want %q", stream, got[stream], ws)
			continue
		}
		for i, w := range ws {
			if !strings.Contains(got[stream][i], w) {
				t.Errorf("%s: %q, want it to say %q", stream, got[stream][i], w)
			}
		}
	}
	if h := heads["budget:full"]; h.Checkpoint != 3 || h.Seq != 3 {
		t.Errorf("budget:full's signed head is %d by checkpoint %d, want 3 by checkpoint 3", h.Seq, h.Checkpoint)
	}
}

// TestCheckpointFollows: a chain of checkpoints breaks where one is missing,
// where one was changed after the next was signed, and where time runs
// backwards.
func TestCheckpointFollows(t *testing.T) {
	at := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	prev := audit.CheckpointPayload{ID: 4, At: at}
	const prevJWS = "header.payload.signature"
	sum := sha256.Sum256([]byte(prevJWS))
	next := audit.CheckpointPayload{ID: 5, At: at.Add(time.Minute), Previous: hex.EncodeToString(sum[:])}
	if err := audit.CheckpointFollows(prev, prevJWS, next); err != nil {
		t.Fatalf("the next checkpoint: %v", err)
	}
	for name, tc := range map[string]struct {
		next audit.CheckpointPayload
		want string
	}{
		"gap":     {audit.CheckpointPayload{ID: 7, At: next.At, Previous: next.Previous}, "checkpoints 5..6 are missing"},
		"changed": {audit.CheckpointPayload{ID: 5, At: next.At, Previous: "00"}, "checkpoint 4 was changed"},
		"time":    {audit.CheckpointPayload{ID: 5, At: at, Previous: next.Previous}, "not after checkpoint 4"},
	} {
		err := audit.CheckpointFollows(prev, prevJWS, tc.next)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}
