package errkind_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/quittance/quittance/cmd/quittance/internal/errkind"
	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/access"
)

// TestOf pins each error's kind and status: the statuses the API and the
// console answer with.
func TestOf(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err    error
		kind   errkind.Kind
		status int
	}{
		{&compensation.RefusalError{Code: compensation.CodeTokenRefused}, errkind.TokenRefused, 401},
		{&compensation.RefusalError{Code: compensation.CodeTokenReplayed}, errkind.TokenConflict, 409},
		{&compensation.RefusalError{Code: compensation.CodeEvidenceNotExpected}, errkind.TokenConflict, 409},
		{&compensation.RefusalError{Code: compensation.CodeTokenTooLarge}, errkind.TokenTooLarge, 413},
		{&compensation.RefusalError{Code: compensation.CodeEvidenceConflict}, errkind.TokenInvalid, 422},
		{delegate.ErrPushUnauthorized, errkind.PushUnauthorized, 401},
		{delegate.ErrRemoteAgentUnavailable, errkind.RemoteAgentUnavailable, 502},
		{&access.SecondPersonError{Subject: access.SubjectWriteOff}, errkind.WriteOffSelfApproval, 403},
		{&access.SecondPersonError{Subject: access.SubjectChange}, errkind.SelfApproval, 403},
		{access.ErrSelfApproval, errkind.SelfApproval, 403},
		{access.ErrIdentityNotLinked, errkind.IdentityNotLinked, 403},
		{ledger.Invalid("name", "is required"), errkind.Validation, 422},
		{&ledger.ReferenceError{Field: "org_id", ID: "x"}, errkind.Reference, 422},
		{ledger.Conflict("currency_mismatch", "no"), errkind.Conflict, 409},
		{fmt.Errorf("load: %w", ledger.ErrNotFound), errkind.NotFound, 404},
		{ledger.ErrUnauthenticated, errkind.Unauthenticated, 401},
		{ledger.ErrForbidden, errkind.Forbidden, 403},
		{ledger.ErrIdempotencyMismatch, errkind.IdempotencyMismatch, 422},
		{ledger.ErrInsufficientFunds, errkind.InsufficientFunds, 422},
		{ledger.ErrUnknownTaskStatus, errkind.UnknownTaskStatus, 422},
		{fmt.Errorf("write queue full: %w", ledger.ErrUnavailable), errkind.Unavailable, 503},
		{fmt.Errorf("commit: %w", ledger.ErrOutcomeUnknown), errkind.OutcomeUnknown, 500},
		{context.Canceled, errkind.Canceled, 499},
		{ledger.ErrConcurrentUpdate, errkind.Internal, 500},
		{errors.New("boom"), errkind.Internal, 500},
	} {
		if k := errkind.Of(c.err); k != c.kind || k.Status() != c.status {
			t.Errorf("Of(%v) = %s (%d), want %s (%d)", c.err, k, k.Status(), c.kind, c.status)
		}
	}
}
