package ledger

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/quittance/quittance/internal/text"
)

// Remote text is data. Status messages, receipts, error texts, agent cards
// and task snapshots come from other organizations' agents and may hold
// anything: a NUL character, bytes that are not UTF-8, a JSON \u escape
// of half a surrogate pair, a number with an exponent of a million. None of
// that may stop Quittance from recording what it saw, and the database
// refuses all of it (a NUL in text or jsonb, invalid UTF-8 anywhere, a
// number outside what jsonb's numeric can hold). StorableText and
// StorableJSON are the one definition of what is stored instead: the
// store passes every text and JSON value it writes through them, and the
// ledger compares remote text in the same form
// (compensation.Service.ObserveTaskStatus), so an
// observation that was cleaned the same way twice is the same observation.
// StorableEvent applies them to an event before it is hashed, so the hash
// covers exactly what is stored.

// replacement is what a character PostgreSQL cannot store becomes.
const replacement = "\uFFFD"

// RawDataKey is the key under which StorableEvent keeps, base64-encoded,
// an event's data as it was given when StorableJSON had to replace text in
// it: the cleaned data is what the event shows, the raw bytes are what the
// remote sent, kept as evidence.
const RawDataKey = "raw_data_base64"

// maxNumericDigits bounds the digits a JSON number may take in PostgreSQL's
// numeric form, before and after the decimal point: a longer one (1e131072
// overflows numeric; 1e100000 is eight bytes that jsonb stores as a
// hundred thousand) is stored as a JSON string of its literal instead.
const maxNumericDigits = 1000

// StorableText returns s with every NUL character and every byte that is
// not part of valid UTF-8 replaced by U+FFFD, and whether it had to.
// PostgreSQL's text refuses both.
func StorableText(s string) (string, bool) {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s, false
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1, r == 0:
			b.WriteString(replacement)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String(), true
}

// StorableTruncated returns s cut to at most n bytes (text.Truncate, which
// never splits a rune) and then made storable (StorableText): how a bounded
// sample of remote text, such as an error an org's server caused, is kept.
// A byte that is not UTF-8 becomes three, so the result may exceed n by
// twice the number of such bytes.
func StorableTruncated(s string, n int) string {
	s, _ = StorableText(text.Truncate(s, n))
	return s
}

// StorableJSON returns raw as a JSON text that PostgreSQL's jsonb accepts,
// and whether it had to change anything: NULs and invalid UTF-8 in strings
// and keys become U+FFFD (as StorableText), \u escapes of unpaired
// surrogates become U+FFFD, and numbers whose numeric form would exceed
// maxNumericDigits digits become strings of their literal. When nothing had
// to change, raw itself is returned; otherwise the result is in canonical
// form (CanonicalJSON). Keys that clean to the same text keep the value of
// the last in byte order. raw that is not JSON is an error.
func StorableJSON(raw []byte) (json.RawMessage, bool, error) {
	clean, changed, err := storableData(raw)
	if err != nil {
		return nil, false, err
	}
	if !changed {
		return raw, false, nil
	}
	out, err := json.Marshal(clean)
	if err != nil {
		return nil, false, err
	}
	return out, true, nil
}

// storableData is raw decoded (decodeJSON) and cleaned (storableValue), and
// whether cleaning changed it (see StorableJSON). Encoded with
// json.Marshal, it is StorableJSON's result in canonical form.
func storableData(raw []byte) (any, bool, error) {
	v, err := decodeJSON(raw)
	if err != nil {
		return nil, false, err
	}
	clean, changed := storableValue(v)
	return clean, changed || !utf8.Valid(raw) || hasLoneSurrogate(raw), nil
}

