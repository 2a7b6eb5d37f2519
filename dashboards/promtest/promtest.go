package promtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quittance/quittance/sql/pgcluster"
)

// ErrNotInstalled is returned, wrapped in an error that says how to install
// them, when the prometheus and promtool binaries cannot be found.
var ErrNotInstalled = errors.New("prometheus and promtool not found on PATH")

// installHint tells a person how to get the binaries.
const installHint = "install them with `apt-get install -y prometheus` on Debian/Ubuntu (as root, or with sudo), " +
	"or put a directory holding prometheus and promtool on PATH"

// FindBinaries returns the path of the prometheus executable, or an error
// wrapping ErrNotInstalled when prometheus or promtool is missing.
func FindBinaries() (prometheus string, err error) {
	prometheus, err = exec.LookPath("prometheus")
	if err != nil {
		return "", fmt.Errorf("%w; %s", ErrNotInstalled, installHint)
	}
	if _, err := exec.LookPath("promtool"); err != nil {
		return "", fmt.Errorf("%w (promtool is missing); %s", ErrNotInstalled, installHint)
	}
	return prometheus, nil
}

// InstallBinaries installs Debian's prometheus package (prometheus and
// promtool) with pgcluster.AptInstall. Where that cannot be done it
// installs nothing and returns an error wrapping ErrNotInstalled that says
// how to install them. The tests, `make check-rules` and CI all come here.
func InstallBinaries(ctx context.Context, log *slog.Logger) error {
	err := pgcluster.AptInstall(ctx, log, "prometheus")
	if errors.Is(err, pgcluster.ErrAptUnavailable) {
		return fmt.Errorf("%w and %v; %s", ErrNotInstalled, err, installHint)
	}
	return err
}

// Binary returns the prometheus executable, installing the package first
// when it is missing (see InstallBinaries). It fails the test when neither
// works.
func Binary(t testing.TB) string {
	t.Helper()
	bin, err := FindBinaries()
	if errors.Is(err, ErrNotInstalled) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		if err := InstallBinaries(ctx, nil); err != nil {
			t.Fatalf("Prometheus is needed by this test: %v", err)
		}
		bin, err = FindBinaries()
	}
	if err != nil {
		t.Fatalf("Prometheus is needed by this test: %v", err)
	}
	return bin
}

// Config is what the test's Prometheus scrapes and evaluates.
type Config struct {
	// Job is the scrape job's name.
	Job string
	// Targets are host:port addresses serving /metrics.
	Targets []string
	// RuleFiles are rule files loaded as they are (absolute paths).
	RuleFiles []string
	// Interval is the scrape and rule evaluation interval (default 1s).
	Interval time.Duration
}

// Server is a running Prometheus.
type Server struct {
	// URL is the server's base URL, http://127.0.0.1:PORT.
	URL string
	hc  *http.Client
}

// Start runs Prometheus for the rest of the test and waits until it is
// ready. Its log is shown when the test fails.
func Start(t testing.TB, cfg Config) *Server {
	t.Helper()
	bin := Binary(t)
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	dir := t.TempDir()
	configPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(configPath, []byte(configYAML(cfg)), 0o600); err != nil {
		t.Fatal(err)
	}
	// Prometheus cannot listen on port 0 and report the port: take a free
	// one, and try again if another process took it meanwhile.
	var lastErr error
	for range 3 {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		s, err := start(t, bin, configPath, filepath.Join(dir, "data"), port)
		if err == nil {
			return s
		}
		lastErr = err
	}
	t.Fatalf("start Prometheus: %v", lastErr)
	return nil
}

