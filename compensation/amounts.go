package compensation

import (
	"fmt"

	"github.com/quittance/quittance/ledger"
)

// Partial compensation (ledger/DESIGN.md §2.3): an ack's reversed_amount_minor
// claim, or a receipt's reversedAmountMinor, says how much of the hold the
// remote reversed. That much returns to the budget and the rest is spent,
// as the cost of the cancellation; absent, the whole hold returns.

// CheckReversedAmount refuses a reversed amount that is more than the hold
// of d (token_amount_invalid). A negative or non-integer amount never gets
// this far: Verify and ParseRemoteReceipt refuse it.
func CheckReversedAmount(d ledger.Delegation, reversed *int64) error {
	if problem := reversedProblem(d, reversed); problem != "" {
		return Refuse(CodeTokenAmountInvalid, problem)
	}
	return nil
}

// reversedProblem says why a reversed amount cannot apply to d, or "".
func reversedProblem(d ledger.Delegation, reversed *int64) string {
	if reversed != nil && (*reversed < 0 || *reversed > d.Hold.AmountMinor) {
		return fmt.Sprintf("the reversed amount %d is not between 0 and the hold %d", *reversed, d.Hold.AmountMinor)
	}
	return ""
}

// receiptReversedAmount is the reversed amount a receipt proves: its
// reversedAmountMinor, or its verified jws's reversed_amount_minor claim;
// when it carries both they must agree.
func receiptReversedAmount(r RemoteReceipt, claims *Claims) (*int64, string) {
	amount := r.ReversedAmountMinor
	if claims != nil && claims.ReversedAmountMinor != nil {
		if amount != nil && *amount != *claims.ReversedAmountMinor {
			return nil, "the receipt's reversedAmountMinor and its jws's reversed_amount_minor differ"
		}
		amount = claims.ReversedAmountMinor
	}
	return amount, ""
}

// reversedVerdict completes the verdict of a compensated receipt with the
// amount it proves reversed, or turns it into a refusal when that amount
// is inconsistent or more than the hold.
func reversedVerdict(in ReceiptInput, v ReceiptVerdict) ReceiptVerdict {
	amount, problem := receiptReversedAmount(in.Receipt, v.Claims)
	if problem == "" {
		problem = reversedProblem(in.Delegation, amount)
	}
	if problem != "" {
		return ReceiptVerdict{Problem: problem}
	}
	v.ReversedAmountMinor = amount
	return v
}
