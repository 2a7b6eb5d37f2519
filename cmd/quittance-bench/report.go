package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
)

// machine describes where the bench ran: figures mean nothing without it.
type machine struct {
	CPU        string
	CPUs       int
	MemGiB     float64
	Kernel     string
	Product    string // the DMI product name (a VM shows its hypervisor there)
	PostgreSQL string
	Go         string
	Date       time.Time
}

func (m machine) String() string {
	s := fmt.Sprintf("%d × %s, %.0f GiB, Linux %s", m.CPUs, m.CPU, m.MemGiB, m.Kernel)
	if m.Product != "" {
		s += " (" + m.Product + ")"
	}
	return s + fmt.Sprintf(", PostgreSQL %s, %s, %s", m.PostgreSQL, m.Go, m.Date.Format("2006-01-02"))
}

func describeMachine(ctx context.Context, h *harness) machine {
	m := machine{CPUs: runtime.NumCPU(), Go: runtime.Version(), Date: time.Now(), CPU: "?", Kernel: "?", PostgreSQL: "?"}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.Join(strings.Fields(v), " ")
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
				m.MemGiB = kb / (1 << 20)
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/sys/class/dmi/id/product_name"); err == nil {
		m.Product = strings.TrimSpace(string(b))
	}
	if conn, err := pgx.Connect(ctx, h.cluster.URL("postgres")); err == nil {
		_ = conn.QueryRow(ctx, "SHOW server_version").Scan(&m.PostgreSQL)
		conn.Close(context.WithoutCancel(ctx))
	}
	return m
}

// benchReport is the rendered results.
type benchReport struct {
	text, markdown string
	missed         int
}

// renderBench renders the results as a text table for the terminal and
// as Markdown for the bench's document.
func renderBench(cfg benchConfig, m machine, pgb []pgbenchResult, lifes []lifecycleResult, sc *scaleResult, took time.Duration) benchReport {
	r := &benchRenderer{cfg: cfg, pgb: pgb, lifes: lifes}
	fmt.Fprintf(&r.text, "\nMachine: %s\n", m)
	fmt.Fprintf(&r.md, "**Machine:** %s.\n\n", m)
	if len(lifes) > 0 {
		r.lifecycles()
		r.replicas()
		r.batches()
		r.costs()
	}
	if sc != nil {
		renderScale(&r.text, &r.md, sc, r.verdict)
	}
	fmt.Fprintf(&r.text, "\n%d targets missed; took %s\n", r.missed, took.Round(time.Second))
	return benchReport{text: r.text.String(), markdown: r.md.String(), missed: r.missed}
}

// benchRenderer writes the bench's results as text and Markdown side by
// side, counting the targets missed.
type benchRenderer struct {
	cfg      benchConfig
	pgb      []pgbenchResult
	lifes    []lifecycleResult
	text, md strings.Builder
	missed   int
}

// verdict is "met", or "MISSED" counted as a missed target.
func (r *benchRenderer) verdict(ok bool) string {
	if ok {
		return "met"
	}
	r.missed++
	return "MISSED"
}

// anchor is the pgbench run with n clients at scale, or a zero result.
func (r *benchRenderer) anchor(n, scale int) pgbenchResult {
	for _, p := range r.pgb {
		if p.Clients == n && p.Scale == scale {
			return p
		}
	}
	return pgbenchResult{}
}

// one is the single-replica lifecycle run with n clients in mode, or a
// zero result.
func (r *benchRenderer) one(n int, mode string) lifecycleResult {
	for _, l := range r.lifes {
		if l.Clients == n && l.Mode == mode && l.Replicas == 1 {
			return l
		}
	}
	return lifecycleResult{}
}

// latencyCell is a mean / p50 / p99 table cell.
func latencyCell(avg, p50, p99 time.Duration) string {
	return fmt.Sprintf("%s / %s / %s", strings.TrimSuffix(ms(avg), " ms"), strings.TrimSuffix(ms(p50), " ms"), ms(p99))
}

