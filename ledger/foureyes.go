package ledger

import (
	"context"
	"errors"

	"github.com/google/uuid"
)

// FourEyesReader tells, inside a decision's transaction, what the
// database knows of two principals' persons.
type FourEyesReader interface {
	// UnaccountedIdentityPair reports whether one of a and b is an OpenID
	// Connect identity signing in on its own (not linked to a principal of
	// its person) and the other a person principal neither linked to an
	// identity nor marked as having no identity-provider account: Quittance
	// cannot tell whether they are one human.
	UnaccountedIdentityPair(ctx context.Context, a, b uuid.UUID) (bool, error)
}

// ErrIdentityNotLinked is returned when a four-eyes decision would be
// taken by an OpenID Connect identity not yet linked to its person's token
// principal over a person principal not yet accounted for, or the other
// way round: the two may be one human.
var ErrIdentityNotLinked = errors.New("an OpenID Connect identity not linked to its person's token principal may be the same person as a token principal not yet linked or marked as having no identity-provider account")

// CheckIdentitiesAccounted is the four-eyes rule that Principal.SamePerson
// cannot see: outside dev, decider may not decide what requester asked
// for when they are an unaccounted pair (FourEyesReader), since one human
// holding a token principal and an identity not linked to it would
// otherwise be two persons. Link the identity to the person's token
// principal, or mark the principal as having no identity-provider account
// (ledger/PRINCIPALS.md#people-signed-in-by-openid-connect). Callers check
// Principal.SamePerson first.
func CheckIdentitiesAccounted(ctx context.Context, r FourEyesReader, dev bool, decider Principal, requester uuid.UUID) error {
	if dev {
		return nil
	}
	pair, err := r.UnaccountedIdentityPair(ctx, decider.ID, requester)
	if err != nil {
		return err
	}
	if pair {
		return ErrIdentityNotLinked
	}
	return nil
}