// CanonicalJSON re-encodes a JSON value with object keys sorted, no
// insignificant whitespace and, of duplicate keys, the last; numbers keep
// their literal text. It is idempotent, and it is the form an event's data
// is stored and hashed in.
func CanonicalJSON(raw []byte) (json.RawMessage, error) {
	if len(raw) == 0 {
		return json.RawMessage("null"), nil
	}
	v, err := decodeJSON(raw)
	if err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// StorableEvent returns e as it is stored and hashed: its text fields
// through StorableText, its data through StorableJSON and then in
// canonical form. When the data had to be cleaned and is a JSON object, the
// data as given is kept in it under RawDataKey.
func StorableEvent(e Event) (Event, error) {
	e.Stream, _ = StorableText(e.Stream)
	e.Actor, _ = StorableText(e.Actor)
	e.Evidence, _ = StorableText(e.Evidence)
	if len(e.Data) == 0 {
		return e, nil // no data: the store refuses it
	}
	// The data is decoded once, for every event appended: the cleaned
	// value, encoded, is both storable and canonical, as CanonicalJSON of
	// StorableJSON's result would be.
	clean, changed, err := storableData(e.Data)
	if err != nil {
		return Event{}, fmt.Errorf("event data: %w", err)
	}
	if obj, ok := clean.(map[string]any); ok && changed {
		obj[RawDataKey] = base64.StdEncoding.EncodeToString(e.Data)
	}
	if e.Data, err = json.Marshal(clean); err != nil {
		return Event{}, err
	}
	return e, nil
}

// decodeJSON decodes one JSON value, numbers as json.Number; trailing data
// is an error.
func decodeJSON(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("invalid JSON: data after the value")
	}
	return v, nil
}

// storableValue cleans a decoded JSON value (see StorableJSON).
func storableValue(v any) (any, bool) {
	switch x := v.(type) {
	case string:
		return StorableText(x)
	case json.Number:
		if numberStorable(string(x)) {
			return x, false
		}
		return string(x), true
	case []any:
		changed := false
		for i, el := range x {
			var c bool
			x[i], c = storableValue(el)
			changed = changed || c
		}
		return x, changed
	case map[string]any:
		changed := false
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		out := make(map[string]any, len(x))
		for _, k := range keys {
			ck, c1 := StorableText(k)
			cv, c2 := storableValue(x[k])
			out[ck] = cv
			changed = changed || c1 || c2
		}
		return out, changed
	default:
		return v, false
	}
}

// numberStorable reports whether a JSON number literal fits PostgreSQL's
// numeric within maxNumericDigits digits before and after the point.
func numberStorable(lit string) bool {
	mant, exp := lit, 0
	if i := strings.IndexAny(lit, "eE"); i >= 0 {
		mant = lit[:i]
		e, err := strconv.Atoi(strings.TrimPrefix(lit[i+1:], "+"))
		if err != nil || e > 1<<20 || e < -(1<<20) {
			return false
		}
		exp = e
	}
	mant = strings.TrimPrefix(mant, "-")
	intPart, frac, _ := strings.Cut(mant, ".")
	intDigits := len(strings.TrimLeft(intPart, "0"))
	if intDigits == 0 {
		// The value's first significant digit is in the fraction, if any.
		if t := strings.TrimLeft(frac, "0"); t != "" {
			intDigits = len(t) - len(frac)
		}
	}
	if strings.Trim(intPart+frac, "0") != "" {
		intDigits += exp
	} else {
		intDigits = 0
	}
	fracDigits := len(frac) - exp
	return intDigits <= maxNumericDigits && fracDigits <= maxNumericDigits
}

// hasLoneSurrogate reports whether raw has a \u escape of a surrogate that
// is not half of a pair: encoding/json decodes it as U+FFFD, and jsonb
// refuses it.
func hasLoneSurrogate(raw []byte) bool {
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' || i+1 >= len(raw) {
			continue
		}
		if raw[i+1] != 'u' {
			i++ // an escape of one character: skip it (it may be a backslash)
			continue
		}
		r, ok := hex4(raw, i+2)
		if !ok {
			continue
		}
		switch {
		case r >= 0xD800 && r <= 0xDBFF:
			if i+11 < len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u' {
				if lo, ok := hex4(raw, i+8); ok && lo >= 0xDC00 && lo <= 0xDFFF {
					i += 11
					continue
				}
			}
			return true
		case r >= 0xDC00 && r <= 0xDFFF:
			return true
		}
		i += 5
	}
	return false
}

func hex4(raw []byte, at int) (rune, bool) {
	if at+4 > len(raw) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(raw[at:at+4]), 16, 32)
	return rune(n), err == nil
}
