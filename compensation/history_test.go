package compensation_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/ledger"
)

// TestVerifyStoredTokens: a stored token verifies against the keys in force
// when its event was recorded, by the key the event names, about the
// delegation's task; a rotation does not break it, and a key registered
// later, another task's sub or another recorded key does not pass.
func TestVerifyStoredTokens(t *testing.T) {
	t.Parallel()
	old := compensationtest.NewEd25519Signer(t, "old")
	next := compensationtest.NewEd25519Signer(t, "next")
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	rotated := t0.Add(time.Hour)
	key := func(s *compensationtest.Signer, from, until time.Time) ledger.OrgKey {
		jwk, err := json.Marshal(s.PublicJWK())
		if err != nil {
			t.Fatal(err)
		}
		tp, err := ledger.JWKThumbprint(jwk)
		if err != nil {
			t.Fatal(err)
		}
		return ledger.OrgKey{OrgID: "org-b", KeyID: s.KeyID(), Thumbprint: tp, JWK: jwk, ValidFrom: from, ValidUntil: until}
	}
	history := []ledger.OrgKey{key(old, t0.Add(-time.Hour), rotated), key(next, rotated, time.Time{})}
	id := uuid.New()
	idempotencyKey := ledger.CompensationKey(ledger.Delegation{ID: id})
	owner := compensation.TokenOwner{DelegationID: id, OrgID: "org-b", RemoteTaskID: "task-1", LedgerID: "ledger-1", History: history, Slack: time.Minute}
	event := func(s *compensationtest.Signer, task string, recorded ledger.OrgKey) ledger.Event {
		data, _ := json.Marshal(map[string]string{"kid": recorded.KeyID, "key_thumbprint": recorded.Thumbprint})
		return ledger.Event{
			Type: ledger.EventTypeCompensationAcked, At: t0, Data: data, StreamSeq: 2,
			Evidence: s.Sign(t, string(compensation.KindAck), compensationtest.AckClaims("org-b", "ledger-1", task, idempotencyKey, t0)),
		}
	}
	verify := func(e ledger.Event) (ledger.OrgKey, error) {
		t.Helper()
		got := compensation.VerifyStoredTokens(owner, []ledger.Event{e})
		if len(got) != 1 {
			t.Fatalf("%d tokens read from one event", len(got))
		}
		return got[0].Key, got[0].Err
	}

	used, err := verify(event(old, "task-1", history[0]))
	if err != nil || used.KeyID != "old" || used.Thumbprint != history[0].Thumbprint {
		t.Fatalf("a token signed with the key in force, after a rotation: key %+v, %v", used, err)
	}
	for _, c := range []struct {
		name, want string
		e          ledger.Event
	}{
		{"signed by a key registered later", "key", event(next, "task-1", history[1])},
		{"about another task", `sub "task-2"`, event(old, "task-2", history[0])},
		{"recording another key", "the event records key next", event(old, "task-1", history[1])},
	} {
		if _, err := verify(c.e); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error about %q", c.name, err, c.want)
		}
	}
	unknown := event(old, "task-1", history[0])
	unknown.Type = ledger.EventTypeTaskStatusChanged
	if _, err := verify(unknown); err == nil {
		t.Error("a token on an event that names no kind verified")
	}
}
