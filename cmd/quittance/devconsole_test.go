package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestDevConsoleWalkthrough runs the console walk-through of
// cmd/quittance/internal/console/CONSOLE.md on what `quittance dev` (make
// run) prints and seeds, over real HTTP without a browser: the printed
// console link and second on-call token; the two demo obligations at
// silent-supplier becoming compensation_unconfirmed (the demo task class's
// compensation timeout and the sweep interval shortened to a second); the
// first on-call person finds the 2,500.00 EUR one by filter, opens it and
// requests its write-off; the second approves it; the overview shows
// 2,500.00 EUR written off.
func TestDevConsoleWalkthrough(t *testing.T) {
	t.Parallel()
	dev := startDev(t, map[string]string{"QUITTANCE_SWEEP_INTERVAL": "1s", "QUITTANCE_DEMO_COMPENSATION_TIMEOUT": "1s"})
	const demoLine = `  Demo: two canceled procurement tasks at org "silent-supplier", whose compensation nobody confirms,`
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(dev.stdout.String(), demoLine); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("dev did not print the demo line within 30s:\n%s", dev.stdout.String())
		}
	}
	out := dev.stdout.String()
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dev.dataDir, name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	first, second := read(devTokenFile), read(devSecondOncallFile)
	if first == second {
		t.Fatal("the two dev on-call tokens are the same")
	}
	for _, line := range []string{
		"Console: " + dev.baseURL + "/console/",
		"  Sign in with the on-call token above. A second on-call person, to approve write-offs above 1000.00,",
		"  signs in with (also in " + filepath.Join(dev.dataDir, devSecondOncallFile) + "):",
		"  " + second,
	} {
		if !strings.Contains("\n"+out, "\n"+line+"\n") {
			t.Fatalf("dev's output lacks the line %q:\n%s", line, out)
		}
	}

	a := newConsoleClient(t, dev.baseURL)
	a.signIn(first)
	// Find: both demo obligations become compensation_unconfirmed.
	queue := "/console/obligations?state=compensation_unconfirmed&org=silent-supplier"
	var ids []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		_, body := a.get(queue)
		ids = consoleRowIDs.FindAllString(body, -1)
		if len(ids) == 2 && strings.Contains(body, "2,500.00 EUR") && strings.Contains(body, "400.00 EUR") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demo obligations are not compensation_unconfirmed within 30s:\n%s", body)
		}
	}
	_, body := a.get(queue + "&min=1000&currency=EUR")
	big := consoleRowIDs.FindAllString(body, -1)
	if len(big) != 1 {
		t.Fatalf("filtering by amount finds %v:\n%s", big, body)
	}
	id := strings.TrimPrefix(big[0], `<td><a href="/console/delegations/`)
	id = strings.TrimSuffix(id, `"`)
	// Understand: the delegation's page.
	self := "/console/delegations/" + id
	_, body = a.get(self)
	for _, want := range []string{"silent-supplier", "2,500.00 EUR", "compensation_unconfirmed", "chain verified", "Request write-off"} {
		if !strings.Contains(body, want) {
			t.Fatalf("the delegation's page lacks %q:\n%s", want, body)
		}
	}
	// Resolve: above the threshold, it waits for the second person.
	status, loc := a.post(self, self+"/write-offs", url.Values{"reason": {"silent-supplier never confirmed the reversal"}})
	if status != http.StatusSeeOther || !strings.Contains(loc, "done=write_off") {
		t.Fatalf("write-off request: %d %s", status, loc)
	}
	if _, body := a.get("/console/"); !strings.Contains(body, "asked by bootstrap") {
		t.Fatalf("the overview does not show the pending write-off:\n%s", body)
	}

	b := newConsoleClient(t, dev.baseURL)
	b.signIn(second)
	_, body = b.get("/console/write-offs")
	approve := regexp.MustCompile(`action="(/console/write-offs/[0-9a-f-]{36}/approve)"`).FindStringSubmatch(body)
	if approve == nil || !strings.Contains(body, "silent-supplier never confirmed the reversal") {
		t.Fatalf("the second on-call person is offered no approval:\n%s", body)
	}
	if status, loc := b.post("/console/write-offs", approve[1], nil); status != http.StatusSeeOther {
		t.Fatalf("approve: %d %s", status, loc)
	}
	_, body = b.get("/console/")
	row := regexp.MustCompile(`(?s)<tr data-budget="console-demo">.*?</tr>`).FindString(body)
	if !strings.Contains(row, `<td class="num written-off">2,500.00 EUR</td>`) {
		t.Fatalf("the overview's console-demo budget after the approval: %q", row)
	}
	_, body = b.get(self)
	if !strings.Contains(body, "written_off") {
		t.Fatalf("the delegation is not written off:\n%s", body)
	}
}

var consoleRowIDs = regexp.MustCompile(`<td><a href="/console/delegations/[0-9a-f-]{36}"`)

