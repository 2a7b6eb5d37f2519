package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

// newCreateBatchCommand is delegations create-batch: many creates in one
// POST /v1/delegations/batch, each answered on its own.
func newCreateBatchCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "create-batch --file FILE",
		Short: "Create many delegations in one request (POST /v1/delegations/batch), each answered on its own",
		Long: "create-batch reads the bodies of POST /v1/delegations from FILE (a JSON array of them, or one per line; " +
			"- reads stdin), sends them as one batch and prints the answer's results, one per item in order, each with " +
			"the status the single create would have answered and its delegation or problem. Exit 1 when any item failed.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			raw, err := readBatchFile(cmd, file)
			if err != nil {
				return err
			}
			items, err := createBodies(raw)
			if err != nil {
				return usageError{fmt.Errorf("--file %s: %w", file, err)}
			}
			c, err := newAPIClient(getenv)
			if err != nil {
				return err
			}
			return postBatch(cmd, c, stdout, "/v1/delegations/batch", map[string]any{"delegations": items})
		},
	}
	cmd.Flags().StringVar(&file, "file", "", "the create bodies: a JSON array or JSON Lines; - for stdin (required)")
	return cmd
}

// newEvidenceCommand is the evidence commands of a remote org: signed
// tokens, with no bearer token.
func newEvidenceCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{Use: "evidence", Short: "Post a remote org's signed compensation evidence"}
	var file string
	post := &cobra.Command{
		Use:   "post-batch --file FILE",
		Short: "Post many signed acks and declarations in one request (POST /v1/compensation/evidence/batch)",
		Long: "post-batch reads compact JWS tokens from FILE, one per line (- reads stdin), posts them as one batch " +
			"and prints the answer's results, one per token in order, each with the status the single evidence " +
			"endpoint would have answered and its outcome or problem. No bearer token: each token's signature is its " +
			"credential. Exit 1 when any token was refused.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			raw, err := readBatchFile(cmd, file)
			if err != nil {
				return err
			}
			tokens := tokenLines(raw)
			if len(tokens) == 0 {
				return usageError{fmt.Errorf("--file %s: no tokens", file)}
			}
			c, err := newAnonymousClient(getenv)
			if err != nil {
				return err
			}
			return postBatch(cmd, c, stdout, "/v1/compensation/evidence/batch", map[string]any{"tokens": tokens})
		},
	}
	post.Flags().StringVar(&file, "file", "", "the tokens, one compact JWS per line; - for stdin (required)")
	cmd.AddCommand(post)
	return cmd
}

// readBatchFile reads the --file of a batch command: the named file, or
// stdin for -. A missing flag or an unreadable file is a usage error.
func readBatchFile(cmd *cobra.Command, file string) ([]byte, error) {
	if err := requireFlag("file", file); err != nil {
		return nil, err
	}
	var (
		raw []byte
		err error
	)
	if file == "-" {
		raw, err = io.ReadAll(cmd.InOrStdin())
	} else {
		raw, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, usageError{fmt.Errorf("--file %s: %w", file, err)}
	}
	return raw, nil
}

// createBodies is the create bodies of a batch file: a JSON array of
// objects, or JSON Lines (one object per non-blank line). The API checks
// each body; here only that each is a JSON object.
func createBodies(raw []byte) ([]json.RawMessage, error) {
	trimmed := bytes.TrimSpace(raw)
	var items []json.RawMessage
	if bytes.HasPrefix(trimmed, []byte("[")) {
		if err := json.Unmarshal(trimmed, &items); err != nil {
			return nil, fmt.Errorf("not a JSON array: %w", err)
		}
	} else {
		sc := bufio.NewScanner(bytes.NewReader(trimmed))
		sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
		for line := 1; sc.Scan(); line++ {
			text := bytes.TrimSpace(sc.Bytes())
			if len(text) == 0 {
				continue
			}
			if !json.Valid(text) {
				return nil, fmt.Errorf("line %d is not JSON", line)
			}
			items = append(items, json.RawMessage(bytes.Clone(text)))
		}
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	for i, item := range items {
		if !bytes.HasPrefix(bytes.TrimSpace(item), []byte("{")) {
			return nil, fmt.Errorf("item %d is not a JSON object", i+1)
		}
	}
	if len(items) == 0 {
		return nil, errors.New("no delegations")
	}
	return items, nil
}

// tokenLines is the non-blank lines of raw, trimmed: one token each.
func tokenLines(raw []byte) []string {
	var tokens []string
	for _, line := range strings.Split(string(raw), "\n") {
		if t := strings.TrimSpace(line); t != "" {
			tokens = append(tokens, t)
		}
	}
	return tokens
}

// newAnonymousClient is a client of QUITTANCE_URL without a bearer token,
// for the endpoints whose credential is in the body (signed evidence).
func newAnonymousClient(getenv func(string) string) (*apiClient, error) {
	c, err := newAPIClient(func(k string) string {
		if k == "QUITTANCE_TOKEN" {
			return "unused" // newAPIClient requires one; it is cleared below
		}
		return getenv(k)
	})
	if err != nil {
		return nil, err
	}
	c.token = ""
	return c, nil
}

// batchFailed is a batch whose answer holds failed items: their results
// are printed, and the command exits 1.
type batchFailed struct{ failed, total int }

func (e batchFailed) Error() string {
	return fmt.Sprintf("%d of %d items failed (their status and problem are in the results)", e.failed, e.total)
}

// postBatch posts a batch, prints the answer's results and fails when any
// item's status is not 2xx.
func postBatch(cmd *cobra.Command, c *apiClient, stdout io.Writer, path string, body any) error {
	var out struct {
		Results []json.RawMessage `json:"results"`
	}
	if err := c.call(cmd.Context(), http.MethodPost, path, nil, body, &out); err != nil {
		return err
	}
	if err := printJSON(stdout, out.Results); err != nil {
		return err
	}
	failed := 0
	for _, r := range out.Results {
		var item struct {
			Status int `json:"status"`
		}
		if json.Unmarshal(r, &item) != nil || item.Status < 200 || item.Status > 299 {
			failed++
		}
	}
	if failed > 0 {
		return batchFailed{failed: failed, total: len(out.Results)}
	}
	return nil
}
