package pgtest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/quittance/quittance/sql/pgcluster"
	"github.com/quittance/quittance/sql/pgtest/internal/scratch"
)

// Pair is a private primary and its synchronous streaming standby, for
// failover tests (Replicated).
type Pair struct {
	Primary, Standby *pgcluster.Cluster
	// Database is the name of the test database on both.
	Database string
}

// Replicated starts a private primary, as Cluster does, creates a
// database with the schema applied on it, and makes a streaming standby of
// it (pg_basebackup -R), on two loopback ports from the machine's
// PostgreSQL binaries. Replication is made synchronous once the standby
// streams, so every commit the primary acknowledges is on the standby;
// the setting is the primary's alone (set after the copy), so the standby,
// once promoted, does not wait for a standby of its own. Both servers are
// stopped and removed when the test ends; if it failed, the end of both
// logs is written to the test log first. Each call costs an initdb and a
// base backup.
func Replicated(t testing.TB) *Pair {
	t.Helper()
	return replicated(t, true)
}

// ReplicatedAsync is Replicated with asynchronous replication: the
// primary acknowledges a commit once it is on its own disk, whether or not
// the standby has received it, so a failover loses whatever the standby
// had yet to receive.
func ReplicatedAsync(t testing.TB) *Pair {
	t.Helper()
	return replicated(t, false)
}

func replicated(t testing.TB, synchronous bool) *Pair {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	var dirs []string
	var started []*pgcluster.Cluster
	t.Cleanup(func() {
		for _, c := range started {
			if t.Failed() {
				if b, err := os.ReadFile(c.LogFile()); err == nil {
					t.Logf("pgtest: server log of %s:\n%s", c.DataDir(), lastLines(string(b), 40))
				}
			}
			if err := c.Stop(context.Background()); err != nil {
				t.Errorf("pgtest: stop %s: %v", c.DataDir(), err)
			}
		}
		for _, d := range dirs {
			_ = os.RemoveAll(d)
		}
	})
	newDir := func() string {
		d, err := scratch.NewDir()
		if err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		dirs = append(dirs, d)
		return d
	}
	primary, err := pgcluster.Start(ctx, pgcluster.Config{DataDir: newDir()})
	if err != nil {
		t.Fatalf("pgtest: start the primary: %v", err)
	}
	started = append(started, primary)
	tpl, err := buildTemplate(ctx, primary.URL("postgres"), migrationsHash())
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	name := databaseName(t.Name())
	if err := createFromTemplate(ctx, primary.URL("postgres"), name, tpl); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	standby, err := pgcluster.StartStandby(ctx, primary, pgcluster.Config{DataDir: newDir()})
	if err != nil {
		t.Fatalf("pgtest: start the standby: %v", err)
	}
	started = append(started, standby)
	if synchronous {
		if err := primary.RequireSynchronousStandby(ctx); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
	}
	return &Pair{Primary: primary, Standby: standby, Database: name}
}

// URL is the test database's URL naming both servers, as a service
// configured for failover names them: pgx tries them in order and keeps
// the one that accepts writes (target_session_attrs=read-write).
func (p *Pair) URL() string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d,127.0.0.1:%d/%s?sslmode=disable&target_session_attrs=read-write",
		pgcluster.Superuser, p.Primary.Port(), p.Standby.Port(), p.Database)
}

// Failover kills the primary's postmaster (SIGKILL) and promotes the
// standby, and returns when the standby accepts writes. killed is when the
// primary was killed.
func (p *Pair) Failover(ctx context.Context) (killed time.Time, err error) {
	return p.FailoverThen(ctx, nil)
}

// FailoverThen is Failover calling between, when not nil, after the kill
// and before the promotion (StallReplication's drop).
func (p *Pair) FailoverThen(ctx context.Context, between func()) (killed time.Time, err error) {
	killed = time.Now()
	if err := p.Primary.Kill(); err != nil {
		return killed, err
	}
	if between != nil {
		between()
	}
	return killed, p.Standby.Promote(ctx)
}

// createFromTemplate creates database name from template tpl on the
// server of adminURL.
func createFromTemplate(ctx context.Context, adminURL, name, tpl string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect to maintenance database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	q := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize() + " TEMPLATE " + pgx.Identifier{tpl}.Sanitize()
	if _, err := conn.Exec(ctx, q); err != nil {
		return fmt.Errorf("%s: %w", q, err)
	}
	return nil
}