// lifecycles renders the single-replica lifecycle runs beside their
// pgbench anchors.
func (r *benchRenderer) lifecycles() {
	cfg, lat := r.cfg, latencyCell
	logging := "every transaction logged on both sides (pgbench -l; the same line per Quittance operation)"
	if !cfg.TxnLog {
		logging = "no per-transaction log on either side (means only)"
	}
	fmt.Fprintf(&r.text, "\nLifecycle throughput: create → task-status canceled → signed ack, each call one operation;\n"+
		"%s per run after %s of warm-up, fsync on; %s.\n"+
		"Anchors: pgbench -b tpcb-like, scale %d for many budgets (no two of its clients share a branch row), scale %d for the one hot budget.\n\n",
		cfg.Duration, cfg.Warmup, logging, cfg.ManyScale, cfg.HotScale)
	fmt.Fprintf(&r.md, "Lifecycle throughput (create → task-status canceled → signed ack; each call is one operation), %s per run "+
		"after %s of warm-up, fsync on, %s. Anchor: `pgbench -b tpcb-like` at scale %d for many budgets (%d budgets) "+
		"and at scale %d for one hot budget. Latencies are mean / p50 / p99.\n\n",
		cfg.Duration, cfg.Warmup, logging, cfg.ManyScale, cfg.ManyBudgets, cfg.HotScale)
	tw := tabwriter.NewWriter(&r.text, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "clients\tcase\tanchor\tanchor tps\tanchor mean/p50/p99\tquittance ops/s\tquittance mean/p50/p99\tratio\ttarget\tpeak RSS\terrors\tload (pgbench/quittance)\t")
	r.md.WriteString("| clients | case | anchor | anchor TPS | anchor latency | Quittance ops/s | Quittance latency | ratio | target | peak RSS | errors |\n")
	r.md.WriteString("|---:|---|---|---:|---:|---:|---:|---:|---|---:|---:|\n")
	for _, n := range cfg.Clients {
		for _, mode := range []string{"many", "hot"} {
			l := r.one(n, mode)
			scale, name := cfg.ManyScale, fmt.Sprintf("%d budgets", cfg.ManyBudgets)
			if mode == "hot" {
				scale, name = cfg.HotScale, "one hot budget"
			}
			pg := r.anchor(n, scale)
			if l.Clients == 0 || pg.Clients == 0 {
				continue
			}
			ratio := l.OpsPerS / pg.TPS
			want := ratioTarget(mode, n)
			v := r.verdict(ratio >= want)
			if n < 32 && r.cfg.TxnLog {
				v += fmt.Sprintf("; p99 ≤ %s %s", ms(targetP99Below32), r.verdict(l.P99 <= targetP99Below32))
			}
			rss := mib(l.PeakRSS) + " (" + r.verdict(l.PeakRSS < targetRSS) + ")"
			fmt.Fprintf(tw, "%d\t%s\tpgbench scale %d\t%.0f\t%s\t%.0f\t%s\t%.2f×\t≥%.1f× %s\t%s\t%d\t%s / %s\t\n",
				n, name, scale, pg.TPS, lat(pg.Avg, pg.P50, pg.P99), l.OpsPerS, lat(l.Avg, l.P50, l.P99),
				ratio, want, v, rss, l.Errors, pg.Load, l.Load)
			fmt.Fprintf(&r.md, "| %d | %s | scale %d | %.0f | %s | %.0f | %s | %.2f× | ≥ %.1f× %s | %s | %d |\n",
				n, name, scale, pg.TPS, lat(pg.Avg, pg.P50, pg.P99), l.OpsPerS, lat(l.Avg, l.P50, l.P99), ratio, want, v, rss, l.Errors)
		}
	}
	tw.Flush()
}