// configYAML is the Prometheus configuration for cfg. JSON is YAML, and
// quoting every string this way keeps paths and names intact.
func configYAML(cfg Config) string {
	quote := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	interval := quote(cfg.Interval.String())
	var b strings.Builder
	fmt.Fprintf(&b, "global:\n  scrape_interval: %s\n  scrape_timeout: %s\n  evaluation_interval: %s\n", interval, interval, interval)
	b.WriteString("rule_files:\n")
	for _, f := range cfg.RuleFiles {
		fmt.Fprintf(&b, "  - %s\n", quote(f))
	}
	fmt.Fprintf(&b, "scrape_configs:\n  - job_name: %s\n    static_configs:\n      - targets:\n", quote(cfg.Job))
	for _, target := range cfg.Targets {
		fmt.Fprintf(&b, "          - %s\n", quote(target))
	}
	return b.String()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start runs one Prometheus process on port and waits for /-/ready.
func start(t testing.TB, bin, configPath, dataDir string, port int) (*Server, error) {
	addr := "127.0.0.1:" + strconv.Itoa(port)
	logPath := filepath.Join(filepath.Dir(configPath), "prometheus-"+strconv.Itoa(port)+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin,
		"--config.file="+configPath,
		"--storage.tsdb.path="+dataDir,
		"--web.listen-address="+addr,
		"--storage.tsdb.retention.time=1d",
		"--log.level=warn",
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("run %s: %w", bin, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(exited)
	}()
	stop := func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	s := &Server{URL: "http://" + addr, hc: &http.Client{Timeout: 10 * time.Second}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-exited:
			b, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("prometheus exited before it was ready:\n%s", b)
		default:
		}
		if resp, err := s.hc.Get(s.URL + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			stop()
			return nil, errors.New("prometheus was not ready within 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil && len(b) > 0 {
				t.Logf("Prometheus log:\n%s", b)
			}
		}
	})
	return s, nil
}

// Sample is one element of an instant vector.
type Sample struct {
	Labels map[string]string
	// Value is the sample's value; NaN and ±Inf as Prometheus reports them.
	Value float64
}

// Query evaluates expr at the current time and returns its instant
// vector; a scalar result is one sample without labels.
func (s *Server) Query(ctx context.Context, expr string) ([]Sample, error) {
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := s.get(ctx, "/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return nil, fmt.Errorf("query %s: %w", expr, err)
	}
	switch data.ResultType {
	case "vector":
		var raw []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		}
		if err := json.Unmarshal(data.Result, &raw); err != nil {
			return nil, err
		}
		out := make([]Sample, len(raw))
		for i, r := range raw {
			v, err := parseValue(r.Value[1])
			if err != nil {
				return nil, err
			}
			out[i] = Sample{Labels: r.Metric, Value: v}
		}
		return out, nil
	case "scalar":
		var raw [2]any
		if err := json.Unmarshal(data.Result, &raw); err != nil {
			return nil, err
		}
		v, err := parseValue(raw[1])
		return []Sample{{Labels: map[string]string{}, Value: v}}, err
	}
	return nil, fmt.Errorf("query %s: unexpected result type %q", expr, data.ResultType)
}

func parseValue(v any) (float64, error) {
	s, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("sample value %v is not a string", v)
	}
	return strconv.ParseFloat(s, 64)
}

// Alert is an active alert: pending or firing.
type Alert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"`
	Value       string            `json:"value"`
}

// Alerts returns the active alerts.
func (s *Server) Alerts(ctx context.Context) ([]Alert, error) {
	var data struct {
		Alerts []Alert `json:"alerts"`
	}
	if err := s.get(ctx, "/api/v1/alerts", nil, &data); err != nil {
		return nil, fmt.Errorf("alerts: %w", err)
	}
	return data.Alerts, nil
}

// Rule is a loaded rule and the health of its last evaluation.
type Rule struct {
	Name      string `json:"name"`
	Type      string `json:"type"`
	Health    string `json:"health"`
	LastError string `json:"lastError"`
}

// Rules returns every loaded rule.
func (s *Server) Rules(ctx context.Context) ([]Rule, error) {
	var data struct {
		Groups []struct {
			Rules []Rule `json:"rules"`
		} `json:"groups"`
	}
	if err := s.get(ctx, "/api/v1/rules", nil, &data); err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	var out []Rule
	for _, g := range data.Groups {
		out = append(out, g.Rules...)
	}
	return out, nil
}

// get calls an HTTP API endpoint and decodes its data member into out.
func (s *Server) get(ctx context.Context, path string, q url.Values, out any) error {
	u := s.URL + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	var env struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
		Error  string          `json:"error"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("status %d: %s", resp.StatusCode, body)
	}
	if env.Status != "success" {
		return fmt.Errorf("status %d: %s", resp.StatusCode, env.Error)
	}
	return json.Unmarshal(env.Data, out)
}
