package a2a

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func readAllEvents(t *testing.T, input string, max int) ([]sseEvent, error) {
	t.Helper()
	r := newSSEReader(strings.NewReader(input), max)
	var out []sseEvent
	for {
		ev, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, ev)
	}
}

func TestSSEReader(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("a", 100<<10)
	tests := []struct {
		name  string
		input string
		want  []sseEvent
	}{
		{"space after colon", "data: {\"a\":1}\n\n", []sseEvent{{Data: []byte(`{"a":1}`)}}},
		{"no space after colon", "data:{\"a\":1}\n\n", []sseEvent{{Data: []byte(`{"a":1}`)}}},
		{"only one space removed", "data:  x\n\n", []sseEvent{{Data: []byte(" x")}}},
		{"multi-line data", "data: line1\ndata: line2\ndata:\n\n", []sseEvent{{Data: []byte("line1\nline2\n")}}},
		{"id and event kept", "id: 42\nevent: update\ndata: x\n\n", []sseEvent{{ID: "42", Event: "update", Data: []byte("x")}}},
		{"id persists", "id: 1\ndata: a\n\ndata: b\n\n", []sseEvent{{ID: "1", Data: []byte("a")}, {ID: "1", Data: []byte("b")}}},
		{"comments and heartbeats", ": keep-alive\n\n:\n\ndata: x\n: in between\n\n: trailing\n\n", []sseEvent{{Data: []byte("x")}}},
		{"event without data not dispatched", "event: ping\n\ndata: x\n\n", []sseEvent{{Data: []byte("x")}}},
		{"CRLF", "id: 7\r\ndata: a\r\ndata: b\r\n\r\n", []sseEvent{{ID: "7", Data: []byte("a\nb")}}},
		{"unknown fields ignored", "retry: 1000\nfoo: bar\ndata: x\n\n", []sseEvent{{Data: []byte("x")}}},
		{"100 KiB event", "data: " + big + "\n\n", []sseEvent{{Data: []byte(big)}}},
		{"unterminated last event dropped", "data: a\n\ndata: b\n", []sseEvent{{Data: []byte("a")}}},
		{"unterminated last line dropped", "data: a\n\ndata: b", []sseEvent{{Data: []byte("a")}}},
		{"empty stream", "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := readAllEvents(t, tc.input, maxEventBytes)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d events, want %d", len(got), len(tc.want))
			}
			for i := range got {
				if got[i].ID != tc.want[i].ID || got[i].Event != tc.want[i].Event || string(got[i].Data) != string(tc.want[i].Data) {
					t.Fatalf("event %d = %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestSSEReaderCap(t *testing.T) {
	t.Parallel()
	for name, input := range map[string]string{
		"one long line":    "data: " + strings.Repeat("a", 2000) + "\n\n",
		"many short lines": strings.Repeat("data: "+strings.Repeat("a", 100)+"\n", 20) + "\n",
		"long comment":     ":" + strings.Repeat("a", 2000) + "\n\n",
	} {
		if _, err := readAllEvents(t, input, 1024); !errors.Is(err, ErrBodyTooLarge) {
			t.Errorf("%s: got %v, want ErrBodyTooLarge", name, err)
		}
	}
	got, err := readAllEvents(t, "data: "+strings.Repeat("a", 1000)+"\n\n", 1024)
	if err != nil || len(got) != 1 {
		t.Fatalf("under the cap: %v, %v", got, err)
	}
}
