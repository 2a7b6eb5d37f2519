package kit_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"iter"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	jose "github.com/go-jose/go-jose/v4"

	"github.com/quittance/quittance/compensation/kit"
)

func signer(t *testing.T) *kit.Signer {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := kit.NewSigner(kit.SignerConfig{OrgID: "acme", LedgerID: "quittance", KeyID: "k1", Key: key})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func request(data any, meta map[string]any) *a2a.Message {
	m := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewDataPart(data))
	m.Metadata = meta
	return m
}

func TestRequestFrom(t *testing.T) {
	const key = "qc_0123456789abcdef0123456789abcdef"
	req, ok, err := kit.RequestFrom(request(map[string]any{"compensationRequest": map[string]any{
		"taskId": "t1", "idempotencyKey": key, "reason": "task_canceled", "extraTaskIds": []any{"t2"}}},
		map[string]any{kit.URI: map[string]any{"requestJws": "a.b.c"}}))
	if !ok || err != nil || req.TaskID != "t1" || req.IdempotencyKey != key || len(req.ExtraTaskIDs) != 1 || req.RequestJWS != "a.b.c" {
		t.Errorf("RequestFrom = %+v, %v, %v", req, ok, err)
	}
	for name, msg := range map[string]*a2a.Message{
		"no key":      request(map[string]any{"compensationRequest": map[string]any{"taskId": "t1"}}, nil),
		"wrong types": request(map[string]any{"compensationRequest": map[string]any{"taskId": 7, "idempotencyKey": key}}, nil),
		"not object":  request(map[string]any{"compensationRequest": "please"}, nil),
	} {
		if _, ok, err := kit.RequestFrom(msg); !ok || !errors.Is(err, kit.ErrMalformed) {
			t.Errorf("%s: ok %v, err %v; want ErrMalformed", name, ok, err)
		}
	}
	for name, msg := range map[string]*a2a.Message{
		"text":       a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("compensationRequest")),
		"other data": request(map[string]any{"order": 1}, nil),
		"nil":        nil,
	} {
		if _, ok, err := kit.RequestFrom(msg); ok || err != nil {
			t.Errorf("%s: ok %v, err %v; want no request", name, ok, err)
		}
	}
	if _, ok, err := kit.RequestFromCancel(map[string]any{kit.URI: map[string]any{"taskId": "t1"}}); !ok || !errors.Is(err, kit.ErrMalformed) {
		t.Errorf("a cancel's request without a key: ok %v, err %v", ok, err)
	}
}

