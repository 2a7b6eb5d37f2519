package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// What an operation costs, beside what a pgbench transaction costs: over
// each measured window of a lifecycle run and of a pgbench anchor, the CPU
// time PostgreSQL, the service and the load generator spent, the WAL
// written, and the statements and commits PostgreSQL ran, each divided by
// the operations the window completed. Everything is read at the window's
// edges, outside it: /proc and getrusage for the CPU, and one connection
// to the postgres database (so its own statements are never counted) for
// the rest. The reads cost a few milliseconds per window.

// clockTicks is USER_HZ, the unit of the times in /proc/<pid>/stat: 100
// on Linux's common architectures, whatever the kernel's own tick.
const clockTicks = 100

// windowCost is what one measured window cost.
type windowCost struct {
	Ops int64 // operations completed in the window: API calls, or pgbench transactions
	// PG is every process of the cluster: the postmaster, its children
	// and the children that exited during the window.
	PG      time.Duration
	Service time.Duration // the quittance serve processes; zero for pgbench
	Load    time.Duration // the load generator: this process, or pgbench
	WAL     int64         // bytes of WAL written, by the whole cluster
	// Statements and Nested are the measured database's top-level
	// statements (BEGIN and COMMIT included) and the statements its
	// triggers, functions and foreign-key checks ran, from
	// pg_stat_statements; both are -1 when it is not installed.
	Statements, Nested int64
	Commits            int64 // the database's xact_commit
}

// measured reports whether the window was measured at all.
func (c windowCost) measured() bool { return c.Ops > 0 }

// perOp is v divided by the window's operations, times k (3: per lifecycle).
func (c windowCost) perOp(v float64, k int) float64 {
	if c.Ops == 0 {
		return 0
	}
	return v * float64(k) / float64(c.Ops)
}

// micros is d per operation in microseconds, times k.
func (c windowCost) micros(d time.Duration, k int) float64 {
	return c.perOp(float64(d)/float64(time.Microsecond), k)
}

// costMeter measures windows on the harness's cluster.
type costMeter struct {
	conn       *pgx.Conn // to the postgres database
	dataDir    string
	statements bool // pg_stat_statements is loaded and tracks nested statements
}

// newCostMeter loads pg_stat_statements into the cluster (restarting it
// once, unless a kept cluster has it already), tracking nested statements
// too, and connects to the postgres database. Without the extension the
// statement counts are left out and said so.
func newCostMeter(ctx context.Context, h *harness) (*costMeter, error) {
	m := &costMeter{dataDir: h.cluster.DataDir()}
	conn, err := pgx.Connect(ctx, h.cluster.URL("postgres"))
	if err != nil {
		return nil, err
	}
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_available_extensions WHERE name = 'pg_stat_statements')").Scan(&m.statements); err != nil {
		conn.Close(ctx)
		return nil, err
	}
	if !m.statements {
		fmt.Fprintln(h.stderr, "pg_stat_statements is not installed with PostgreSQL: statements per operation are not measured")
		m.conn = conn
		return m, nil
	}
	var libs string
	if err := conn.QueryRow(ctx, "SHOW shared_preload_libraries").Scan(&libs); err != nil {
		conn.Close(ctx)
		return nil, err
	}
	if !strings.Contains(libs, "pg_stat_statements") {
		libs = strings.TrimPrefix(libs+",pg_stat_statements", ",")
		_, err := conn.Exec(ctx, "ALTER SYSTEM SET shared_preload_libraries = "+quoteLiteral(libs))
		conn.Close(ctx)
		if err != nil {
			return nil, err
		}
		fmt.Fprintln(h.stderr, "restarting PostgreSQL with pg_stat_statements")
		if err := h.cluster.Restart(ctx, "fast"); err != nil {
			return nil, err
		}
		if conn, err = pgx.Connect(ctx, h.cluster.URL("postgres")); err != nil {
			return nil, err
		}
	}
	m.conn = conn
	if _, err := conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		m.close()
		return nil, err
	}
	if err := m.track(ctx, "all"); err != nil {
		m.close()
		return nil, err
	}
	return m, nil
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// track sets pg_stat_statements.track (all: nested statements too; none:
// nothing, so the runs after the measured ones pay nothing for it).
func (m *costMeter) track(ctx context.Context, level string) error {
	if !m.statements {
		return nil
	}
	if _, err := m.conn.Exec(ctx, "ALTER SYSTEM SET pg_stat_statements.track = "+quoteLiteral(level)); err != nil {
		return err
	}
	_, err := m.conn.Exec(ctx, "SELECT pg_reload_conf()")
	return err
}

