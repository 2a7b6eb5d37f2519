package access

import (
	"context"
	"errors"

	"github.com/google/uuid"

	"github.com/quittance/quittance/ledger"
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

// ErrSelfApproval refuses a decision taken by the person who asked for it
// (SecondPersonError carries what was being decided).
var ErrSelfApproval = errors.New("the requesting person cannot decide their own request")

// SecondPersonError is ErrSelfApproval for one kind of request, so a
// refusal can say what needs another person.
type SecondPersonError struct {
	Subject DecisionSubject
}

// DecisionSubject is what a two-person decision is about.
type DecisionSubject string

// The subjects of two-person decisions.
const (
	SubjectWriteOff DecisionSubject = "write-off"
	SubjectChange   DecisionSubject = "change"
)

// Error implements error. The texts are the ones write_off_refused events
// have always recorded.
func (e *SecondPersonError) Error() string {
	if e.Subject == SubjectWriteOff {
		return "a write-off must be approved by a different on-call principal"
	}
	return "the requesting principal cannot approve its own request"
}

// Is makes errors.Is(err, ErrSelfApproval) true for every *SecondPersonError.
func (e *SecondPersonError) Is(target error) bool { return target == ErrSelfApproval }

// CheckSecondPerson is the two-person rule, the one approval engine of
// write-offs and pending changes (ledger/DESIGN.md §6): decider may decide
// what requester asked for only as another person (Principal.SamePerson
// compares persons, never names or credentials: another credential or a
// linked identity of the requester is still the requester), and, outside
// dev, not as one of an unaccounted pair (FourEyesReader): one human
// holding a token principal and an OpenID Connect identity not linked to
// it would otherwise be two persons. Link the identity to the person's
// token principal, or mark the principal as having no identity-provider
// account (ledger/access/PRINCIPALS.md#people-signed-in-by-openid-connect).
func CheckSecondPerson(ctx context.Context, r FourEyesReader, dev bool, decider ledger.Principal, requester uuid.UUID, subject DecisionSubject) error {
	if decider.SamePerson(requester) {
		return &SecondPersonError{Subject: subject}
	}
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