func TestNewSignerRefusesKeysQuittanceRefuses(t *testing.T) {
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	p521, _ := ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	_, ed, _ := ed25519.GenerateKey(rand.Reader)
	for name, cfg := range map[string]kit.SignerConfig{
		"RSA 1024": {OrgID: "o", LedgerID: "l", KeyID: "k", Key: small},
		"P-521":    {OrgID: "o", LedgerID: "l", KeyID: "k", Key: p521},
		"no kid":   {OrgID: "o", LedgerID: "l", Key: ed},
		"no org":   {LedgerID: "l", KeyID: "k", Key: ed},
	} {
		if _, err := kit.NewSigner(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestReceipt: the signed token of each outcome, as Quittance verifies it
// (compensation/SIGNING.md), and the results the kit refuses to sign.
func TestReceipt(t *testing.T) {
	s := signer(t)
	req := kit.Request{TaskID: "t1", IdempotencyKey: "qc_0123456789abcdef0123456789abcdef"}
	five := int64(500)
	r, err := s.Receipt(req, kit.Result{Outcome: kit.Compensated, ReversedAmountMinor: &five})
	if err != nil {
		t.Fatal(err)
	}
	jws, err := jose.ParseSignedCompact(r.JWS, []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil {
		t.Fatal(err)
	}
	h := jws.Signatures[0].Protected
	var claims map[string]any
	if err := json.Unmarshal(jws.UnsafePayloadWithoutVerification(), &claims); err != nil {
		t.Fatal(err)
	}
	if h.KeyID != "k1" || h.ExtraHeaders["typ"] != kit.TypeAck || claims["iss"] != "acme" || claims["aud"] != "quittance" ||
		claims["sub"] != "t1" || claims["idempotency_key"] != req.IdempotencyKey || claims["receipt_id"] != r.ReceiptID ||
		claims["reversed_amount_minor"] != float64(500) || claims["exp"].(float64)-claims["iat"].(float64) != kit.TokenLifetime.Seconds() {
		t.Errorf("ack header %+v, claims %v", h, claims)
	}
	d, err := s.Receipt(req, kit.Result{Outcome: kit.NoEffects})
	if err != nil {
		t.Fatal(err)
	}
	jws, _ = jose.ParseSignedCompact(d.JWS, []jose.SignatureAlgorithm{jose.EdDSA})
	if jws.Signatures[0].Protected.ExtraHeaders["typ"] != kit.TypeDeclaration {
		t.Errorf("declaration header %+v", jws.Signatures[0].Protected)
	}
	for _, o := range []kit.Outcome{kit.Failed, kit.Pending, kit.NotSupported} {
		if r, err := s.Receipt(req, kit.Result{Outcome: o, Reason: "why"}); err != nil || r.JWS != "" {
			t.Errorf("%s: %+v, %v; want an unsigned receipt", o, r, err)
		}
	}
	minus := int64(-1)
	for name, res := range map[string]kit.Result{
		"unknown outcome":        {Outcome: "unknown"},
		"negative amount":        {Outcome: kit.Compensated, ReversedAmountMinor: &minus},
		"amount on failed":       {Outcome: kit.Failed, ReversedAmountMinor: &five},
		"amount on a no_effects": {Outcome: kit.NoEffects, ReversedAmountMinor: &five},
	} {
		if _, err := s.Receipt(req, res); err == nil {
			t.Errorf("%s: signed", name)
		}
	}
}

type noWork struct{}

func (noWork) Execute(context.Context, *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(func(a2a.Event, error) bool) {}
}

func (noWork) Cancel(context.Context, *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(func(a2a.Event, error) bool) {}
}

// TestWrapKeepsOneResultPerKey: a key is compensated once, asked again it
// gets the same result, and a key used for another task is refused; a
// failed compensation is asked again.
func TestWrapKeepsOneResultPerKey(t *testing.T) {
	calls := 0
	outcome := kit.Failed
	exec := kit.Wrap(noWork{}, signer(t), func(context.Context, kit.Request) (kit.Result, error) {
		calls++
		return kit.Result{Outcome: outcome}, nil
	})
	run := func(task, key string) (kit.Receipt, error) {
		msg := request(map[string]any{"compensationRequest": map[string]any{"taskId": task, "idempotencyKey": key}}, nil)
		ec := &a2asrv.ExecutorContext{Message: msg, TaskID: "comp-1", ContextID: "ctx"}
		var got kit.Receipt
		for ev, err := range exec.Execute(t.Context(), ec) {
			if err != nil {
				return kit.Receipt{}, err
			}
			if art, ok := ev.(*a2a.TaskArtifactUpdateEvent); ok {
				b, _ := json.Marshal(art.Artifact.Parts[0].Data())
				_ = json.Unmarshal(b, &got)
			}
		}
		return got, nil
	}
	if r, err := run("t1", "k1"); err != nil || r.Outcome != kit.Failed {
		t.Fatalf("first: %+v, %v", r, err)
	}
	outcome = kit.Compensated
	first, err := run("t1", "k1")
	if err != nil || first.Outcome != kit.Compensated || first.JWS == "" {
		t.Fatalf("after a failure: %+v, %v", first, err)
	}
	outcome = kit.NotSupported
	if again, err := run("t1", "k1"); err != nil || again.Outcome != kit.Compensated || again.ReceiptID != first.ReceiptID {
		t.Errorf("again: %+v, %v; want the compensated receipt", again, err)
	}
	if _, err := run("t2", "k1"); !errors.Is(err, kit.ErrKeyReused) {
		t.Errorf("the key for another task: %v", err)
	}
	if calls != 2 {
		t.Errorf("compensate called %d times, want 2 (the failure, then the compensation)", calls)
	}
	if _, err := run("", "k1"); !errors.Is(err, a2a.ErrInvalidParams) {
		t.Errorf("a malformed request: %v; want invalid params", err)
	}
}
