package compensation_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/ledger"
)

// TestReceiptReversedAmount: a receipt's reversedAmountMinor is a
// non-negative integer on a compensated receipt, at most the hold, and
// equal to its jws's reversed_amount_minor when both are given.
func TestReceiptReversedAmount(t *testing.T) {
	t.Parallel()
	for name, data := range map[string]string{
		"negative":   `{"outcome":"compensated","taskId":"task-1","reversedAmountMinor":-1}`,
		"a fraction": `{"outcome":"compensated","taskId":"task-1","reversedAmountMinor":1.5}`,
		"exponent":   `{"outcome":"compensated","taskId":"task-1","reversedAmountMinor":1e2}`,
		"a string":   `{"outcome":"compensated","taskId":"task-1","reversedAmountMinor":"5"}`,
		"no_effects": `{"outcome":"no_effects","taskId":"task-1","reversedAmountMinor":0}`,
	} {
		if r, err := compensation.ParseRemoteReceipt([]byte(data)); err == nil {
			t.Errorf("%s: parsed as %+v, want an error", name, r)
		}
	}
	r, err := compensation.ParseRemoteReceipt([]byte(`{"outcome":"compensated","taskId":"task-1","reversedAmountMinor":0}`))
	if err != nil || r.ReversedAmountMinor == nil || *r.ReversedAmountMinor != 0 {
		t.Fatalf("zero: %+v, %v", r, err)
	}

	signer := compensationtest.NewEd25519Signer(t, "k1")
	now := time.Now()
	d := ledger.Delegation{ID: uuid.New(), OrgID: "org-b", Remote: ledger.RemoteTask{TaskID: "task-1"},
		TaskStatus: ledger.StatusCanceled, Hold: ledger.Money{AmountMinor: 1000, Currency: "EUR"}}
	key := ledger.CompensationKey(d)
	org := ledger.Org{ID: "org-b", JWKS: signer.JWKS()}
	amount := func(n int64) *int64 { return &n }
	signedAck := func(n int64) string {
		c := compensationtest.AckClaims("org-b", "ledger", "task-1", key, now)
		c["reversed_amount_minor"] = n
		return signer.Sign(t, string(compensation.KindAck), c)
	}
	for _, tc := range []struct {
		name    string
		r       compensation.RemoteReceipt
		want    *int64
		problem bool
	}{
		{"none: the whole hold", compensation.RemoteReceipt{}, nil, false},
		{"part", compensation.RemoteReceipt{ReversedAmountMinor: amount(400)}, amount(400), false},
		{"the hold", compensation.RemoteReceipt{ReversedAmountMinor: amount(1000)}, amount(1000), false},
		{"more than the hold", compensation.RemoteReceipt{ReversedAmountMinor: amount(1001)}, nil, true},
		{"from the jws", compensation.RemoteReceipt{JWS: signedAck(300)}, amount(300), false},
		{"receipt and jws agree", compensation.RemoteReceipt{JWS: signedAck(300), ReversedAmountMinor: amount(300)}, amount(300), false},
		{"receipt and jws differ", compensation.RemoteReceipt{JWS: signedAck(300), ReversedAmountMinor: amount(301)}, nil, true},
		{"jws more than the hold", compensation.RemoteReceipt{JWS: signedAck(1001)}, nil, true},
	} {
		tc.r.Outcome, tc.r.TaskID, tc.r.IdempotencyKey = compensation.ReceiptCompensated, "task-1", key
		v := compensation.JudgeReceipt(compensation.ReceiptInput{Delegation: d, Org: org, Receipt: tc.r, LedgerID: "ledger", Now: now})
		switch {
		case tc.problem && (v.Event != "" || v.Problem == ""):
			t.Errorf("%s: verdict %+v, want a problem", tc.name, v)
		case !tc.problem && (v.Event != ledger.EventCompensationAck || fmtAmount(v.ReversedAmountMinor) != fmtAmount(tc.want)):
			t.Errorf("%s: verdict %+v (amount %s), want an ack reversing %s", tc.name, v, fmtAmount(v.ReversedAmountMinor), fmtAmount(tc.want))
		}
	}

	var ref *compensation.RefusalError
	if err := compensation.CheckReversedAmount(d, amount(1001)); !errors.As(err, &ref) || ref.Code != compensation.CodeTokenAmountInvalid {
		t.Errorf("CheckReversedAmount(1001) = %v", err)
	}
	if err := compensation.CheckReversedAmount(d, nil); err != nil {
		t.Errorf("CheckReversedAmount(nil) = %v", err)
	}
}

func fmtAmount(p *int64) string {
	if p == nil {
		return "whole hold"
	}
	return strconv.FormatInt(*p, 10)
}
