//go:build linux

package main

import (
	"testing"

	"github.com/quittance/quittance/sql/pgtest"
)

// TestFailoverUnderPatroni runs the failover test (runFailover) on two
// servers under Patroni with a local etcd (sql/pgtest.Patroni): the
// leader's node is killed, Patroni and its postmaster alike, and the
// standby is promoted when Patroni decides, after the leader key expires.
func TestFailoverUnderPatroni(t *testing.T) {
	t.Parallel()
	runFailover(t, pgtest.Patroni(t))
}
