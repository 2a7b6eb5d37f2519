package pgstore_test

import (
	"context"
	"sync"
	"testing"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/access"
	"github.com/quittance/quittance/sql/pgstore"
)

// TestEnsureTokenConcurrent: replicas starting together each ensure the
// bootstrap token on the same database. Every call succeeds and returns
// the same token, which is created once, with one token_created event.
func TestEnsureTokenConcurrent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const callers = 4
	for round := range 25 {
		secret := access.NewTokenSecret()
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
			got   [callers]ledger.Token
			errs  [callers]error
		)
		for i := range callers {
			// A service each, as each replica has its own.
			store := pgstore.New(b.pool)
			core := ledger.NewService(ledger.Config{Store: store, Clock: fixedClock{epoch}})
			svc := access.NewService(access.Config{Store: store.Principals(), Ledger: core, Clock: fixedClock{epoch}})
			wg.Go(func() {
				<-start
				got[i], errs[i] = svc.EnsureToken(context.Background(), access.TokenInput{Role: ledger.RoleOncall, Name: "bootstrap"}, secret)
			})
		}
		close(start)
		wg.Wait()
		for i := range callers {
			if errs[i] != nil {
				t.Fatalf("round %d, caller %d: %v", round, i, errs[i])
			}
			if got[i].ID != got[0].ID {
				t.Fatalf("round %d: caller %d got token %s, caller 0 %s; want the same token", round, i, got[i].ID, got[0].ID)
			}
		}
		var tokens, events int
		if err := b.pool.QueryRow(context.Background(), `SELECT
			(SELECT count(*) FROM api_tokens WHERE token_hash = $1),
			(SELECT count(*) FROM events WHERE stream = 'token:' || $2::text)`, access.HashToken(secret), got[0].ID).
			Scan(&tokens, &events); err != nil {
			t.Fatal(err)
		}
		if tokens != 1 || events != 1 {
			t.Fatalf("round %d: %d tokens and %d token_created events; want 1 and 1", round, tokens, events)
		}
	}
	// A secret that exists as another kind of token is still refused.
	secret := access.NewTokenSecret()
	acc := access.NewService(access.Config{Store: b.store.Principals(), Ledger: b.svc, Clock: fixedClock{epoch}})
	if _, err := acc.EnsureToken(context.Background(), access.TokenInput{Role: ledger.RoleFinance, Name: "finance"}, secret); err != nil {
		t.Fatal(err)
	}
	if _, err := acc.EnsureToken(context.Background(), access.TokenInput{Role: ledger.RoleOncall, Name: "bootstrap"}, secret); err == nil {
		t.Fatal("EnsureToken accepted a finance token as the on-call bootstrap token")
	}
}