// batches renders the batch-endpoint runs (many budgets, one replica)
// beside the per-call runs with as many clients and their anchor.
func (r *benchRenderer) batches() {
	var runs []lifecycleResult
	for _, l := range r.lifes {
		if l.Mode == "batch" {
			runs = append(runs, l)
		}
	}
	if len(runs) == 0 {
		return
	}
	cfg := r.cfg
	fmt.Fprintf(&r.text, "\nBatch endpoints: the same lifecycle on %d budgets, the creates in POST /v1/delegations/batch and the acks in\n"+
		"POST /v1/compensation/evidence/batch, %d items a request (each task status a call of its own); each item one operation.\n"+
		"Latencies are per request.\n\n", cfg.ManyBudgets, cfg.BatchSize)
	fmt.Fprintf(&r.md, "\nBatch endpoints: the same lifecycle on %d budgets, the creates in `POST /v1/delegations/batch` and the acks in "+
		"`POST /v1/compensation/evidence/batch`, %d items a request (each task status a call of its own), one replica, beside "+
		"the per-call run; each item is one operation, latencies are per request:\n\n", cfg.ManyBudgets, cfg.BatchSize)
	tw := tabwriter.NewWriter(&r.text, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "clients\tper-call ops/s\tbatch ops/s\tbatch/per-call\tbatch/pgbench\tmean/p50/p99 per request\terrors\t")
	r.md.WriteString("| clients | per-call ops/s | batch ops/s | batch / per-call | batch / pgbench | latency per request | errors |\n")
	r.md.WriteString("|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, l := range runs {
		base, pg := r.one(l.Clients, "many"), r.anchor(l.Clients, cfg.ManyScale)
		fmt.Fprintf(tw, "%d\t%.0f\t%.0f\t%.2f×\t%.2f×\t%s\t%d\t\n", l.Clients, base.OpsPerS, l.OpsPerS, l.OpsPerS/base.OpsPerS,
			l.OpsPerS/pg.TPS, latencyCell(l.Avg, l.P50, l.P99), l.Errors)
		fmt.Fprintf(&r.md, "| %d | %.0f | %.0f | %.2f× | %.2f× | %s | %d |\n", l.Clients, base.OpsPerS, l.OpsPerS, l.OpsPerS/base.OpsPerS,
			l.OpsPerS/pg.TPS, latencyCell(l.Avg, l.P50, l.P99), l.Errors)
	}
	tw.Flush()
}

// replicas renders the multi-replica lifecycle runs beside the
// single-replica ones, if there are any.
func (r *benchRenderer) replicas() {
	cfg, lat := r.cfg, latencyCell
	var multi []lifecycleResult
	for _, l := range r.lifes {
		if l.Replicas > 1 {
			multi = append(multi, l)
		}
	}
	if len(multi) == 0 {
		return
	}
	fmt.Fprintf(&r.text, "\nReplicas: %d service processes on one PostgreSQL, each client sending its successive requests to successive replicas\n\n", cfg.Replicas)
	fmt.Fprintf(&r.md, "\n%d service processes on the one PostgreSQL, each client sending its successive requests to successive "+
		"replicas, beside one process (many budgets):\n\n", cfg.Replicas)
	tw := tabwriter.NewWriter(&r.text, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "clients\tcase\t1 replica ops/s\treplicas\ttotal ops/s\tratio\ttarget\tmean/p50/p99\tpeak RSS (largest)\terrors\t")
	r.md.WriteString("| clients | 1 replica ops/s | replicas | total ops/s | ratio | target | latency | peak RSS (largest) | errors |\n")
	r.md.WriteString("|---:|---:|---:|---:|---:|---|---:|---:|---:|\n")
	for _, l := range multi {
		base := r.one(l.Clients, l.Mode)
		ratio := l.OpsPerS / base.OpsPerS
		v := r.verdict(ratio >= targetReplicas)
		rss := mib(l.PeakRSS) + " (" + r.verdict(l.PeakRSS < targetRSS) + ")"
		name := fmt.Sprintf("%d budgets", cfg.ManyBudgets)
		if l.Mode == "hot" {
			name = "one hot budget"
		}
		fmt.Fprintf(tw, "%d\t%s\t%.0f\t%d\t%.0f\t%.2f×\t≥%.1f× %s\t%s\t%s\t%d\t\n",
			l.Clients, name, base.OpsPerS, l.Replicas, l.OpsPerS, ratio, targetReplicas, v, lat(l.Avg, l.P50, l.P99), rss, l.Errors)
		fmt.Fprintf(&r.md, "| %d | %.0f | %d | %.0f | %.2f× | ≥ %.1f× %s | %s | %s | %d |\n",
			l.Clients, base.OpsPerS, l.Replicas, l.OpsPerS, ratio, targetReplicas, v, lat(l.Avg, l.P50, l.P99), rss, l.Errors)
	}
	tw.Flush()
}

