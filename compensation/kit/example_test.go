package kit_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"iter"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"

	"github.com/quittance/quittance/compensation/kit"
)

// agent is an org's a2a-go v2 agent before it answers compensation
// requests: its executor, its card and its mux, and its order book.
type agent struct {
	myExecutor a2asrv.AgentExecutor
	card       *a2a.AgentCard
	mux        *http.ServeMux
	orders     orderBook
	orgKey     ed25519.PrivateKey
}

// orderBook is the org's own system, which knows how to reverse an order.
type orderBook struct{}

func (orderBook) Reverse(_ context.Context, taskID, idempotencyKey string) error { return nil }

// echo is the org's executor: it answers every message with a message.
type echo struct{}

func (echo) Execute(_ context.Context, _ *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		yield(a2a.NewMessage(a2a.MessageRoleAgent, a2a.NewTextPart("ok")), nil)
	}
}

func (echo) Cancel(_ context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCanceled, nil), nil)
	}
}

// integrate is the integration compensation/extension/v1/README.md shows,
// between the markers, line for line (TestDocShowsTheIntegration).
func (a *agent) integrate() {
	myExecutor, card, mux, orders, orgKey := a.myExecutor, a.card, a.mux, a.orders, a.orgKey
	// doc:begin
	// The org's key; signer.JWKS() is the public half to register with the ledger.
	signer, err := kit.NewSigner(kit.SignerConfig{
		OrgID: "acme-supplies", LedgerID: "quittance", KeyID: "acme-2026-01", Key: orgKey,
	})
	if err != nil {
		log.Fatal(err)
	}
	// Declare the extension on the agent card.
	card.Capabilities.Extensions = append(card.Capabilities.Extensions, kit.Extension(signer, kit.Params{}))
	// Compensation requests go to this function, once per idempotency key;
	// every other message and every cancel go to your executor.
	executor := kit.Wrap(myExecutor, signer, func(ctx context.Context, req kit.Request) (kit.Result, error) {
		if err := orders.Reverse(ctx, string(req.TaskID), req.IdempotencyKey); err != nil {
			return kit.Result{Outcome: kit.Failed, Reason: err.Error()}, nil
		}
		return kit.Result{Outcome: kit.Compensated}, nil
	})
	handler := a2asrv.NewHandler(executor)
	mux.Handle("/rpc", a2asrv.NewJSONRPCHandler(handler))
	mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewStaticAgentCardHandler(card))
	// doc:end
}

// Example runs the integration and reads the card it serves.
func Example() {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		log.Fatal(err)
	}
	a := &agent{myExecutor: echo{}, card: &a2a.AgentCard{Name: "ACME Supplies"}, mux: http.NewServeMux(), orgKey: key}
	a.integrate()
	srv := httptest.NewServer(a.mux)
	defer srv.Close()
	resp, err := http.Get(srv.URL + a2asrv.WellKnownAgentCardPath)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	var card a2a.AgentCard
	if err := json.NewDecoder(resp.Body).Decode(&card); err != nil {
		log.Fatal(err)
	}
	ext := card.Capabilities.Extensions[0]
	fmt.Println(ext.URI, ext.Params["signedReceipts"], ext.Params["receiptAlgs"])
	// Output: https://quittance.dev/a2a/compensation/v1 true [EdDSA]
}
