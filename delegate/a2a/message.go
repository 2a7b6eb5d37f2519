package a2a

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// ParseMessageContent decodes the content of a user message as a client
// that does not speak A2A itself supplies it: a JSON object
// {"parts": [...], "metadata": {...}}, parts in the A2A v1.0 shape (text,
// data, url or raw, with mediaType, filename and metadata) or the v0.3
// "kind" shape. There must be 1 to maxParts parts, each with exactly one of
// text, data, url and raw (or a v0.3 file); metadata, if any, must be an
// object; nothing may follow the object. The message has RoleUser; the
// caller sets its ids.
func ParseMessageContent(raw []byte, maxParts int) (Message, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	var m struct {
		Parts    []wirePart      `json:"parts"`
		Metadata json.RawMessage `json:"metadata"`
	}
	if err := dec.Decode(&m); err != nil {
		return Message{}, fmt.Errorf("not a JSON message object: %w", err)
	}
	if dec.More() {
		return Message{}, errors.New("trailing data after the message")
	}
	if len(m.Parts) == 0 || len(m.Parts) > maxParts {
		return Message{}, fmt.Errorf("must have 1 to %d parts", maxParts)
	}
	for i, p := range m.Parts {
		n := 0
		for _, set := range []bool{p.Text != "", present(p.Data), p.URL != "", p.Raw != "", p.File != nil} {
			if set {
				n++
			}
		}
		if n != 1 {
			return Message{}, fmt.Errorf("part %d must have exactly one of text, data, url and raw", i)
		}
	}
	if present(m.Metadata) && !bytes.HasPrefix(bytes.TrimSpace(m.Metadata), []byte("{")) {
		return Message{}, errors.New("metadata must be an object")
	}
	parts, err := normalizeParts(m.Parts)
	if err != nil {
		return Message{}, err
	}
	return Message{Role: RoleUser, Parts: parts, Metadata: nonNull(m.Metadata)}, nil
}
