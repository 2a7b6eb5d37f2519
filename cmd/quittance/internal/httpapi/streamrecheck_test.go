package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/ledger"
)

// backlog is the number of events a catching-up stream replays, one a page:
// enough to take seconds, so that a stream ended by catching up shows.
const backlog = 3000

// TestStreamCatchingUpEndsWhenItsCredentialChanges: a stream replaying a
// long backlog from the start (a full page after a full page, never
// waiting) still checks its credential every second: it ends within about
// a second of the credential's revocation, of its principal's tenant
// changing, and of its principal's role changing, long before the backlog
// is replayed.
func TestStreamCatchingUpEndsWhenItsCredentialChanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := apitest.New(t, apitest.WithStreamBatch(1))
	e.PutBudget(t, "ops", "EUR", 1_000_000)
	e.PutOrg(t, "plain", false)
	setup := e.NewOrchestrator(t, "acme")
	d := e.CreateDelegation(t, setup, apitest.NewCreateRequest("op-backlog", "plain", "read_only", "ops", 10, "EUR"))
	// One transaction, its events written at its commit: recordMarker
	// reads the stream back after each marker, which made this one
	// transaction last minutes under -race, and an open transaction holds
	// back the feed's cut, and so checkpoints, of every database on the
	// shared test server.
	if err := e.Store.InTx(ctx, func(tx ledger.Tx) error {
		locked, err := tx.DelegationForUpdate(ctx, uuid.MustParse(d.ID))
		if err != nil {
			return err
		}
		at := time.Now().UTC().Truncate(time.Microsecond)
		for range backlog {
			if _, err := ledger.Record(ctx, tx, locked, ledger.Change{Type: "marker", Actor: "test", At: at}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	for i, c := range []struct {
		name   string
		change func(t *testing.T, credential issued)
	}{
		{"revoked", func(t *testing.T, credential issued) {
			e.Do(t, http.MethodPost, "/admin/v1/credentials/"+credential.ID+"/revoke", e.OncallToken, map[string]any{"reason": "leaked"}).
				Expect(t, http.StatusOK)
		}},
		{"tenant changed", func(t *testing.T, credential issued) {
			if _, err := e.Pool.Exec(ctx, `UPDATE principals SET tenant = 'beta' WHERE id = $1`, credential.PrincipalID); err != nil {
				t.Fatal(err)
			}
		}},
		{"role changed", func(t *testing.T, credential issued) {
			if _, err := e.Pool.Exec(ctx, `UPDATE principals SET role = 'finance', tenant = NULL WHERE id = $1`, credential.PrincipalID); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			credential := mint(t, e, e.OncallToken, map[string]any{"role": "orchestrator", "tenant": "acme", "name": fmt.Sprintf("agent-%d", i)}, http.StatusCreated)
			stream := openStream(t, e.URL+"/v1/events?stream=true&after=0", credential.Token, "")
			read := 0
			for ; read < 20; read++ {
				stream.next(t)
			}
			c.change(t, credential)
			changed := time.Now()
			timeout := time.After(10 * time.Second)
			for open := true; open; {
				select {
				case _, open = <-stream.events:
					if open {
						read++
					}
				case <-timeout:
					t.Fatalf("the stream is still open 10s after the change (%d events read)", read)
				}
			}
			took := time.Since(changed)
			if read >= backlog {
				t.Fatalf("the stream ended %s after the change, having replayed the whole backlog (%d events)", took, read)
			}
			if took > 2500*time.Millisecond {
				t.Errorf("the stream ended %s after the change, want about a second", took)
			}
			t.Logf("ended %s after the change, %d of %d events replayed", took, read, backlog)
		})
	}
}
