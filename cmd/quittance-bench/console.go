package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The console's obligations page on the data-scale data set: what on-call
// opens first. Its server-side time is read from the Server-Timing header
// the console sets on every response (the time to the first byte; a page
// is rendered whole before it is written), and the time the client saw on
// loopback is kept beside it.

// targetConsoleP99 is the obligations page's server-side p99 target.
const targetConsoleP99 = 200 * time.Millisecond

// consoleResult is the latency of one console page.
type consoleResult struct {
	Name, Path string
	Target     bool
	Requests   int
	// Server is the service's own time (Server-Timing); Client what the
	// load generator saw, on loopback.
	ServerP50, ServerP99, ServerMax time.Duration
	ClientP50, ClientP99            time.Duration
	Bytes                           int
}

// consolePages are the pages measured: the needs-action queue as it
// opens, the same filtered to one org's unconfirmed obligations and
// sorted by amount, and every obligation of one tenant older than 30 days.
var consolePages = []struct {
	name, path string
	target     bool
}{
	{"console: obligations page (needs action)", "/console/obligations", true},
	{"console: org + unconfirmed, by amount", "/console/obligations?org=org-7&state=compensation_unconfirmed&sort=amount_desc", true},
	{"console: every obligation, tenant, 30d+", "/console/obligations?view=all&tenant=tenant-3&older=30d", false},
}

var csrfValue = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// signInConsole signs in to the console with token through its sign-in
// form, as a browser does, and returns a client holding the session cookie.
func signInConsole(ctx context.Context, base, token string) (*http.Client, error) {
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, Timeout: 60 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	form, err := consoleGet(ctx, hc, base+"/console/sign-in")
	if err != nil {
		return nil, err
	}
	m := csrfValue.FindSubmatch(form.body)
	if m == nil {
		return nil, errors.New("console sign-in form: no anti-forgery token")
	}
	body := url.Values{"csrf": {string(m[1])}, "token": {token}, "next": {"/console/"}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/console/sign-in", strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("console sign-in: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		return nil, fmt.Errorf("console sign-in: status %d", resp.StatusCode)
	}
	return hc, nil
}

type consoleResponse struct {
	status int
	body   []byte
	server time.Duration
}

func consoleGet(ctx context.Context, hc *http.Client, u string) (consoleResponse, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return consoleResponse{}, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return consoleResponse{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return consoleResponse{}, err
	}
	return consoleResponse{status: resp.StatusCode, body: b, server: serverTiming(resp.Header.Get("Server-Timing"))}, nil
}

// serverTiming reads the app;dur=<ms> metric of a Server-Timing header.
func serverTiming(h string) time.Duration {
	for _, metric := range strings.Split(h, ",") {
		for _, part := range strings.Split(metric, ";") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(part), "dur="); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err == nil {
					return time.Duration(f * float64(time.Millisecond))
				}
			}
		}
	}
	return 0
}

// measureConsole requests each console page requests times after ten to
// warm up, signed in as token (finance: the page as finance and on-call
// read it, without the bulk controls' few extra bytes).
func measureConsole(ctx context.Context, base, token string, requests int, stderr io.Writer) ([]consoleResult, error) {
	hc, err := signInConsole(ctx, base, token)
	if err != nil {
		return nil, err
	}
	var out []consoleResult
	for _, p := range consolePages {
		r := consoleResult{Name: p.name, Path: p.path, Target: p.target, Requests: requests}
		var server, client latencies
		for i := range requests + 10 {
			t := time.Now()
			resp, err := consoleGet(ctx, hc, base+p.path)
			d := time.Since(t)
			if err != nil {
				return nil, fmt.Errorf("GET %s: %w", p.path, err)
			}
			if resp.status != http.StatusOK || !strings.Contains(string(resp.body), "<h1>") {
				return nil, fmt.Errorf("GET %s: status %d", p.path, resp.status)
			}
			if resp.server == 0 {
				return nil, fmt.Errorf("GET %s: no Server-Timing header", p.path)
			}
			if i >= 10 {
				server, client = append(server, resp.server), append(client, d)
				r.Bytes = len(resp.body)
			}
		}
		r.ServerP50, r.ServerP99, r.ServerMax = server.quantile(0.5), server.quantile(0.99), server.quantile(1)
		r.ClientP50, r.ClientP99 = client.quantile(0.5), client.quantile(0.99)
		fmt.Fprintf(stderr, "%-42s server p50 %s p99 %s (client p99 %s)\n", p.name, ms(r.ServerP50), ms(r.ServerP99), ms(r.ClientP99))
		out = append(out, r)
	}
	return out, nil
}
