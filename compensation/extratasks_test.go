package compensation_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/ledger"
)

// TestCanRedriveExtraTask: the redrive of an extra task's compensation is
// allowed only when it is required, not resolved, at least one request was
// sent and no request job is open, to an org with an agent card and an
// identity in force; every other case is a redrive_not_allowed conflict
// saying why.
func TestCanRedriveExtraTask(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 5, 12, 0, 0, 0, time.UTC)
	org := ledger.Org{ID: "org-b", AgentCardURL: "https://agent.example/.well-known/agent-card.json"}
	exhausted := compensation.ExtraTaskCompensation{RequiredAt: at, Round: 3, Attempts: 8, LastError: "receipt failed"}
	task := func(c compensation.ExtraTaskCompensation) compensation.RemoteTask {
		return compensation.RemoteTask{TaskID: "kt-1", Status: ledger.StatusCanceled, Compensation: c}
	}
	resolved := exhausted
	resolved.ResolvedAt, resolved.Resolution = at.Add(time.Hour), compensation.ExtraTaskWrittenOff
	neverSent := exhausted
	neverSent.Attempts = 0
	noCard := org
	noCard.AgentCardURL = ""
	revoked := org
	revoked.IdentityRevokedAt = at
	for _, tc := range []struct {
		name    string
		org     ledger.Org
		c       compensation.ExtraTaskCompensation
		running bool
		want    string // "" when allowed, else a word of the refusal
	}{
		{"exhausted", org, exhausted, false, ""},
		{"not needed", org, compensation.ExtraTaskCompensation{}, false, "needs no compensation"},
		{"resolved", org, resolved, false, "written_off"},
		{"requests still sent", org, exhausted, true, "still being sent"},
		{"never sent", org, neverSent, false, "nothing to redrive"},
		{"no agent card", noCard, exhausted, false, "no agent card"},
		{"identity revoked", revoked, exhausted, false, "revoked"},
	} {
		err := compensation.CanRedriveExtraTask(tc.org, task(tc.c), tc.running)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v, want allowed", tc.name, err)
			}
			continue
		}
		var conflict *ledger.ConflictError
		if !errors.As(err, &conflict) || conflict.Code != compensation.CodeRedriveNotAllowed || !strings.Contains(conflict.Detail, tc.want) {
			t.Errorf("%s: %v, want redrive_not_allowed saying %q", tc.name, err, tc.want)
		}
	}
}
