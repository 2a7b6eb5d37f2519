package httpapi_test

import (
	"bytes"
	"testing"
)

// TestA2ACompensationKeepsMessageIDAfterUnprovenReply: the first
// compensation request is answered by a reply that does not prove the
// remote did not process it — a JSON-RPC response for another request id,
// or a body over the client's 8 MiB cap — and the resend is answered with
// a receipt. Neither reply starts a new round: the resend carries the same
// messageId, and the receipt compensates.
func TestA2ACompensationKeepsMessageIDAfterUnprovenReply(t *testing.T) {
	t.Parallel()
	for name, reply := range map[string]rawBody{
		"mismatched id": rawBody(`{"jsonrpc":"2.0","id":"not-your-request","result":{"kind":"task","id":"comp-x","contextId":"c","status":{"state":"working"}}}`),
		"body over cap": rawBody(append(append([]byte(`{"jsonrpc":"2.0","id":1,"result":{"kind":"task","id":"comp-x","contextId":"c","status":{"state":"working"},"metadata":{"pad":"`),
			bytes.Repeat([]byte("x"), 8<<20+1)...), `"}}}`...)),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e, got, ids := compensationResends(t, "unproven", reply)
			if got.HoldState != "returned" {
				t.Fatalf("after compensation: %+v", got)
			}
			if len(ids) != 2 || ids[0] != ids[1] {
				t.Fatalf("compensation request messageIds %v, want two, the same", ids)
			}
			e.CheckInvariants(t)
		})
	}
}
