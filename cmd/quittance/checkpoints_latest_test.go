package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/quittance/quittance/cmd/quittance/internal/errkind"
	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/ledger/audit"
)

// latestCheckpoint is GET /v1/checkpoints/latest's answer, as read here.
type latestCheckpoint struct {
	ID      int64           `json:"id"`
	KeyID   string          `json:"kid"`
	Streams int             `json:"streams"`
	Payload json.RawMessage `json:"payload"`
	JWS     string          `json:"jws"`
	Code    string          `json:"code"` // of a problem
}

// TestLatestCheckpoint: GET /v1/checkpoints/latest and quittance
// checkpoints latest answer 404 (exit 1, one line) before the first
// checkpoint, then the newest one, for finance and on-call only: its JWS
// verifies against the ledger's published keys, signs exactly the payload
// shown, by the kid shown, over the streams that moved since the one
// before, which it names by the hash of its JWS.
func TestLatestCheckpoint(t *testing.T) {
	t.Parallel()
	e := startCheckpointingService(t, "QUITTANCE_CHECKPOINT_INTERVAL=1h")
	finance := e.newToken(t, "--role", "finance", "--name", "fin")
	orch := e.newToken(t, "--role", "orchestrator", "--tenant", "acme", "--name", "orch")

	var none latestCheckpoint
	if s := e.api(t, http.MethodGet, "/v1/checkpoints/latest", finance, nil, &none); s != http.StatusNotFound || none.Code == "" {
		t.Fatalf("latest before any checkpoint: %d %+v, want 404 with a problem", s, none)
	}
	if out, errOut, code := e.cli(t, finance, "checkpoints", "latest"); code != exitFailure || out != "" || strings.Count(errOut, "\n") != 1 {
		t.Fatalf("checkpoints latest before any checkpoint: exit %d %q %q, want %d and one line", code, out, errOut, exitFailure)
	}

	var jwks json.RawMessage
	if s := e.api(t, http.MethodGet, "/.well-known/jwks.json", "", nil, &jwks); s != http.StatusOK {
		t.Fatalf("ledger jwks: %d", s)
	}
	// check verifies the latest checkpoint, by API and CLI alike, and
	// returns it with its signed payload.
	check := func(wantID int64) (latestCheckpoint, audit.CheckpointPayload) {
		t.Helper()
		var got latestCheckpoint
		if s := e.api(t, http.MethodGet, "/v1/checkpoints/latest", finance, nil, &got); s != http.StatusOK {
			t.Fatalf("latest checkpoint: %d", s)
		}
		out, errOut, code := e.cli(t, e.oncall, "checkpoints", "latest")
		var cli latestCheckpoint
		if code != 0 || json.Unmarshal([]byte(out), &cli) != nil || cli.ID != got.ID || cli.JWS != got.JWS {
			t.Fatalf("checkpoints latest: exit %d %s\n%s, want checkpoint %d as the API serves it", code, errOut, out, got.ID)
		}
		p, kid, err := compensation.VerifyCheckpoint(got.JWS, jwks, "ledger-cli")
		if err != nil {
			t.Fatalf("the latest checkpoint's JWS: %v", err)
		}
		var shown audit.CheckpointPayload
		if err := json.Unmarshal(got.Payload, &shown); err != nil {
			t.Fatal(err)
		}
		switch {
		case got.ID != wantID || p.ID != wantID:
			t.Fatalf("latest checkpoint %d (signed as %d), want %d", got.ID, p.ID, wantID)
		case kid != got.KeyID:
			t.Errorf("signed by kid %s, shown as %s", kid, got.KeyID)
		case got.Streams != len(p.Streams) || !slices.Equal(shown.Streams, p.Streams) || shown.Previous != p.Previous:
			t.Errorf("the payload shown is not the one signed:\n%s", got.Payload)
		}
		return got, p
	}

	e.putBudget(t, "ops", 1000)
	if _, errOut, code := e.cli(t, e.oncall, "checkpoints", "create"); code != 0 {
		t.Fatalf("checkpoints create: exit %d %s", code, errOut)
	}
	first, p1 := check(1)
	if p1.Previous != "" || !slices.ContainsFunc(p1.Streams, func(h audit.StreamHead) bool { return h.Stream == "budget:ops" }) {
		t.Errorf("the first checkpoint: previous %q, streams %v; want none and budget:ops among them", p1.Previous, p1.Streams)
	}

	e.putBudget(t, "ops", 2000)
	if _, errOut, code := e.cli(t, e.oncall, "checkpoints", "create"); code != 0 {
		t.Fatalf("checkpoints create: exit %d %s", code, errOut)
	}
	_, p2 := check(2)
	sum := sha256.Sum256([]byte(first.JWS))
	if p2.Previous != hex.EncodeToString(sum[:]) || len(p2.Streams) != 1 || p2.Streams[0].Stream != "budget:ops" || p2.Streams[0].Seq != 2 {
		t.Errorf("the second checkpoint: previous %q, streams %v; want the first's JWS hash and budget:ops at 2 alone", p2.Previous, p2.Streams)
	}

	if s := e.api(t, http.MethodGet, "/v1/checkpoints/latest", orch, nil, nil); s != http.StatusForbidden {
		t.Errorf("an orchestrator reading the latest checkpoint: %d, want 403", s)
	}
	if _, _, code := e.cli(t, orch, "checkpoints", "latest"); code != errkind.ExitAuth {
		t.Errorf("checkpoints latest as an orchestrator: exit %d, want %d", code, errkind.ExitAuth)
	}
	if s := e.api(t, http.MethodGet, "/v1/checkpoints/latest", "", nil, nil); s != http.StatusUnauthorized {
		t.Errorf("the latest checkpoint without a token: %d, want 401", s)
	}
}
