//go:build unix

package pgtest

import (
	"context"
	"fmt"
	"syscall"

	"github.com/jackc/pgx/v5"
)

// StallReplication stops the primary's WAL sender (SIGSTOP), as a
// congested link or an overloaded standby leaves the standby behind: from
// then on the primary sends the standby nothing, and with asynchronous
// replication (ReplicatedAsync) it goes on acknowledging commits it alone
// has. (Stopping the standby's receiver instead would not do: what the
// sender had written to the connection waits in the kernel's buffers and
// reaches the standby after all.) drop kills the stopped sender
// (SIGKILL), so that what it had yet to send is lost, as the crash of the
// primary's machine loses it; call it between the primary's kill and the
// promotion (FailoverThen).
func (p *Pair) StallReplication(ctx context.Context) (drop func(), err error) {
	conn, err := pgx.Connect(ctx, p.Primary.URL("postgres"))
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var pid int
	if err := conn.QueryRow(ctx, `SELECT pid FROM pg_stat_replication WHERE state = 'streaming'`).Scan(&pid); err != nil {
		return nil, fmt.Errorf("find the primary's WAL sender: %w", err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return nil, fmt.Errorf("stop the WAL sender: %w", err)
	}
	return func() { _ = syscall.Kill(pid, syscall.SIGKILL) }, nil
}
