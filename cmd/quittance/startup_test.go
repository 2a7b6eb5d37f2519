//go:build linux

package main

// Concurrent start-up: replicas of a deployment start at the same moment,
// on a database nothing has migrated yet or on one already migrated. Every
// write a replica makes before it serves — the migrations (the default task
// classes among them), the bootstrap token — must then be safe against the
// same write by the others: every replica becomes ready, and each write is
// made once. (`quittance dev` registers its demo agent's org with an upsert
// after it serves; it runs one process on its own cluster.)

import (
	"bufio"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/quittance/quittance/ledger/access"
	"github.com/quittance/quittance/sql/migrations"
	"github.com/quittance/quittance/sql/pgtest"
)

// startupReplicas is how many processes start at once, and startupRounds
// how many times, each on a fresh database: one round rarely loses the race
// the test is about, a few nearly always would.
const (
	startupReplicas = 4
	startupRounds   = 6
)

func TestReplicasStartTogether(t *testing.T) {
	t.Parallel()
	bin := failpointBinary(t) // no failpoint is armed: the production code paths
	migrationFiles, err := filepath.Glob("../../sql/migrations/*.sql")
	if err != nil || len(migrationFiles) == 0 {
		t.Fatalf("find the migrations: %v", err)
	}
	// Odd rounds start on a database nothing has migrated, even rounds on
	// one already migrated (a scale-out, or the restart of every replica):
	// there the migration lock is held only for a moment, the replicas'
	// start-up writes come close together, and a look-up-then-insert loses.
	for round := range startupRounds {
		fresh := round%2 == 0
		name := fmt.Sprintf("round-%d-migrated", round+1)
		if fresh {
			name = fmt.Sprintf("round-%d-fresh", round+1)
		}
		t.Run(name, func(t *testing.T) {
			dbURL := pgtest.URL(t)
			if fresh {
				dbURL = pgtest.EmptyURL(t)
			}
			token := access.NewTokenSecret()
			env := []string{
				"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
				"DATABASE_URL=" + dbURL, "QUITTANCE_ADDR=127.0.0.1:0", "QUITTANCE_BOOTSTRAP_TOKEN=" + token,
				"QUITTANCE_LEDGER_ID=" + faultLedgerID, "QUITTANCE_LOG_LEVEL=info", "QUITTANCE_SWEEP_INTERVAL=1h",
				"QUITTANCE_SHUTDOWN_TIMEOUT=5s", "QUITTANCE_A2A_STREAMING=false",
				"QUITTANCE_SIGNING_KEY_FILE=" + signingKeyFile(t),
			}
			logDir := t.TempDir()
			procs := make([]*exec.Cmd, startupReplicas)
			for i := range procs {
				cmd := exec.Command(bin, "serve")
				cmd.Env = env
				cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
				procs[i] = cmd
			}
			// Every process is prepared first, then all are started together.
			var (
				wg    sync.WaitGroup
				start = make(chan struct{})
				urls  = make([]string, startupReplicas)
				errs  = make([]error, startupReplicas)
			)
			for i, cmd := range procs {
				logPath := filepath.Join(logDir, fmt.Sprintf("replica-%d.log", i))
				wg.Go(func() {
					<-start
					urls[i], errs[i] = startReplica(t, cmd, logPath)
				})
				t.Cleanup(func() {
					if t.Failed() {
						showLog(t, fmt.Sprintf("replica %d", i), logPath)
					}
				})
			}
			close(start)
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Errorf("replica %d: %v", i, err)
				}
			}
			if t.Failed() {
				return
			}
			// Each replica answers as ready and knows the bootstrap token:
			// outside dev it may only create the first on-call principals,
			// so any other admin call is forbidden (403), not unauthenticated.
			for i, u := range urls {
				c := newTestClient(u)
				if res := c.do(t.Context(), http.MethodGet, "/readyz", "", nil); res.status != http.StatusOK {
					t.Errorf("replica %d /readyz: %v", i, res)
				}
				if res := c.do(t.Context(), http.MethodGet, "/admin/v1/task-classes/procurement", token, nil); res.status != http.StatusForbidden {
					t.Errorf("replica %d with the bootstrap token: %v", i, res)
				}
			}
			// And each start-up write was made once.
			pool := testPool(t, dbURL)
			var tokens, tokenEvents, classes, applied int
			if err := pool.QueryRow(t.Context(), `SELECT
				(SELECT count(*) FROM api_tokens WHERE token_hash = $1),
				(SELECT count(*) FROM events WHERE type = 'token_created'),
				(SELECT count(*) FROM task_classes),
				(SELECT count(*) FROM goose_db_version WHERE version_id > 0)`, access.HashToken(token)).
				Scan(&tokens, &tokenEvents, &classes, &applied); err != nil {
				t.Fatal(err)
			}
			if tokens != 1 || tokenEvents != 1 {
				t.Errorf("%d bootstrap tokens and %d token_created events; want exactly 1 and 1", tokens, tokenEvents)
			}
			if classes != 5 {
				t.Errorf("%d task classes; want the 5 defaults, once each", classes)
			}
			if applied != len(migrationFiles) {
				t.Errorf("goose recorded %d applied migrations; want each of the %d once", applied, len(migrationFiles))
			}
			if pending, err := migrations.Pending(t.Context(), stdlibDB(t, dbURL)); err != nil || pending {
				t.Errorf("migrations pending after the start: %v, %v", pending, err)
			}
			checkDatabase(t, pool)
		})
	}
}

// startReplica starts cmd, with its output in logPath, and waits until it
// listens and answers /readyz with 200. The process is stopped when the
// test ends.
func startReplica(t *testing.T, cmd *exec.Cmd, logPath string) (string, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return "", err
	}
	cmd.Stderr = logFile
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logFile.Close()
		return "", err
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return "", fmt.Errorf("start: %w", err)
	}
	p := &serviceProcess{cmd: cmd, exited: make(chan struct{})}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "Quittance listening on "); ok {
				urls <- strings.Fields(rest)[0]
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	t.Cleanup(p.stop)
	deadline := time.After(60 * time.Second)
	select {
	case p.url = <-urls:
	case <-p.exited:
		return "", fmt.Errorf("exited before listening: %v", p.waitErr)
	case <-deadline:
		return "", fmt.Errorf("not listening after 60s")
	}
	c := newTestClient(p.url)
	for {
		if res := c.do(t.Context(), http.MethodGet, "/readyz", "", nil); res.status == http.StatusOK {
			return p.url, nil
		}
		select {
		case <-p.exited:
			return "", fmt.Errorf("exited before it was ready: %v", p.waitErr)
		case <-deadline:
			return "", fmt.Errorf("not ready after 60s")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stdlibDB opens a database/sql handle on dbURL, closed when the test ends.
func stdlibDB(t *testing.T, dbURL string) *sql.DB {
	t.Helper()
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { db.Close() })
	return db
}
