package ledger

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestEventPayloadsCoverTheCatalogue: every event type of the catalogue
// has exactly one payload type, and no payload type names a type outside
// it. EventPayload has an unexported method, so
// no other package can add one, and a map is no event data.
func TestEventPayloadsCoverTheCatalogue(t *testing.T) {
	t.Parallel()
	var got []EventType
	seen := map[EventType]string{}
	for _, p := range eventPayloads {
		typ := p.EventType()
		name := reflect.TypeOf(p).Name()
		if other, ok := seen[typ]; ok {
			t.Errorf("%s has two payload types: %s and %s", typ, other, name)
		}
		seen[typ] = name
		if !typ.Known() {
			t.Errorf("payload %s names %q, not in the catalogue", name, typ)
		}
		got = append(got, typ)
	}
	want := EventTypes()
	for _, typ := range want {
		if _, ok := seen[typ]; !ok {
			t.Errorf("%s has no payload type", typ)
		}
	}
	sorted := func(types []EventType) []EventType {
		out := slices.Clone(types)
		slices.Sort(out)
		return out
	}
	if !slices.Equal(sorted(got), sorted(want)) {
		t.Fatalf("payload types name %v, the catalogue is %v", got, want)
	}
	var _ EventPayload = (*TaskStatusChangedData)(nil) // a pointer is one too: the evidence function fills it
}

// TestEventPayloadNestedMembersInKeyOrder: a struct a payload holds as the
// value of a member (not one it embeds) declares its members in key
// order, so the data is encoded with every object's members in key order,
// as the maps it replaced were (StorableEvent keeps the data as given when
// it has to clean it).
func TestEventPayloadNestedMembersInKeyOrder(t *testing.T) {
	t.Parallel()
	seen := map[reflect.Type]bool{}
	var walk func(typ reflect.Type, nested bool, path string)
	walk = func(typ reflect.Type, nested bool, path string) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || typ == reflect.TypeOf(time.Time{}) || seen[typ] {
			return
		}
		seen[typ] = true
		var keys []string
		for i := range typ.NumField() {
			f := typ.Field(i)
			if f.Anonymous {
				walk(f.Type, nested, path+"."+f.Name)
				continue
			}
			key, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !f.IsExported() || key == "-" {
				continue
			}
			keys = append(keys, key)
			walk(f.Type, true, path+"."+key)
		}
		if nested && !slices.IsSorted(keys) {
			t.Errorf("%s (%s): members %v are not in key order", path, typ, keys)
		}
	}
	for _, p := range eventPayloads {
		walk(reflect.TypeOf(p), false, string(p.EventType()))
	}
	for _, v := range []any{holdSplit{}, holdChange{}, compensationDeadline{}} {
		walk(reflect.TypeOf(v), true, reflect.TypeOf(v).Name())
	}
}

// TestEncodeEventData: the data is one object with its members in key
// order; Apply's members replace the payload's; evidence applied after it
// was held keeps what was stored under the members set now; a payload of
// another type is refused, and none is the empty object.
func TestEncodeEventData(t *testing.T) {
	t.Parallel()
	for _, p := range eventPayloads {
		raw, err := encodeEventData(p.EventType(), p, nil)
		if err != nil || !strings.HasPrefix(string(raw), "{") {
			t.Errorf("%s: %s, %v", p.EventType(), raw, err)
		}
	}
	reason, ev := "written_off", EventWriteOffApproved
	got, err := encodeEventData(EventTypeWriteOffExecuted, WriteOffExecutedData{
		WriteOffRecord: WriteOffRecord{WriteOffID: "w", Status: "executed", Reason: "gone", Currency: "EUR", AmountMinor: 5},
		Approval:       "four_eyes",
	}, &obligationData{ObligationEvent: &ev, Reason: &reason, Hold: holdSplit{AmountMinor: 5, Currency: "EUR", Movement: "write_off", WrittenOffMinor: 5}})
	want := `{"amount_minor":5,"approval":"four_eyes","currency":"EUR",` +
		`"hold":{"amount_minor":5,"currency":"EUR","movement":"write_off","returned_minor":0,"spent_minor":0,"written_off_minor":5},` +
		`"obligation_event":"write_off_approved","reason":"written_off","reference":"","requested_by":"","requested_by_id":"",` +
		`"status":"executed","write_off_id":"w"}`
	if err != nil || string(got) != want {
		t.Errorf("write_off_executed:\n got %s, %v\nwant %s", got, err, want)
	}

	held := EvidenceRecord{
		Held:            json.RawMessage(`{"jti": "j", "channel": "http", "token_kind": "old", "reversed_amount_minor": 7}`),
		ReceivedAt:      "2026-01-01T00:00:00Z",
		EvidenceChannel: "http",
		TokenAcceptance: TokenAcceptance{TokenKind: "compensation-ack+jwt", TokenAcceptedAt: "2026-01-01T00:00:00Z"},
	}
	got, err = encodeEventData(EventTypeCompensationAcked, EvidenceDischarged(EventCompensationAck, held), nil)
	want = `{"channel":"http","evidence_channel":"http","jti":"j","received_at":"2026-01-01T00:00:00Z","reversed_amount_minor":7,` +
		`"token_accepted_at":"2026-01-01T00:00:00Z","token_kind":"compensation-ack+jwt"}`
	if err != nil || string(got) != want {
		t.Errorf("held evidence applied:\n got %s, %v\nwant %s", got, err, want)
	}

	if _, err := encodeEventData(EventTypeCaseNoteAdded, CaseOwnerAssignedData{}, nil); err == nil {
		t.Error("a case_note_added event took the payload of case_owner_assigned")
	}
	if got, err := encodeEventData(EventTypeCancelRequested, nil, nil); err != nil || string(got) != "{}" {
		t.Errorf("no payload: %s, %v; want {}", got, err)
	}
}

// FuzzEachMember: for any JSON value as json.Marshal encodes it, eachMember
// yields the members decoding it into a map of raw messages yields, and
// refuses what that refuses (any value but an object or null).
func FuzzEachMember(f *testing.F) {
	for _, s := range []string{`{}`, `null`, `{"a":1,"b":{"c":[1,{"d":"}"}]},"a":"x\"y"}`, `{"\u003c":"<&>","é":"\u2028","\\":[]}`, `[1]`, `"s"`, `{"k":"\xff\x00"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if !json.Valid(in) {
			t.Skip()
		}
		raw, err := json.Marshal(json.RawMessage(in))
		if err != nil {
			t.Skip()
		}
		var want map[string]json.RawMessage
		wantErr := json.Unmarshal(raw, &want)
		got := map[string]json.RawMessage{}
		gotErr := eachMember(raw, func(k string, m json.RawMessage) { got[k] = m })
		if (gotErr != nil) != (wantErr != nil) {
			t.Fatalf("%s: error %v, want %v", raw, gotErr, wantErr)
		}
		if wantErr != nil {
			return
		}
		if len(got) != len(want) {
			t.Fatalf("%s: members %v, want %v", raw, got, want)
		}
		for k, m := range want {
			if !bytes.Equal(got[k], m) {
				t.Fatalf("%s: member %q is %s, want %s", raw, k, got[k], m)
			}
		}
	})
}