func renderScale(text, md *strings.Builder, sc *scaleResult, verdict func(bool) string) {
	generated := "generated with set-based SQL in " + sc.LoadTime.Round(time.Second).String()
	if sc.Reused {
		generated = "generated with set-based SQL by an earlier run (-reuse)"
	}
	set := fmt.Sprintf("%d delegations, %d of them open obligations (%d events, %.1f GiB), %s",
		sc.Delegations, sc.Open, sc.Events, float64(sc.DatabaseBytes)/(1<<30), generated)
	requests := 0
	if len(sc.Recon) > 0 {
		requests = sc.Recon[0].Requests
	}
	cp := sc.Checkpoints
	covered := fmt.Sprintf("The service first covered it with %d incremental checkpoints in %s (the largest payload %.1f MiB)",
		cp.Count, cp.Took.Round(time.Second), float64(cp.LargestBytes)/(1<<20))
	fmt.Fprintf(text, "\nData scale: %s\n%s.\nReconciliation on one process, %d sequential requests per query:\n\n", set, covered, requests)
	fmt.Fprintf(md, "\nData scale: %s. %s. Reconciliation on one service process, %d sequential requests per query:\n\n", set, covered, requests)
	tw := tabwriter.NewWriter(text, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "query\tp50\tp99\tmax\tbytes\ttarget\t")
	md.WriteString("| query | p50 | p99 | max | target |\n|---|---:|---:|---:|---|\n")
	for _, r := range sc.Recon {
		target := "—"
		if r.Target {
			target = fmt.Sprintf("p99 < %d ms %s", targetScaleP99.Milliseconds(), verdict(r.P99 < targetScaleP99))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t\n", r.Name, ms(r.P50), ms(r.P99), ms(r.Max), r.Bytes, target)
		fmt.Fprintf(md, "| `GET %s` | %s | %s | %s | %s |\n", r.Path, ms(r.P50), ms(r.P99), ms(r.Max), target)
	}
	for _, r := range sc.Console {
		target := "—"
		if r.Target {
			target = fmt.Sprintf("server p99 < %d ms %s", targetConsoleP99.Milliseconds(), verdict(r.ServerP99 < targetConsoleP99))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s (client p99 %s)\t\n", r.Name, ms(r.ServerP50), ms(r.ServerP99), ms(r.ServerMax), r.Bytes, target, ms(r.ClientP99))
		fmt.Fprintf(md, "| console `GET %s` (server-side) | %s | %s | %s | %s; client p99 %s |\n", r.Path, ms(r.ServerP50), ms(r.ServerP99), ms(r.ServerMax), target, ms(r.ClientP99))
	}
	for i, e := range sc.Export {
		fmt.Fprintf(tw, "CSV export #%d (streamed)\tfirst byte %s\tall %s\t\t%d\t%d rows\t\n", i+1, ms(e.FirstByte), ms(e.Total), e.Bytes, e.Rows)
		fmt.Fprintf(md, "| `GET /v1/obligations?format=csv` #%d: %d rows, %.1f MiB | first byte %s | all %s | | streamed |\n",
			i+1, e.Rows, float64(e.Bytes)/(1<<20), ms(e.FirstByte), ms(e.Total))
	}
	rssVerdict := verdict(sc.ReconRSS < targetRSS)
	fmt.Fprintf(tw, "service peak RSS (all of the above)\t%s\t\t\t\t< 150 MiB %s\t\n", mib(sc.ReconRSS), rssVerdict)
	fmt.Fprintf(md, "| service peak RSS over all of the above | %s | | | < 150 MiB %s |\n", mib(sc.ReconRSS), rssVerdict)
	tw.Flush()
	if s := sc.Sweep; s != nil {
		took := verdict(s.Took < targetSweep)
		once := verdict(s.Moved == s.Due && s.Events == s.Due && s.Twice == 0)
		rss := verdict(s.PeakRSS < targetRSS)
		fmt.Fprintf(text, "\nDeadline sweep: %d obligations due at once, %d replicas sweeping\n"+
			"  took %s (< %s %s); moved %d, %d deadline events, %d moved twice (each once: %s)\n"+
			"  moved per replica (their logs): %v; peak RSS (largest) %s (< 150 MiB %s)\n",
			s.Due, s.Replicas, s.Took.Round(time.Millisecond), targetSweep, took, s.Moved, s.Events, s.Twice, once,
			s.PerReplica, mib(s.PeakRSS), rss)
		fmt.Fprintf(md, "\nDeadline sweep: %d obligations made due at once, %d replicas sweeping: all moved in %s "+
			"(< %s %s); %d moved, %d `compensation_deadline_passed` events, %d moved twice (each once: %s); "+
			"moved per replica %v; largest peak RSS %s (< 150 MiB %s).\n",
			s.Due, s.Replicas, s.Took.Round(time.Millisecond), targetSweep, took, s.Moved, s.Events, s.Twice, once,
			s.PerReplica, mib(s.PeakRSS), rss)
	}
}

// costRow is one measured run in the cost tables: a pgbench anchor, or a
// lifecycle run beside its anchor.
type costRow struct {
	clients      int
	name, side   string
	isAnchor     bool
	cost, anchor windowCost
}

// costRows are the runs in the order of the throughput tables: each
// anchor, then the lifecycle runs it anchors.
func (r *benchRenderer) costRows() []costRow {
	var rows []costRow
	for _, n := range r.cfg.Clients {
		for _, mode := range []string{"many", "hot"} {
			scale, name := r.cfg.ManyScale, fmt.Sprintf("%d budgets", r.cfg.ManyBudgets)
			if mode == "hot" {
				scale, name = r.cfg.HotScale, "one hot budget"
			}
			pg := r.anchor(n, scale)
			if !pg.Cost.measured() {
				continue
			}
			rows = append(rows, costRow{clients: n, name: name, side: fmt.Sprintf("pgbench scale %d", scale), isAnchor: true, cost: pg.Cost, anchor: pg.Cost})
			for _, l := range r.lifes {
				if l.Clients != n || !l.Cost.measured() {
					continue
				}
				switch {
				case l.Mode == mode:
					rows = append(rows, costRow{clients: n, name: name, side: fmt.Sprintf("quittance ×%d", l.Replicas), cost: l.Cost, anchor: pg.Cost})
				case l.Mode == "batch" && mode == "many":
					rows = append(rows, costRow{clients: n, name: name, side: fmt.Sprintf("quittance batch of %d", r.cfg.BatchSize), cost: l.Cost, anchor: pg.Cost})
				}
			}
		}
	}
	return rows
}

// costs renders what an operation costs beside what a pgbench
// transaction costs, and a lifecycle beside three pgbench transactions.
func (r *benchRenderer) costs() {
	rows := r.costRows()
	if len(rows) == 0 {
		return
	}
	const cols = "PG CPU µs\tservice CPU µs\tload gen CPU µs\ttotal CPU µs\tWAL bytes\tstatements\tnested statements\tcommits"
	r.text.WriteString("\nCost per operation (a Quittance API call; a pgbench transaction), over each run's measured window.\n" +
		"CPU: the whole cluster, the service processes, the load generator (pgbench itself for the anchor); WAL: the cluster's;\n" +
		"statements: pg_stat_statements, top-level and nested (triggers, functions, foreign-key checks); commits: xact_commit.\n\n")
	r.md.WriteString("\nCost per operation (a Quittance API call; a pgbench transaction) over each run's measured window: CPU time of " +
		"PostgreSQL (every process of the cluster), the service processes and the load generator (pgbench itself for the anchor), " +
		"WAL written, statements from `pg_stat_statements` (top-level, `BEGIN` and `COMMIT` included; nested: those of triggers, " +
		"functions and foreign-key checks) and commits (`xact_commit`):\n\n")
	tw := tabwriter.NewWriter(&r.text, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "clients\tcase\tside\tops\t%s\t\n", cols)
	r.md.WriteString("| clients | case | side | ops | " + strings.ReplaceAll(cols, "\t", " | ") + " |\n|---:|---|---|" + strings.Repeat("---:|", 9) + "\n")
	for _, row := range rows {
		v := row.cost.cells(1)
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t\n", row.clients, row.name, row.side, row.cost.Ops, strings.Join(v, "\t"))
		fmt.Fprintf(&r.md, "| %d | %s | %s | %d | %s |\n", row.clients, row.name, row.side, row.cost.Ops, strings.Join(v, " | "))
	}
	tw.Flush()

	r.text.WriteString("\nCost per lifecycle (3 Quittance calls) beside 3 pgbench transactions, pgbench / Quittance:\n\n")
	r.md.WriteString("\nCost per lifecycle (three Quittance calls) beside three pgbench transactions, pgbench / Quittance:\n\n")
	tw = tabwriter.NewWriter(&r.text, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "clients\tcase\tside\t%s\t\n", cols)
	r.md.WriteString("| clients | case | side | " + strings.ReplaceAll(cols, "\t", " | ") + " |\n|---:|---|---|" + strings.Repeat("---:|", 8) + "\n")
	for _, row := range rows {
		if row.isAnchor {
			continue
		}
		a, q := row.anchor.cells(3), row.cost.cells(3)
		for i := range q {
			q[i] = a[i] + " / " + q[i]
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t\n", row.clients, row.name, row.side, strings.Join(q, "\t"))
		fmt.Fprintf(&r.md, "| %d | %s | %s | %s |\n", row.clients, row.name, row.side, strings.Join(q, " | "))
	}
	tw.Flush()
}
