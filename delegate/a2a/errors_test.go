package a2a

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/quittance/quittance/delegate/egress"
)

// loopbackPolicy is the test policy: plain http allowed, and 127.0.0.1 only
// among the special-purpose addresses, where httptest servers listen.
var loopbackPolicy = egress.Policy{AllowHTTP: true, AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}

func TestReadCapped(t *testing.T) {
	t.Parallel()
	if b, err := readCapped(strings.NewReader("12345"), 5); err != nil || string(b) != "12345" {
		t.Fatalf("at the cap: %q, %v", b, err)
	}
	if _, err := readCapped(strings.NewReader("123456"), 5); !errors.Is(err, ErrBodyTooLarge) {
		t.Fatalf("over the cap: %v", err)
	}
}

func TestRetryable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{&HTTPStatusError{StatusCode: 503}, true},
		{fmt.Errorf("x: %w", &HTTPStatusError{StatusCode: 500}), true},
		{&HTTPStatusError{StatusCode: 429}, true},
		{&HTTPStatusError{StatusCode: 408}, true},
		{&HTTPStatusError{StatusCode: 404}, false},
		{&HTTPStatusError{StatusCode: 400}, false},
		{&RPCError{Code: -32603}, false},
		{&RPCError{Code: -32001}, false},
		{context.DeadlineExceeded, true},
		{context.Canceled, false},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, true},
		{io.ErrUnexpectedEOF, true},
		{fmt.Errorf("%w: x", egress.ErrDenied), false},
		// A refusal at dial time is a net.OpError too: the refusal wins.
		{&net.OpError{Op: "dial", Err: fmt.Errorf("%w: x", egress.ErrDenied)}, false},
		{fmt.Errorf("%w: x", ErrMalformedResponse), false},
		{fmt.Errorf("%w: x", ErrBodyTooLarge), false},
		{errors.New("something else"), false},
	}
	for _, tc := range tests {
		if got := Retryable(tc.err); got != tc.want {
			t.Errorf("Retryable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestRetryableConnectionRefused(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+addr+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = egress.NewClient(loopbackPolicy).Do(req)
	if err == nil || !Retryable(err) {
		t.Fatalf("connection refused: %v, retryable %v", err, Retryable(err))
	}
}
