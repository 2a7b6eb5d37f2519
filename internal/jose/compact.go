package jose

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"strings"
)

// MaxTokenSize is the largest token, in bytes, that ParseCompact and Verify
// accept. It matches the request body limit for application/jose evidence.
const MaxTokenSize = 16 << 10

// Compact is a structurally valid compact JWS, not yet verified: nothing
// read from it is trusted.
type Compact struct {
	text    string
	header  map[string]json.RawMessage
	payload []byte
	claims  map[string]json.RawMessage
}

// Header returns the header member name when it is a string; ok is false
// when it is present but not a string. A missing member is "", true.
func (c *Compact) Header(name string) (value string, ok bool) {
	return memberString(c.header, name)
}

// Claim returns the payload member name as Header does.
func (c *Compact) Claim(name string) (value string, ok bool) {
	return memberString(c.claims, name)
}

// ParseCompact checks size and structure: exactly three base64url parts in
// canonical unpadded form, a header and a payload that are JSON objects
// without duplicate members. Surrounding whitespace is ignored. The
// signature part may be empty here; it fails verification. Every error it
// returns is a *Refusal.
func ParseCompact(token []byte) (*Compact, error) {
	c, ref := parseCompact(token)
	if ref != nil {
		return nil, ref
	}
	return c, nil
}

func parseCompact(token []byte) (*Compact, *Refusal) {
	if len(token) > MaxTokenSize {
		return nil, refusef(TooLarge, "token exceeds %d bytes", MaxTokenSize)
	}
	text := strings.Trim(string(token), " \t\r\n")
	if ref := checkCompactText(text); ref != nil {
		return nil, ref
	}
	parts := strings.Split(text, ".")
	if len(parts) != 3 {
		return nil, refuse(Malformed, "a compact JWS has exactly three dot-separated parts")
	}
	if parts[0] == "" || parts[1] == "" {
		return nil, refuse(Malformed, "token header or payload is empty")
	}
	headerJSON, err := b64.DecodeString(parts[0])
	if err != nil {
		return nil, refuse(Malformed, "token header is not canonical unpadded base64url")
	}
	payload, err := b64.DecodeString(parts[1])
	if err != nil {
		return nil, refuse(Malformed, "token payload is not canonical unpadded base64url")
	}
	if _, err := b64.DecodeString(parts[2]); err != nil {
		return nil, refuse(Malformed, "token signature is not canonical unpadded base64url")
	}
	header, err := decodeObject(headerJSON)
	if err != nil {
		return nil, refusef(Malformed, "token header is not a JSON object: %v", err)
	}
	claims, err := decodeObject(payload)
	if err != nil {
		return nil, refusef(Malformed, "token payload is not a JSON object: %v", err)
	}
	return &Compact{text: text, header: header, payload: payload, claims: claims}, nil
}

// checkCompactText refuses an empty token, the JSON serialization and any
// character outside the base64url alphabet and the dot.
func checkCompactText(text string) *Refusal {
	if text == "" {
		return refuse(Malformed, "token is empty")
	}
	if text[0] == '{' {
		return refuse(Malformed, "JWS JSON serialization is not accepted; send the compact serialization")
	}
	for i := 0; i < len(text); i++ {
		if !isCompactChar(text[i]) {
			return refuse(Malformed, "token contains characters outside the base64url alphabet")
		}
	}
	return nil
}

// b64 decodes base64url without padding and refuses non-zero trailing bits, so a
// token has exactly one textual form.
var b64 = base64.RawURLEncoding.Strict()

func isCompactChar(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
}

var (
	errNotObject       = errors.New("not an object")
	errDuplicateMember = errors.New("duplicate member")
	errTrailingData    = errors.New("trailing data")
)

// decodeObject decodes a JSON object, keeping member names exactly as written, and
// refuses duplicate member names at any depth: two readers of a duplicated member
// may disagree on its value.
func decodeObject(data []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := checkValue(dec, 0); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errTrailingData
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil || obj == nil {
		return nil, errNotObject
	}
	return obj, nil
}

// maxJSONDepth bounds nesting in headers and claims.
const maxJSONDepth = 32

// checkValue reads one JSON value from dec and refuses duplicate object members.
// At depth 0 the value must be an object.
func checkValue(dec *json.Decoder, depth int) error {
	if depth > maxJSONDepth {
		return errors.New("nested too deeply")
	}
	tok, err := dec.Token()
	if err != nil {
		return errors.New("invalid JSON")
	}
	delim, isDelim := tok.(json.Delim)
	if depth == 0 && (!isDelim || delim != '{') {
		return errNotObject
	}
	if !isDelim {
		return nil
	}
	switch delim {
	case '{':
		seen := map[string]bool{}
		for dec.More() {
			nameTok, err := dec.Token()
			if err != nil {
				return errors.New("invalid JSON")
			}
			name, _ := nameTok.(string)
			if seen[name] {
				return errDuplicateMember
			}
			seen[name] = true
			if err := checkValue(dec, depth+1); err != nil {
				return err
			}
		}
	case '[':
		for dec.More() {
			if err := checkValue(dec, depth+1); err != nil {
				return err
			}
		}
	}
	if _, err := dec.Token(); err != nil { // closing delimiter
		return errors.New("invalid JSON")
	}
	return nil
}

// memberString returns a string member of a JSON object; ok is false when
// the member is present but not a string. A missing member is "", true.
func memberString(h map[string]json.RawMessage, name string) (string, bool) {
	raw, present := h[name]
	if !present {
		return "", true
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}
