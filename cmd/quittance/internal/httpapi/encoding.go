package httpapi

import (
	"encoding/json"
	"io"
	"time"
)

func jsonEncode(w io.Writer, v any) error { return json.NewEncoder(w).Encode(v) }

// rawJSON lets stored JSON pass through to a response unchanged.
func rawJSON(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return json.RawMessage(b)
}

// timePtr maps the zero time to an absent field.
func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
