package main

// The layering of ledger/DESIGN.md §5, checked on the compiled import graph
// (go list), so a wrong import anywhere below a package fails CI.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
)

// modulePath is the import path of the repository's module.
const modulePath = "github.com/quittance/quittance"

// layerRule forbids the packages it covers to depend, directly or through
// other packages, on the forbidden ones. Patterns are import paths relative
// to the module (or absolute, for other modules); "x/..." means x and every
// package below it.
type layerRule struct {
	// why names the rule in failures.
	why string
	// covers are the packages the rule applies to; each must exist.
	covers []string
	// except are packages below covers the rule does not apply to.
	except []string
	// forbid are the packages the covered ones must not depend on.
	forbid []string
	// allow are packages among forbid that are allowed after all.
	allow []string
}

// testHelpers are packages only tests may depend on.
var testHelpers = []string{
	"delegate/jspeer/...",
	"compensation/compensationtest/...",
	"cmd/quittance/internal/httpapi/apitest/...",
	"sql/pgtest/...",
}

// layering is the import rules of ledger/DESIGN.md §5.
var layering = []layerRule{
	{
		why:    "domain packages import no pgx, no generated sqlc code, no store and no HTTP framework",
		covers: []string{"ledger/...", "compensation/...", "delegate/..."},
		except: testHelpers,
		forbid: []string{"github.com/jackc/pgx/...", "sql/...", "github.com/danielgtaylor/huma/..."},
	},
	{
		why:    "ledger imports no other domain package",
		covers: []string{"ledger"},
		forbid: []string{"compensation/...", "delegate/..."},
	},
	{
		why:    "the ledger core imports none of ledger/access, ledger/audit, ledger/report",
		covers: []string{"ledger"},
		forbid: []string{"ledger/access/...", "ledger/audit/...", "ledger/report/..."},
	},
	{
		why:    "ledger/access, ledger/report and ledger/audit import no other domain package, no store and no HTTP handler",
		covers: []string{"ledger/access/...", "ledger/report/...", "ledger/audit/..."},
		forbid: []string{"compensation/...", "delegate/...", "sql/...", "cmd/..."},
	},
	{
		why:    "ledger/webhook imports no delegate package but delegate/egress",
		covers: []string{"ledger/webhook"},
		forbid: []string{"delegate/..."},
		allow:  []string{"delegate/egress/..."},
	},
	{
		why:    "the A2A protocol client and the egress client import no domain package",
		covers: []string{"delegate/a2a/...", "delegate/egress/..."},
		forbid: []string{"ledger/...", "compensation/...", "delegate", "delegate/jspeer/..."},
	},
	{
		why:    "the JOSE leaf imports no package of the module but internal/text",
		covers: []string{"internal/jose"},
		forbid: []string{"..."},
		allow:  []string{"internal/text"},
	},
	{
		why:    "HTTP handlers never import the store",
		covers: []string{"cmd/quittance/internal/httpapi/...", "cmd/quittance/internal/console/..."},
		except: []string{"cmd/quittance/internal/httpapi/apitest/..."},
		forbid: []string{"sql/..."},
	},
	{
		why:    "test helpers are imported by tests only",
		covers: []string{"..."},
		except: testHelpers,
		forbid: testHelpers,
	},
}

// absolute turns a module-relative pattern into an import-path pattern.
func absolute(pattern string) string {
	switch {
	case pattern == "...":
		return modulePath + "/..."
	case strings.Contains(strings.SplitN(pattern, "/", 2)[0], "."):
		return pattern // another module: github.com/…
	}
	return modulePath + "/" + pattern
}

// matches reports whether import path p is matched by pattern.
func matches(pattern, p string) bool {
	pattern = absolute(pattern)
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return p == base || strings.HasPrefix(p, base+"/")
	}
	return p == pattern
}

func matchesAny(patterns []string, p string) bool {
	return slices.ContainsFunc(patterns, func(pattern string) bool { return matches(pattern, p) })
}

// checkLayering returns the violations of rules in graph, a map from each
// package of the module to every package it depends on. A package a rule
// names in covers that is not in graph is a violation too.
func checkLayering(graph map[string][]string, rules []layerRule) []string {
	var out []string
	for _, r := range rules {
		for _, c := range r.covers {
			base := strings.TrimSuffix(absolute(c), "/...")
			if _, ok := graph[base]; !ok && c != "..." {
				out = append(out, fmt.Sprintf("%s: package %s does not exist", r.why, base))
			}
		}
		pkgs := make([]string, 0, len(graph))
		for p := range graph {
			pkgs = append(pkgs, p)
		}
		sort.Strings(pkgs)
		for _, p := range pkgs {
			if !matchesAny(r.covers, p) || matchesAny(r.except, p) {
				continue
			}
			for _, dep := range graph[p] {
				if matchesAny(r.forbid, dep) && !matchesAny(r.allow, dep) {
					out = append(out, fmt.Sprintf("%s: %s depends on %s", r.why, p, dep))
				}
			}
		}
	}
	return out
}

