package jose

import "testing"

// TestDecoyKeysFitEveryAlgorithm: there is a decoy key for every accepted
// algorithm, of the type, curve and size it requires, so a check against
// it is a real verification rather than a quick mismatch.
func TestDecoyKeysFitEveryAlgorithm(t *testing.T) {
	t.Parallel()
	for _, alg := range AllowedAlgorithms() {
		if !keyFitsAlgorithm(decoyKeys()[alg], alg) {
			t.Errorf("no fitting decoy key for %s", alg)
		}
	}
}
