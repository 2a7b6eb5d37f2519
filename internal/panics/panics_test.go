package panics_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/quittance/quittance/internal/panics"
)

// TestRecover: a panic becomes an *Error with the value and the stack; an
// error or nil passes through.
func TestRecover(t *testing.T) {
	err := panics.Recover(func() error {
		at := func(s []int, i int) int { return s[i] }
		_ = at(nil, 1) // a runtime panic: index out of range
		return nil
	})
	p, ok := panics.As(err)
	if !ok || !strings.Contains(p.Error(), "index out of range") || !strings.Contains(string(p.Stack), "panics_test.go") {
		t.Fatalf("recovered %v (%v)", err, ok)
	}
	plain := errors.New("plain")
	if err := panics.Recover(func() error { return plain }); err != plain {
		t.Fatalf("an error came back as %v", err)
	}
	if _, ok := panics.As(plain); ok {
		t.Fatal("a plain error taken for a panic")
	}
	if err := panics.Recover(func() error { return nil }); err != nil {
		t.Fatal(err)
	}
}
