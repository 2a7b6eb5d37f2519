package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// StartStandby makes a streaming standby of primary in cfg.DataDir, which
// must be missing or empty: pg_basebackup -R copies the primary and
// writes the standby's primary_conninfo and standby.signal, and the copy
// starts on a port of its own (cfg.Port, or a free one) and streams from
// the primary. It takes the primary's binaries; cfg.Fast is ignored (a
// standby is for tests of failover, where commits must be durable).
func StartStandby(ctx context.Context, primary *Cluster, cfg Config) (*Cluster, error) {
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("resolve data directory: %w", err)
	}
	c := &Cluster{dataDir: dataDir, binDir: primary.binDir, runAs: primary.runAs, log: cfg.Log}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	c.log = c.log.With("data_dir", dataDir)
	if entries, err := os.ReadDir(dataDir); err == nil && len(entries) > 0 {
		return nil, fmt.Errorf("standby data directory %s is not empty", dataDir)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	if c.runAs != nil {
		if err := os.Chown(dataDir, c.runAs.uid, c.runAs.gid); err != nil {
			return nil, fmt.Errorf("give data directory to the %s user: %w", c.runAs.name, err)
		}
	}
	cmd := c.command(c.tool("pg_basebackup"), "-D", dataDir, "-R", "-X", "stream",
		"--checkpoint=fast", "--no-sync", "-h", "127.0.0.1", "-p", strconv.Itoa(primary.Port()), "-U", Superuser)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("pg_basebackup: %w\n%s", err, tail(out.String(), 4000))
	}
	_ = os.Remove(filepath.Join(dataDir, portFile)) // the primary's
	port := cfg.Port
	if port == 0 {
		if port, err = freePort(); err != nil {
			return nil, err
		}
	}
	c.port.Store(int32(port))
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.startLocked(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// Kill sends SIGKILL to the postmaster alone, as a crash of it or of its
// machine would end it, and waits for it to exit. Its backends find out
// on their own and end their sessions (57P01, "unexpected postmaster
// exit"). A killed cluster is not restarted; Stop on it does nothing.
func (c *Cluster) Kill() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.proc
	if p == nil {
		return errors.New("pgcluster: the cluster is not running")
	}
	c.proc = nil
	c.log.Info("killing the postmaster", "pid", p.cmd.Process.Pid)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill the postmaster: %w", err)
	}
	<-p.done
	return nil
}

// Promote promotes a standby to a primary (pg_ctl promote) and returns
// once it accepts writes.
func (c *Cluster) Promote(ctx context.Context) error {
	cmd := c.command(c.tool("pg_ctl"), "promote", "-D", c.dataDir, "-w", "-t", "60")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("pg_ctl promote: %w\n%s", err, tail(out.String(), 2000))
	}
	for {
		recovering, err := c.inRecovery(ctx)
		if err == nil && !recovering {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for the promotion: %w (last: %v)", ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// inRecovery reports whether the server is a standby.
func (c *Cluster) inRecovery(ctx context.Context) (bool, error) {
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var recovering bool
	err = conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&recovering)
	return recovering, err
}

// RequireSynchronousStandby makes the primary's commits wait for a
// standby's flush (synchronous_standby_names = '*') once one streams, and
// returns when pg_stat_replication shows it synchronous: from then on, a
// commit the primary acknowledged is on the standby too.
func (c *Cluster) RequireSynchronousStandby(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, q := range []string{"ALTER SYSTEM SET synchronous_standby_names = '*'", "SELECT pg_reload_conf()"} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	for {
		var sync int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication
			WHERE state = 'streaming' AND sync_state = 'sync'`).Scan(&sync)
		if err != nil {
			return fmt.Errorf("read pg_stat_replication: %w", err)
		}
		if sync > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for a synchronous standby: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// tool is the path of a PostgreSQL client program: beside postgres in the
// binaries' directory, or, when that holds only links to initdb and
// postgres (as /usr/local/bin may), beside what postgres links to.
func (c *Cluster) tool(name string) string {
	path := filepath.Join(c.binDir, name)
	if _, err := os.Stat(path); err == nil {
		return path
	}
	if real, err := filepath.EvalSymlinks(filepath.Join(c.binDir, "postgres")); err == nil {
		return filepath.Join(filepath.Dir(real), name)
	}
	return path
}
