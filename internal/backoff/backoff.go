// Package backoff computes the waits between the retries of Quittance's
// background work: outbound A2A calls, orgs whose agent keeps failing,
// webhook deliveries. One formula for all of them keeps retry behaviour the
// same wherever it is configured.
//
// It imports no Quittance package and must never sleep, read a clock or
// keep state: callers schedule the wait themselves, with their own clock.
package backoff

import "time"

// Exponential is a bounded exponential backoff: the first retry waits Base,
// each later one twice as long as the one before, and none longer than Max.
type Exponential struct {
	// Base is the wait before the first retry.
	Base time.Duration
	// Max caps every wait.
	Max time.Duration
}

// Wait returns the wait before retry n, counted from 1: Base·2^(n-1), at
// most Max. Counts below 1 wait Base.
func (e Exponential) Wait(n int) time.Duration {
	d := e.Base
	for i := 1; i < n && d < e.Max; i++ {
		d *= 2
	}
	return min(d, e.Max)
}
