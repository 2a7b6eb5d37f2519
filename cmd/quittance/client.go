package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/quittance/quittance/cmd/quittance/internal/errkind"
)

// defaultURL is where the client commands find the API unless QUITTANCE_URL
// says otherwise.
const defaultURL = "http://127.0.0.1:8080"

// apiClient talks to the Quittance API for the on-call and finance
// commands. It never prints the token.
type apiClient struct {
	base  string
	token string
	hc    *http.Client
}

func newAPIClient(getenv func(string) string) (*apiClient, error) {
	base := strings.TrimRight(getenv("QUITTANCE_URL"), "/")
	if base == "" {
		base = defaultURL
	}
	if u, err := url.Parse(base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usageError{fmt.Errorf("QUITTANCE_URL %q is not an http(s) URL", base)}
	}
	token := getenv("QUITTANCE_TOKEN")
	if token == "" {
		if path := getenv("QUITTANCE_TOKEN_FILE"); path != "" {
			b, err := readSecretFile(path)
			if err != nil {
				return nil, usageError{fmt.Errorf("read QUITTANCE_TOKEN_FILE: %w", err)}
			}
			token = b
		}
	}
	if token == "" {
		return nil, usageError{errors.New("QUITTANCE_TOKEN is required")}
	}
	return &apiClient{base: base, token: token, hc: &http.Client{Timeout: 5 * time.Minute}}, nil
}

// apiError is a problem (RFC 9457) the API answered with. It prints as
// "<code>: <detail>" and maps to the command's exit status.
type apiError struct {
	Status int    `json:"status"`
	Code   string `json:"code"`
	Detail string `json:"detail"`
}

func (e *apiError) Error() string {
	detail := e.Detail
	if detail == "" {
		detail = http.StatusText(e.Status)
	}
	return e.Code + ": " + detail
}

// exitCode implements statusError, by the one table of error kinds
// (errkind.ExitCode).
func (e *apiError) exitCode() int { return errkind.ExitCode(e.Status) }

// do sends a request and returns the response when it is 2xx; any other
// status is an *apiError. The caller closes the body.
func (c *apiClient) do(ctx context.Context, method, path string, query url.Values, body any, accept string) (*http.Response, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		r = bytes.NewReader(b)
	}
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, r)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if accept == "" {
		accept = "application/json"
	}
	req.Header.Set("Accept", accept+", application/problem+json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, errors.Unwrap(err))
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	e := &apiError{}
	if json.Unmarshal(raw, e) != nil || e.Code == "" {
		e.Code = strings.ReplaceAll(strings.ToLower(http.StatusText(resp.StatusCode)), " ", "_")
	}
	e.Status = resp.StatusCode
	return nil, e
}

// getJSON decodes a JSON response into out.
func (c *apiClient) call(ctx context.Context, method, path string, query url.Values, body, out any) error {
	resp, err := c.do(ctx, method, path, query, body, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decode response: %w", method, path, err)
	}
	return nil
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func readSecretFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}
