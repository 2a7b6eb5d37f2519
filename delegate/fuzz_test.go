package delegate

import (
	"bytes"
	"errors"
	"io"
	"net/netip"
	"net/url"
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

func FuzzValidateURL(f *testing.F) {
	policies := []EgressPolicy{{}, loopbackPolicy}
	f.Fuzz(func(t *testing.T, raw string) {
		for _, p := range policies {
			if err := ValidateURL(p, raw); err != nil {
				if !errors.Is(err, ErrEgressDenied) {
					t.Fatalf("untyped error %v", err)
				}
				continue
			}
			u, err := url.Parse(raw)
			if err != nil {
				t.Fatalf("accepted unparsable %q", raw)
			}
			if u.Scheme != "https" && !(p.AllowHTTP && u.Scheme == "http") {
				t.Fatalf("accepted scheme %q with AllowHTTP=%v", u.Scheme, p.AllowHTTP)
			}
			if u.User != nil || u.Host == "" {
				t.Fatalf("accepted %q with userinfo or without host", raw)
			}
			if addr, err := netip.ParseAddr(u.Hostname()); err == nil {
				if err := p.guardian().SafeAddr(addr.Unmap()); err != nil {
					t.Fatalf("accepted forbidden address in %q: %v", raw, err)
				}
			}
		}
	})
}
