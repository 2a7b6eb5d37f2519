package backoff

import (
	"testing"
	"time"
)

func TestExponentialWait(t *testing.T) {
	t.Parallel()
	e := Exponential{Base: 2 * time.Second, Max: 5 * time.Minute}
	for _, tc := range []struct {
		n    int
		want time.Duration
	}{
		{0, 2 * time.Second},
		{1, 2 * time.Second},
		{2, 4 * time.Second},
		{3, 8 * time.Second},
		{8, 256 * time.Second},
		{9, 5 * time.Minute},
		{1000, 5 * time.Minute},
	} {
		if got := e.Wait(tc.n); got != tc.want {
			t.Errorf("Wait(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
	if got := (Exponential{Base: time.Minute, Max: time.Second}).Wait(1); got != time.Second {
		t.Errorf("a base above the cap waits %v, want the cap", got)
	}
}
