package ledger_test

import (
	"encoding/hex"
	"strings"
	"testing"

	"github.com/quittance/quittance/ledger"
)

// TestCheckStreamsAgainstCheckpoint: each way a stream can fail to reach
// the head a checkpoint signed is a break naming the stream; a stream that
// grew after the checkpoint, or that the checkpoint does not name, is not.
func TestCheckStreamsAgainstCheckpoint(t *testing.T) {
	chain := func(n int) []ledger.Event {
		events := make([]ledger.Event, n)
		for i := range events {
			events[i] = ledger.Event{StreamSeq: int32(i + 1), Hash: []byte{byte(i + 1), 0xaa}}
		}
		return events
	}
	head := func(stream string, seq int32) ledger.StreamHead {
		return ledger.StreamHead{Stream: stream, Seq: seq, Hash: hex.EncodeToString([]byte{byte(seq), 0xaa})}
	}
	cp := ledger.CheckpointPayload{ID: 7, Streams: []ledger.StreamHead{
		head("budget:ok", 2), head("budget:grew", 2), head("budget:short", 3), head("budget:gone", 1),
		head("budget:rewritten", 2), {Stream: "budget:zero", Seq: 0, Hash: "00"},
	}}
	rewritten := chain(2)
	rewritten[1].Hash = []byte{0xff}
	streams := map[string][]ledger.Event{
		"budget:ok": chain(2), "budget:grew": chain(5), "budget:short": chain(2),
		"budget:rewritten": rewritten, "budget:zero": chain(1), "budget:unnamed": chain(1),
	}
	got := map[string]string{}
	for _, b := range ledger.CheckStreamsAgainstCheckpoint(cp, streams) {
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