func (m *costMeter) close() {
	if m != nil && m.conn != nil {
		m.conn.Close(context.Background())
	}
}

// costWindow is a window being measured: what was read at its start.
type costWindow struct {
	m        *costMeter
	db       string
	services []int // the pids of the quittance serve processes
	start    costSample
}

// costSample is the counters read at one edge of a window.
type costSample struct {
	pg, service, self time.Duration
	wal, commits      int64
}

// begin starts measuring a window of work on database db by the service
// processes services (none for pgbench): the statement counts are reset
// and the database's counters read, then the CPU times, this process's last.
func (m *costMeter) begin(ctx context.Context, db string, services []int) (*costWindow, error) {
	w := &costWindow{m: m, db: db, services: services}
	if m.statements {
		if _, err := m.conn.Exec(ctx, "SELECT pg_stat_statements_reset()"); err != nil {
			return nil, err
		}
	}
	if err := w.readDatabase(ctx, &w.start); err != nil {
		return nil, err
	}
	if err := w.readOthersCPU(&w.start); err != nil {
		return nil, err
	}
	var err error
	w.start.self, err = selfCPU()
	return w, err
}

// end ends the window and returns what it cost (the caller sets Ops): the
// CPU times first, this process's first, then the database's counters.
// With drain, it waits (outside the window) for the database's sessions
// to end first, as they do after pgbench exits, so that their last
// commits are counted: a backend reports its counts at most once a
// second while it runs, and when it exits.
func (w *costWindow) end(ctx context.Context, drain bool) (windowCost, error) {
	var s costSample
	var err error
	if s.self, err = selfCPU(); err != nil {
		return windowCost{}, err
	}
	if err := w.readOthersCPU(&s); err != nil {
		return windowCost{}, err
	}
	if drain {
		if err := w.awaitSessionsEnd(ctx); err != nil {
			return windowCost{}, err
		}
	}
	if err := w.readDatabase(ctx, &s); err != nil {
		return windowCost{}, err
	}
	c := windowCost{PG: s.pg - w.start.pg, Service: s.service - w.start.service, Load: s.self - w.start.self,
		WAL: s.wal - w.start.wal, Commits: s.commits - w.start.commits, Statements: -1, Nested: -1}
	if w.m.statements {
		err := w.m.conn.QueryRow(ctx, `SELECT coalesce(sum(calls) FILTER (WHERE toplevel), 0)::bigint,
			coalesce(sum(calls) FILTER (WHERE NOT toplevel), 0)::bigint
			FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1)`, w.db).Scan(&c.Statements, &c.Nested)
		if err != nil {
			return windowCost{}, fmt.Errorf("read pg_stat_statements: %w", err)
		}
	}
	return c, nil
}

