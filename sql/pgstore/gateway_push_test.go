package pgstore_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/delegate/egress"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/webhook"
)

// renderCount renders each push as the number of renders so far, so a
// receiver tells which render it got.
type renderCount struct {
	mu sync.Mutex
	n  int
}

func (r *renderCount) RenderPush(context.Context, string, uuid.UUID, string) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	return []byte(`{"render":` + strconv.Itoa(r.n) + `}`), nil
}

// TestGatewayPushDeliveries: a push config's deliveries are queued with
// each of its delegation's events, claimed one at a time, oldest first;
// one push that succeeds delivers those queued before it began; deleting
// the config drops what is not delivered; another tenant neither reads
// nor deletes it; a task takes ten configs.
func TestGatewayPushDeliveries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var (
		mu   sync.Mutex
		got  []string
		down = true
	)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if down {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		got = append(got, r.Header.Get("webhook-id"))
	}))
	t.Cleanup(recv.Close)
	policy := egress.Policy{AllowHTTP: true, AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
	svc := webhook.NewService(webhook.Config{
		Store: b.store.Webhooks(), Clock: fixedClock{epoch}, ValidateURL: policy.ValidateURL, HTTPClient: egress.NewClient(policy),
		Push: &renderCount{}, BackoffBase: time.Nanosecond, BackoffMax: time.Nanosecond,
	})
	d := b.delegation(t, "op-push")
	pc, err := svc.PutPushConfig(ctx, orch, webhook.PushConfig{DelegationID: d.ID, ID: "r", URL: recv.URL})
	if err != nil || pc.Token == "" || pc.Tenant != orch.Tenant {
		t.Fatalf("PutPushConfig: %+v, %v", pc, err)
	}
	b.report(t, d.ID, ledger.StatusWorking, epoch.Add(time.Second))
	b.report(t, d.ID, ledger.StatusInputRequired, epoch.Add(2*time.Second))
	pending := func() (n int) {
		t.Helper()
		if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE push_config_id = 'r' AND status = 'pending'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	queued := pending()
	if queued < 2 {
		t.Fatalf("%d pushes queued for two status reports", queued)
	}

	// Down: only the oldest is attempted, again and again.
	var heads []int64
	for range 3 {
		claimed, err := b.store.Webhooks().ClaimDeliveries(ctx, epoch.Add(time.Hour), epoch.Add(2*time.Hour), uuid.NewString(), 16)
		if err != nil || len(claimed) != 1 {
			t.Fatalf("claimed %+v, %v: want the oldest push alone", claimed, err)
		}
		heads = append(heads, claimed[0].ID)
		if err := b.store.Webhooks().DeliveryFailed(ctx, claimed[0], webhook.Failure{Next: epoch, Problem: "down"}, epoch); err != nil {
			t.Fatal(err)
		}
	}
	if heads[0] != heads[1] || heads[1] != heads[2] {
		t.Fatalf("claimed %v: want the same oldest push each time", heads)
	}

	// Up: one push delivers every one queued before it.
	mu.Lock()
	down = false
	mu.Unlock()
	if _, err := svc.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if n := pending(); n != 0 || len(got) != 1 {
		t.Fatalf("%d pending, %d pushed (%v): want one push for the %d queued", n, len(got), got, queued)
	}

	// Another tenant neither reads nor deletes the config.
	globex := ledger.Principal{Role: ledger.RoleOrchestrator, Tenant: "globex", Name: "globex"}
	if _, err := svc.PushConfig(ctx, globex, d.ID, "r"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("globex reads acme's config: %v", err)
	}
	if err := svc.DeletePushConfig(ctx, globex, d.ID, "r"); err != nil {
		t.Fatal(err)
	}
	if cs, err := svc.PushConfigs(ctx, orch, d.ID); err != nil || len(cs) != 1 || cs[0].Token != "" {
		t.Fatalf("acme's configs after globex's delete: %+v, %v", cs, err)
	}

	// Ten configs a task; an eleventh is refused, a replaced one is not.
	for i := range 9 {
		if _, err := svc.PutPushConfig(ctx, orch, webhook.PushConfig{DelegationID: d.ID, ID: "c" + strconv.Itoa(i), URL: recv.URL}); err != nil {
			t.Fatalf("config %d: %v", i, err)
		}
	}
	var invalid *ledger.ValidationError
	if _, err := svc.PutPushConfig(ctx, orch, webhook.PushConfig{DelegationID: d.ID, ID: "eleventh", URL: recv.URL}); !errors.As(err, &invalid) {
		t.Fatalf("an eleventh config: %v", err)
	}
	if _, err := svc.PutPushConfig(ctx, orch, webhook.PushConfig{DelegationID: d.ID, ID: "r", URL: recv.URL + "/again"}); err != nil {
		t.Fatalf("a config replaced: %v", err)
	}

	// Deleted, a config's pushes not yet sent go with it.
	mu.Lock()
	down = true
	mu.Unlock()
	b.report(t, d.ID, ledger.StatusCompleted, epoch.Add(3*time.Second))
	if pending() == 0 {
		t.Fatal("no push queued for a later event")
	}
	if err := svc.DeletePushConfig(ctx, orch, d.ID, "r"); err != nil {
		t.Fatal(err)
	}
	if n := pending(); n != 0 {
		t.Fatalf("%d pushes left to a deleted config", n)
	}
}