// importGraph lists every package of the module with the packages it
// depends on (non-test, for this platform's build), as go list reports
// them.
func importGraph(t *testing.T) map[string][]string {
	t.Helper()
	root := repoRoot(t)
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Deps,Error", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	graph := map[string][]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Deps       []string
			Error      *struct{ Err string }
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode go list: %v", err)
		}
		if p.Error != nil {
			t.Fatalf("go list %s: %s", p.ImportPath, p.Error.Err)
		}
		graph[p.ImportPath] = p.Deps
	}
	if _, ok := graph[modulePath+"/ledger"]; !ok {
		t.Fatalf("go list did not list %s/ledger; the graph is incomplete: %v", modulePath, graph)
	}
	return graph
}

// TestLayering checks the import rules of ledger/DESIGN.md §5 on the
// module's compiled import graph. A package the rules name that does not
// exist fails it too.
func TestLayering(t *testing.T) {
	t.Parallel()
	for _, v := range checkLayering(importGraph(t), layering) {
		t.Error(v)
	}
}

// TestLayeringCatchesViolations runs the rules over a made-up graph that
// breaks each of them once, and over one that keeps them all.
func TestLayeringCatchesViolations(t *testing.T) {
	t.Parallel()
	m := func(p string) string { return modulePath + "/" + p }
	clean := map[string][]string{
		m("ledger"):                                 {m("ledger/failpoint"), "encoding/json"},
		m("ledger/failpoint"):                       {},
		m("ledger/access"):                          {m("ledger")},
		m("ledger/report"):                          {m("ledger")},
		m("ledger/audit"):                           {m("ledger")},
		m("ledger/webhook"):                         {m("ledger"), m("delegate/egress"), "net/http"},
		m("compensation"):                           {m("ledger"), "github.com/go-jose/go-jose/v4"},
		m("compensation/compensationtest"):          {m("compensation")},
		m("delegate"):                               {m("ledger"), m("compensation"), m("delegate/a2a"), m("delegate/egress")},
		m("delegate/a2a"):                           {m("delegate/egress"), "net/http"},
		m("delegate/egress"):                        {"net/http"},
		m("internal/jose"):                          {m("internal/text"), "github.com/go-jose/go-jose/v4"},
		m("delegate/jspeer"):                        {m("compensation/compensationtest")},
		m("cmd/quittance/internal/httpapi"):         {m("ledger"), "github.com/danielgtaylor/huma/v2"},
		m("cmd/quittance/internal/console"):         {m("ledger"), "html/template"},
		m("cmd/quittance/internal/httpapi/apitest"): {m("sql/pgstore"), m("sql/pgtest")},
		m("sql/pgstore"):                            {m("ledger"), "github.com/jackc/pgx/v5", m("sql/internal/dbsqlc")},
		m("sql/pgtest"):                             {"github.com/jackc/pgx/v5"},
		m("cmd/quittance"):                          {m("sql/pgstore"), m("cmd/quittance/internal/httpapi")},
	}
	if v := checkLayering(clean, layering); len(v) > 0 {
		t.Fatalf("a graph that keeps the rules has violations: %v", v)
	}
	breaks := []struct {
		pkg, dep, want string
	}{
		{m("delegate"), "github.com/jackc/pgx/v5/pgxpool", "domain packages"},
		{m("compensation"), m("sql/internal/dbsqlc"), "domain packages"},
		{m("ledger/failpoint"), "github.com/danielgtaylor/huma/v2", "domain packages"},
		{m("ledger"), m("compensation"), "ledger imports no other domain package"},
		{m("ledger"), m("ledger/report"), "the ledger core imports none"},
		{m("ledger"), m("ledger/access"), "the ledger core imports none"},
		{m("ledger/access"), m("compensation"), "ledger/access, ledger/report and ledger/audit import"},
		{m("ledger/access"), m("cmd/quittance/internal/httpapi"), "ledger/access, ledger/report and ledger/audit import"},
		{m("ledger/audit"), m("delegate"), "ledger/report and ledger/audit import"},
		{m("ledger/webhook"), m("delegate"), "ledger/webhook imports no delegate package"},
		{m("ledger/webhook"), m("delegate/a2a"), "ledger/webhook imports no delegate package"},
		{m("delegate/a2a"), m("ledger"), "the A2A protocol client"},
		{m("delegate/egress"), m("delegate"), "the A2A protocol client"},
		{m("internal/jose"), m("ledger"), "the JOSE leaf imports no package"},
		{m("cmd/quittance/internal/httpapi"), m("sql/pgstore"), "HTTP handlers never import the store"},
		{m("cmd/quittance"), m("sql/pgtest"), "test helpers are imported by tests only"},
	}
	for _, b := range breaks {
		graph := map[string][]string{}
		for p, deps := range clean {
			graph[p] = slices.Clone(deps)
		}
		graph[b.pkg] = append(graph[b.pkg], b.dep)
		v := checkLayering(graph, layering)
		if len(v) != 1 || !strings.Contains(v[0], b.want) || !strings.Contains(v[0], b.dep) {
			t.Errorf("%s → %s: violations %v, want one from the rule %q", b.pkg, b.dep, v, b.want)
		}
	}
	missing := map[string][]string{}
	for p, deps := range clean {
		if p != m("delegate/a2a") {
			missing[p] = deps
		}
	}
	if v := checkLayering(missing, layering); len(v) != 1 || !strings.Contains(v[0], "delegate/a2a does not exist") {
		t.Errorf("without delegate/a2a: violations %v, want one saying it does not exist", v)
	}
}