// consoleClient is a browser-less console session: a cookie jar and the
// console's forms, posted as a browser posts them.
type consoleClient struct {
	t      *testing.T
	base   string
	client *http.Client
}

func newConsoleClient(t *testing.T, base string) *consoleClient {
	jar, _ := cookiejar.New(nil)
	return &consoleClient{t: t, base: base, client: &http.Client{
		Jar: jar, Timeout: 20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

func (c *consoleClient) do(method, path string, form url.Values) (status int, body, location string) {
	c.t.Helper()
	var r io.Reader
	if form != nil {
		r = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, c.base+path, r)
	if err != nil {
		c.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := c.client.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw), resp.Header.Get("Location")
}

func (c *consoleClient) get(path string) (int, string) {
	c.t.Helper()
	status, body, _ := c.do(http.MethodGet, path, nil)
	if status != http.StatusOK {
		c.t.Fatalf("GET %s: %d\n%s", path, status, body)
	}
	return status, body
}

var consoleCSRF = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// post posts form to path with the CSRF token of the page at from.
func (c *consoleClient) post(from, path string, form url.Values) (int, string) {
	c.t.Helper()
	var body string
	if from == "/console/sign-in" {
		_, body, _ = c.do(http.MethodGet, from, nil)
	} else {
		_, body = c.get(from)
	}
	m := consoleCSRF.FindStringSubmatch(body)
	if m == nil {
		c.t.Fatalf("no CSRF token on %s:\n%s", from, body)
	}
	if form == nil {
		form = url.Values{}
	}
	form.Set("csrf", m[1])
	status, _, loc := c.do(http.MethodPost, path, form)
	return status, loc
}

// signIn signs in with an API token through the sign-in form.
func (c *consoleClient) signIn(token string) {
	c.t.Helper()
	if status, loc := c.post("/console/sign-in", "/console/sign-in", url.Values{"token": {token}, "next": {"/console/"}}); status != http.StatusSeeOther || loc != "/console/" {
		c.t.Fatalf("sign in: %d %s", status, loc)
	}
}

// TestDevDemoPushURL: `quittance dev` with the demo agent on, listening on
// port 0 as tests run it, registers push notifications at the port it
// listens on (not the configured ":0"): the demo supplier's agent pushes
// the status of a task Quittance dispatched to it, and the service answers
// those pushes, as its own request metrics show.
func TestDevDemoPushURL(t *testing.T) {
	dev := startDev(t, map[string]string{"QUITTANCE_DEMO_AGENT": "on"})
	const registered = `registered as org "demo-supplier"`
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(dev.stdout.String(), registered); time.Sleep(20 * time.Millisecond) {
		if strings.Contains(dev.stdout.String(), "Demo supplier agent not started") || time.Now().After(deadline) {
			t.Fatalf("the demo agent is not registered (is %s taken?):\n%s", devDemoAddr, dev.stdout.String())
		}
	}
	raw, err := os.ReadFile(filepath.Join(dev.dataDir, devTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	oncall := strings.TrimSpace(string(raw))
	c := newTestClient(dev.baseURL)
	ctx := t.Context()
	if r := c.do(ctx, http.MethodPut, "/admin/v1/budgets/push-demo", oncall, map[string]any{"currency": "EUR", "funded_minor": 1_000_000, "tenants": []string{"buyers"}}); !r.ok() {
		t.Fatalf("budget: %s", r)
	}
	r := c.do(ctx, http.MethodPost, "/admin/v1/tokens", oncall, map[string]any{"role": "orchestrator", "tenant": "buyers", "name": "push-test"})
	var tok struct {
		Token string `json:"token"`
	}
	if !r.ok() || json.Unmarshal(r.body, &tok) != nil {
		t.Fatalf("orchestrator token: %s", r)
	}
	r = c.do(ctx, http.MethodPost, "/v1/delegations", tok.Token, map[string]any{
		"business_operation_id": "po-push", "org_id": "demo-supplier", "task_class": "procurement", "budget_id": "push-demo",
		"hold":     map[string]any{"amount_minor": 10_000, "currency": "EUR"},
		"dispatch": map[string]any{"message": map[string]any{"parts": []any{map[string]any{"text": "Order 1 laptop"}}}},
	})
	if !r.ok() {
		t.Fatalf("dispatch: %s", r)
	}
	answered := regexp.MustCompile(`(?m)^quittance_http_request_duration_seconds_count\{code="2\d\d",method="POST",route="[^"]*/a2a/push/[^"]*"\} [1-9]`)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		m := c.do(ctx, http.MethodGet, "/metrics", "", nil)
		if !m.ok() {
			t.Fatalf("metrics: %s", m)
		}
		if answered.Match(m.body) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no push answered within 30s at %s; push lines of /metrics:\n%s", dev.baseURL, grepLines(string(m.body), "a2a/push"))
		}
	}
}

// grepLines is the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for line := range strings.Lines(s) {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "")
}
