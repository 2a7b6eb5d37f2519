package delegate

import (
	"testing"

	"github.com/google/uuid"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/delegate/a2a"
	"github.com/quittance/quittance/ledger"
)

// TestDispatchTaskProof: a task is a delegation's dispatch task only when
// the agent shows it — the dispatch messageId in its history, or the
// delegation's own context — and never for a context of another
// delegation, a compensation request's task, or another delegation's
// messageId.
func TestDispatchTaskProof(t *testing.T) {
	t.Parallel()
	d := ledger.Delegation{ID: uuid.New()}
	other := uuid.New()
	for _, c := range []struct {
		name string
		task a2a.Task
		want string
	}{
		{"messageId in the history", a2a.Task{ContextID: "ctx-anywhere", HistoryMessageIDs: []string{"m-0", DispatchMessageID(d.ID)}}, "message_id"},
		{"messageId in its own context", a2a.Task{ContextID: DispatchContextID(d.ID), HistoryMessageIDs: []string{DispatchMessageID(d.ID)}}, "message_id"},
		{"own context, no history", a2a.Task{ContextID: DispatchContextID(d.ID)}, "context"},
		{"own context, another message", a2a.Task{ContextID: DispatchContextID(d.ID), HistoryMessageIDs: []string{"m-0"}}, "context"},
		{"another context, no history", a2a.Task{ContextID: "ctx-someone-else"}, ""},
		{"another context, another message", a2a.Task{ContextID: "ctx-someone-else", HistoryMessageIDs: []string{"m-0"}}, ""},
		{"another delegation's context", a2a.Task{ContextID: DispatchContextID(other)}, ""},
		{"another delegation's messageId", a2a.Task{ContextID: "ctx-shared", HistoryMessageIDs: []string{DispatchMessageID(other)}}, ""},
		{"a compensation request's task", a2a.Task{ContextID: DispatchContextID(d.ID), HistoryMessageIDs: []string{compensation.RequestMessageID(d.ID, 1)}}, ""},
	} {
		if got := dispatchTaskProof(d, c.task); got != c.want {
			t.Errorf("%s: proof %q, want %q", c.name, got, c.want)
		}
	}
}
