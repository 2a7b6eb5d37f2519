package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/quittance/quittance/cmd/quittance/internal/demoagent"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/ledger"
)

// eventShapesGolden holds, for the events the A2A workers append in the
// lifecycles of TestEventPayloadShapesA2A, every shape of each event
// type's data: its members (nested ones by path) and the kind of each
// value. It was recorded before event data was built from typed payloads.
const eventShapesGolden = "testdata/event_shapes_a2a.golden"

// TestEventPayloadShapesA2A runs dispatched delegations against the demo
// agent — compensated on request, compensated with the cancel, not
// compensable, purged on cancel — and checks that every event's data has
// a shape recorded in eventShapesGolden for its type. These lifecycles
// run on the system clock against a live agent, so their events differ
// from run to run in times, ids and which polls happen: the shapes (which
// members are present, with which kinds of value) are what is compared,
// where TestEventPayloadsReplay compares bytes.
func TestEventPayloadShapesA2A(t *testing.T) {
	if testing.Short() {
		t.Skip("runs four A2A lifecycles")
	}
	got := map[string]bool{}
	collect := func(e *apitest.Env) {
		for _, ev := range allEvents(t, e) {
			got[string(ev.Type)+" "+dataShape(t, ev.Data)] = true
		}
	}
	for _, c := range []struct {
		cfg  demoagent.Config
		want string
	}{
		{demoagent.Config{}, "compensated"},
		{demoagent.Config{AtomicCancel: true}, "compensated"},
		{demoagent.Config{Compensation: demoagent.CompensationNotSupported}, "compensation_unconfirmed"},
	} {
		_, e := testA2ADemoAgent(t, c.cfg, c.want)
		collect(e.Env)
	}
	e, _, d := dispatchToDemoAgent(t, demoagent.Config{PurgeOnCancel: true, AtomicCancel: true}, apitest.Worker{PollAfter: purgePollAfter})
	e.waitFor(t, d.ID, "the task working", func(d httpapi.DelegationBody) bool { return d.TaskStatus == "working" })
	e.must(t, http.MethodPost, "/v1/delegations/"+d.ID+"/cancel", e.orch, nil, http.StatusOK)
	waitNotFound(t, e, d.ID, purgePollAfter)
	collect(e.Env)

	lines := make([]string, 0, len(got))
	for l := range got {
		lines = append(lines, l)
	}
	sort.Strings(lines)
	if *updateEventPayloads {
		recorded := map[string]bool{}
		if old, err := os.ReadFile(eventShapesGolden); err == nil {
			for _, l := range strings.Split(strings.TrimSpace(string(old)), "\n") {
				recorded[l] = true
			}
		}
		for _, l := range lines {
			recorded[l] = true
		}
		all := make([]string, 0, len(recorded))
		for l := range recorded {
			all = append(all, l)
		}
		sort.Strings(all)
		if err := os.WriteFile(eventShapesGolden, []byte(strings.Join(all, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	raw, err := os.ReadFile(eventShapesGolden)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Split(strings.TrimSpace(string(raw)), "\n")
	for _, l := range lines {
		typ, _, _ := strings.Cut(l, " ")
		if slices.Contains(want, l) {
			continue
		}
		if !slices.ContainsFunc(want, func(w string) bool { return strings.HasPrefix(w, typ+" ") }) {
			t.Logf("%s: no shape recorded for the type (a lifecycle took another path)", typ)
			continue
		}
		t.Errorf("%s: shape not recorded in %s: %s", typ, eventShapesGolden, l)
	}
}

// allEvents is every event e's ledger stored, each stream's chain checked.
func allEvents(t *testing.T, e *apitest.Env) []ledger.Event {
	t.Helper()
	rows, err := e.Pool.Query(t.Context(), `SELECT DISTINCT stream FROM events ORDER BY stream`)
	if err != nil {
		t.Fatal(err)
	}
	var streams []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
	}
	rows.Close()
	var all []ledger.Event
	for _, s := range streams {
		events, err := e.Store.StreamEvents(t.Context(), s)
		if err != nil {
			t.Fatal(err)
		}
		if err := ledger.VerifyChain(events); err != nil {
			t.Fatal(err)
		}
		all = append(all, events...)
	}
	return all
}

// dataShape is the members of a JSON object, nested ones by path, each
// with the kind of its value, in key order.
func dataShape(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("event data %s: %v", raw, err)
	}
	var members []string
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch x := v.(type) {
		case map[string]any:
			if prefix != "" {
				members = append(members, prefix+":object")
			}
			for k, el := range x {
				walk(strings.TrimPrefix(prefix+"."+k, "."), el)
			}
		case []any:
			members = append(members, fmt.Sprintf("%s:array", prefix))
		case string:
			members = append(members, prefix+":string")
		case float64:
			members = append(members, prefix+":number")
		case bool:
			members = append(members, prefix+":bool")
		case nil:
			members = append(members, prefix+":null")
		}
	}
	walk("", v)
	sort.Strings(members)
	return strings.Join(members, ",")
}
