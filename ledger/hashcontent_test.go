package ledger

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
)

// FuzzHashContent: an event's hash is that of the map of its keys its
// content stands for (json.Marshal sorts a map's keys), for any text in its
// fields, remote text included (invalid UTF-8, NULs, the characters
// json.Marshal escapes for HTML), with and without a delegation.
func FuzzHashContent(f *testing.F) {
	f.Add("token:orch", "delegation:x", "task_status_changed", "", "held", "compensated", int32(7), int64(1767225600123456789), []byte{1, 2}, `{"a":1}`)
	f.Add("a<b>&\u2028", "s\x00\xff", "t", "eyJ.e30.sig", "", "", int32(-1), int64(0), []byte(nil), `null`)
	f.Fuzz(func(t *testing.T, actor, stream, typ, evidence, from, to string, seq int32, at int64, prev []byte, data string) {
		if !json.Valid([]byte(data)) {
			t.Skip()
		}
		delegation, delegationID := uuid.Nil, ""
		if len(prev) > 0 {
			delegation = uuid.NewSHA1(uuid.Nil, prev)
			delegationID = delegation.String()
		}
		e := Event{
			Stream: stream, StreamSeq: seq, DelegationID: delegation, Type: EventType(typ),
			At: time.Unix(0, at), Actor: actor, ObligationFrom: ObligationState(from), ObligationTo: ObligationState(to),
			Evidence: evidence, PrevHash: prev,
		}
		want, err := json.Marshal(map[string]any{
			"actor":           e.Actor,
			"at":              e.At.UTC().Format(time.RFC3339Nano),
			"data":            json.RawMessage(data),
			"delegation_id":   delegationID,
			"evidence":        e.Evidence,
			"obligation_from": string(e.ObligationFrom),
			"obligation_to":   string(e.ObligationTo),
			"prev_hash":       hex.EncodeToString(e.PrevHash),
			"stream":          e.Stream,
			"stream_seq":      e.StreamSeq,
			"type":            string(e.Type),
		})
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(want)
		got, err := e.hashOver(json.RawMessage(data))
		if err != nil || !bytes.Equal(got, sum[:]) {
			t.Fatalf("hash %x, %v; want %x, the hash of\n%s", got, err, sum, want)
		}
	})
}