// readDatabase reads the cluster's WAL position and the database's commits.
func (w *costWindow) readDatabase(ctx context.Context, s *costSample) error {
	err := w.m.conn.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint,
		coalesce((SELECT xact_commit FROM pg_stat_database WHERE datname = $1), 0)`, w.db).Scan(&s.wal, &s.commits)
	if err != nil {
		return fmt.Errorf("read the WAL position and commits: %w", err)
	}
	return nil
}

// readOthersCPU reads the CPU times of the cluster and the services (this
// process's is read last at a window's start and first at its end).
func (w *costWindow) readOthersCPU(s *costSample) error {
	var err error
	if s.pg, err = postgresCPU(w.m.dataDir); err != nil {
		return err
	}
	for _, pid := range w.services {
		st, err := readProcStat(pid)
		if err != nil {
			return fmt.Errorf("CPU time of quittance serve: %w", err)
		}
		s.service += st.own
	}
	return nil
}

// awaitSessionsEnd waits, for up to ten seconds, until no session is
// connected to the window's database.
func (w *costWindow) awaitSessionsEnd(ctx context.Context) error {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		var n int
		if err := w.m.conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", w.db).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// selfCPU is this process's user and system time.
func selfCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return rusageCPU(&ru), nil
}

// rusageCPU is the user and system time of ru.
func rusageCPU(ru *syscall.Rusage) time.Duration {
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procStat is the part of /proc/<pid>/stat the meter reads.
type procStat struct {
	ppid     int
	own      time.Duration // utime + stime
	children time.Duration // cutime + cstime: the children it waited for
}

// readProcStat reads /proc/<pid>/stat.
func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	// The command name, in parentheses, may hold spaces: the fields
	// counted start after its closing parenthesis.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	var v [4]int64
	for k, field := range f[11:15] { // utime stime cutime cstime
		if v[k], err = strconv.ParseInt(field, 10, 64); err != nil {
			return procStat{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	tick := time.Second / clockTicks
	return procStat{ppid: ppid, own: time.Duration(v[0]+v[1]) * tick, children: time.Duration(v[2]+v[3]) * tick}, nil
}

// postgresCPU is the CPU time of the cluster in dataDir: its postmaster,
// the children it waited for (the backends that exited), and every child
// still running, found by its parent's pid. A child the postmaster waits
// for while the children are read would be missed (read neither running
// nor among those waited for), as a pgbench run's backends all were when
// its sample fell as they exited: the postmaster is read before and after
// the children, and they are read again until no child was waited for in
// between.
func postgresCPU(dataDir string) (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("find the postmaster: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pm, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return 0, fmt.Errorf("postmaster.pid: %w", err)
	}
	before, err := readProcStat(pm)
	if err != nil {
		return 0, fmt.Errorf("CPU time of the postmaster: %w", err)
	}
	for tries := 1; ; tries++ {
		running, err := childrenCPU(pm)
		if err != nil {
			return 0, err
		}
		after, err := readProcStat(pm)
		if err != nil {
			return 0, fmt.Errorf("CPU time of the postmaster: %w", err)
		}
		if after.children == before.children || tries == 10 {
			return after.own + after.children + running, nil
		}
		before = after
	}
}

// childrenCPU is the CPU time of the running children of process pm.
func childrenCPU(pm int) (time.Duration, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	var total time.Duration
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == pm {
			continue
		}
		st, err := readProcStat(pid)
		if err != nil || st.ppid != pm {
			continue // gone, or not the cluster's
		}
		total += st.own + st.children
	}
	return total, nil
}

// costCells are a window's figures per operation (k 1) or per lifecycle
// (k 3), formatted: CPU µs of PostgreSQL, the service and the load
// generator and their total, WAL bytes, top-level and nested statements,
// commits. A figure not measured is "—".
func (c windowCost) cells(k int) []string {
	dash := func(ok bool, s string) string {
		if !ok {
			return "—"
		}
		return s
	}
	f := func(format string, v float64) string { return fmt.Sprintf(format, v) }
	return []string{
		f("%.0f", c.micros(c.PG, k)),
		dash(c.Service > 0, f("%.0f", c.micros(c.Service, k))),
		f("%.0f", c.micros(c.Load, k)),
		f("%.0f", c.micros(c.PG+c.Service+c.Load, k)),
		f("%.0f", c.perOp(float64(c.WAL), k)),
		dash(c.Statements >= 0, f("%.1f", c.perOp(float64(c.Statements), k))),
		dash(c.Nested >= 0, f("%.1f", c.perOp(float64(c.Nested), k))),
		f("%.2f", c.perOp(float64(c.Commits), k)),
	}
}

// String is the window's figures per operation, for the progress lines.
func (c windowCost) String() string {
	v := c.cells(1)
	return fmt.Sprintf("per operation: CPU µs PostgreSQL %s, service %s, load generator %s (total %s); WAL %s B; statements %s (nested %s); commits %s",
		v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7])
}
