package a2a

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// The seed corpora live in testdata/fuzz/<FuzzName>.

func FuzzDecodeRPCResponse(f *testing.F) {
	f.Fuzz(func(t *testing.T, body []byte) {
		res, err := decodeRPCResponse(body, 1)
		if err == nil && !present(res) {
			t.Fatalf("no error and no result for %q", body)
		}
		var rpcErr *RPCError
		if err != nil && !errors.As(err, &rpcErr) && !errors.Is(err, ErrMalformedResponse) {
			t.Fatalf("untyped error %v", err)
		}
		if err == nil {
			// Whatever the result, decoding it must not panic.
			_, _ = decodeSendResult(res)
			_, _ = decodeTaskResult(res)
		}
	})
}

func FuzzSSEReader(f *testing.F) {
	const max = 4096
	f.Fuzz(func(t *testing.T, stream []byte) {
		r := newSSEReader(bytes.NewReader(stream), max)
		for i := 0; ; i++ {
			ev, err := r.Next()
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, ErrBodyTooLarge) {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if len(ev.Data) > max {
				t.Fatalf("event of %d bytes exceeds the cap", len(ev.Data))
			}
			if i > len(stream) {
				t.Fatal("more events than input bytes")
			}
		}
	})
}

func FuzzParsePushNotification(f *testing.F) {
	f.Fuzz(func(t *testing.T, body []byte) {
		ev, err := ParsePushNotification(body)
		if err != nil {
			if !errors.Is(err, ErrMalformedResponse) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if ev.TaskID() == "" {
			t.Fatal("accepted a notification without a task id")
		}
		n := 0
		for _, set := range []bool{ev.Task != nil, ev.Message != nil, ev.StatusUpdate != nil, ev.ArtifactUpdate != nil} {
			if set {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("event has %d members set", n)
		}
		if ev.Task != nil && ev.Task.Status.State == "" || ev.StatusUpdate != nil && ev.StatusUpdate.Status.State == "" {
			t.Fatal("accepted a task without a state")
		}
	})
}
