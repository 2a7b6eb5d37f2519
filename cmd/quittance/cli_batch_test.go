package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quittance/quittance/compensation/compensationtest"
)

// cliBatchResult is one result create-batch and post-batch print.
type cliBatchResult struct {
	Status     int `json:"status"`
	Delegation *struct {
		ID                  string `json:"id"`
		BusinessOperationID string `json:"business_operation_id"`
	} `json:"delegation"`
	Evidence *struct {
		Outcome string `json:"outcome"`
	} `json:"evidence"`
	Problem *struct {
		Code string `json:"code"`
	} `json:"problem"`
}

// writeFile writes content to a new file of the test and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// batchResults runs a batch command and returns its exit code and the
// results it printed.
func (e *cliEnv) batchResults(t *testing.T, token string, args ...string) (int, []cliBatchResult) {
	t.Helper()
	out, errOut, code := e.cli(t, token, args...)
	var results []cliBatchResult
	if err := json.Unmarshal([]byte(out), &results); err != nil {
		t.Fatalf("%v: exit %d, printed %q (%v) %s", args, code, out, err, errOut)
	}
	return code, results
}

// batchCreateBody is a create body of op on budget, as one JSON line.
func batchCreateBody(op, budget string) string {
	return `{"business_operation_id":"` + op + `","org_id":"supplier","task_class":"procurement","budget_id":"` + budget +
		`","hold":{"amount_minor":1000,"currency":"EUR"},"remote":{"task_id":"task-` + op + `"}}`
}

// TestCLIDelegationsCreateBatch: create-batch sends a JSON array or JSON
// Lines file as one batch and prints each item's result in order; exit 0
// when all succeeded, 1 when one failed (its problem printed with the
// rest), 2 for a file that is not JSON objects or cannot be read.
func TestCLIDelegationsCreateBatch(t *testing.T) {
	t.Parallel()
	e := startService(t)
	orch, _ := e.supplierLedger(t, compensationtest.NewEd25519Signer(t, "k-1"))

	array := writeFile(t, "batch.json", "["+batchCreateBody("arr-1", "ops")+",\n"+batchCreateBody("arr-2", "ops")+"]")
	code, results := e.batchResults(t, orch, "delegations", "create-batch", "--file", array)
	if code != 0 || len(results) != 2 || results[0].Status != 201 || results[1].Delegation.BusinessOperationID != "arr-2" {
		t.Fatalf("a JSON array: exit %d %+v", code, results)
	}

	lines := writeFile(t, "batch.jsonl", batchCreateBody("arr-1", "ops")+"\n\n"+batchCreateBody("line-2", "nope")+"\n"+batchCreateBody("line-3", "ops")+"\n")
	code, results = e.batchResults(t, orch, "delegations", "create-batch", "--file", lines)
	if code != exitFailure || len(results) != 3 {
		t.Fatalf("JSON Lines with a failed item: exit %d, %d results", code, len(results))
	}
	if results[0].Status != 200 || results[1].Status != 422 || results[1].Problem == nil || results[1].Problem.Code != "budget_not_found" || results[2].Status != 201 {
		t.Fatalf("JSON Lines: %+v", results)
	}

	// - reads stdin.
	var stdout, stderr bytes.Buffer
	root := newRootCommand(func(k string) string { return map[string]string{"QUITTANCE_URL": e.url, "QUITTANCE_TOKEN": orch}[k] }, &stdout, &stderr)
	root.SetIn(strings.NewReader(batchCreateBody("stdin-1", "ops") + "\n"))
	root.SetArgs([]string{"delegations", "create-batch", "--file", "-"})
	if err := root.ExecuteContext(context.Background()); err != nil || !strings.Contains(stdout.String(), `"status": 201`) {
		t.Fatalf("--file -: %v %s %s", err, stdout.String(), stderr.String())
	}

	for name, content := range map[string]string{"not JSON": "{not json\n", "not objects": "[1, 2]", "empty": "\n"} {
		_, errOut, code := e.cli(t, orch, "delegations", "create-batch", "--file", writeFile(t, "bad", content))
		if code != exitUsage || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
			t.Errorf("%s: exit %d %q, want 2 and one line", name, code, errOut)
		}
	}
	if _, _, code := e.cli(t, orch, "delegations", "create-batch", "--file", filepath.Join(t.TempDir(), "missing")); code != exitUsage {
		t.Errorf("a missing file: exit %d, want 2", code)
	}
	if _, _, code := e.cli(t, orch, "delegations", "create-batch"); code != exitUsage {
		t.Errorf("no --file: exit %d, want 2", code)
	}
}

// TestCLIEvidencePostBatch: post-batch sends a file of tokens, one per
// line, without a bearer token, and prints each token's result in order:
// an ack applied, the same ack a duplicate, a declaration applied; exit 1
// when a token is refused (a forged one: 401 token_refused), 2 for a file
// without tokens.
func TestCLIEvidencePostBatch(t *testing.T) {
	t.Parallel()
	e := startService(t)
	signer := compensationtest.NewEd25519Signer(t, "k-1")
	orch, _ := e.supplierLedger(t, signer)
	acked := e.pendingDelegation(t, orch, "ev-1")
	declared := e.pendingDelegation(t, orch, "ev-2")
	forgedFor := e.pendingDelegation(t, orch, "ev-3")
	ack := e.ackFor(t, orch, acked, "ev-1", signer)
	declaration := signer.Sign(t, "no-compensation-required+jwt", compensationtest.DeclarationClaims("supplier", "ledger-cli", "task-ev-2", time.Now()))

	good := writeFile(t, "tokens.txt", ack+"\n"+ack+"\n\n"+declaration+"\n")
	code, results := e.batchResults(t, "", "evidence", "post-batch", "--file", good)
	if code != 0 || len(results) != 3 {
		t.Fatalf("post-batch: exit %d %+v", code, results)
	}
	for i, want := range []string{"applied", "duplicate", "applied"} {
		if results[i].Status != 200 || results[i].Evidence == nil || results[i].Evidence.Outcome != want {
			t.Fatalf("token %d: %+v, want %s", i, results[i], want)
		}
	}
	var d delegationState
	if s := e.api(t, http.MethodGet, "/v1/delegations/"+declared, orch, nil, &d); s != http.StatusOK || d.ObligationState != "released" {
		t.Fatalf("the declared delegation: %d %s", s, d.ObligationState)
	}

	forged := e.ackFor(t, orch, forgedFor, "ev-3", compensationtest.NewEd25519Signer(t, "k-1"))
	code, results = e.batchResults(t, "", "evidence", "post-batch", "--file", writeFile(t, "forged.txt", forged+"\n"+ack+"\n"))
	if code != exitFailure || len(results) != 2 || results[0].Status != 401 || results[0].Problem == nil ||
		results[0].Problem.Code != "token_refused" || results[1].Evidence == nil || results[1].Evidence.Outcome != "duplicate" {
		t.Fatalf("a forged token: exit %d %+v", code, results)
	}
	if _, errOut, code := e.cli(t, "", "evidence", "post-batch", "--file", writeFile(t, "empty.txt", "\n \n")); code != exitUsage {
		t.Errorf("a file without tokens: exit %d %q, want 2", code, errOut)
	}
}
