package main

// The layering of ledger/DESIGN.md §5, checked on the compiled import graph
// (go list) of every build, so a wrong import anywhere below a package, in
// any file but tests, fails CI.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
)

// modulePath is the import path of the repository's module.
const modulePath = "github.com/quittance/quittance"

// layerRule forbids the packages it covers to depend, directly or through
// other packages, on the forbidden ones, and, where it lists imports, to
// import directly anything outside the standard library but those.
// Patterns are import paths relative to the module (or absolute, for other
// modules); "x/..." means x and every package below it.
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
	// forbidStd are packages of the standard library the covered ones must
	// not depend on.
	forbidStd []string
	// imports, if not empty, are the only packages outside the standard
	// library the covered ones may import directly.
	imports []string
}

// pkgDeps is what one package depends on: the packages it imports and
// every package below them.
type pkgDeps struct {
	imports, deps []string
}

// standard reports whether import path p is of the standard library: its
// first element has no dot ("vendor/golang.org/..." included).
func standard(p string) bool {
	return !strings.Contains(strings.SplitN(p, "/", 2)[0], ".")
}

// testHelpers are packages only tests may depend on.
var testHelpers = []string{
	"delegate/jspeer/...",
	"compensation/compensationtest/...",
	"compensation/extension/...",
	"ledger/extension/...",
	"internal/specschema/...",
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
		why: "the ledger core imports no package of the module but ledger/failpoint and internal/text (not ledger/access, ledger/audit, ledger/report, " +
			"no other domain package), nothing else outside the standard library but github.com/google/uuid, and not net/http or database/sql",
		covers:    []string{"ledger"},
		forbid:    []string{"..."},
		allow:     []string{"ledger/failpoint", "internal/text"},
		forbidStd: []string{"net/http", "database/sql"},
		imports:   []string{"github.com/google/uuid", "ledger/failpoint", "internal/text"},
	},
	{
		why: "ledger/access imports the ledger core, github.com/google/uuid and the standard library only: no other domain package, no store, " +
			"no HTTP handler, no net/http or database/sql",
		covers:    []string{"ledger/access/..."},
		forbid:    []string{"compensation/...", "delegate/...", "sql/...", "cmd/..."},
		forbidStd: []string{"net/http", "database/sql"},
		imports:   []string{"github.com/google/uuid", "ledger"},
	},
	{
		why:    "ledger/report and ledger/audit import no other domain package, no store and no HTTP handler",
		covers: []string{"ledger/report/...", "ledger/audit/..."},
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
		why:     "the JOSE leaf imports no package of the module but internal/text, and no other module but go-jose",
		covers:  []string{"internal/jose"},
		forbid:  []string{"..."},
		allow:   []string{"internal/text"},
		imports: []string{"github.com/go-jose/go-jose/v4/...", "internal/text"},
	},
	{
		why: "the extensions' specifications (compensation/extension, ledger/extension) import no package of the module but " +
			"internal/specschema, and no other module; the kit for remote orgs (compensation/kit) is a module of its own, its go.mod its allow-list",
		covers:  []string{"compensation/extension", "ledger/extension"},
		forbid:  []string{"..."},
		allow:   []string{"internal/specschema"},
		imports: []string{"internal/specschema"},
	},
	{
		why:     "the specifications' schema leaf (internal/specschema) imports no package of the module and no other module but the JSON Schema validator",
		covers:  []string{"internal/specschema"},
		forbid:  []string{"..."},
		imports: []string{"github.com/santhosh-tekuri/jsonschema/v6/..."},
	},
	{
		why:    "HTTP handlers never import the store",
		covers: []string{"cmd/quittance/internal/httpapi/...", "cmd/quittance/internal/console/...", "cmd/quittance/internal/gateway/..."},
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

// checkLayering returns the violations of rules in graph, which maps each
// package of the module to what it depends on: one per rule, package and
// dependency the rule forbids. A package a rule names in covers that is
// not in graph is a violation too.
func checkLayering(graph map[string]pkgDeps, rules []layerRule) []string {
	pkgs := make([]string, 0, len(graph))
	for p := range graph {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	var out []string
	for _, r := range rules {
		for _, c := range r.covers {
			base := strings.TrimSuffix(absolute(c), "/...")
			if _, ok := graph[base]; !ok && c != "..." {
				out = append(out, fmt.Sprintf("%s: package %s does not exist", r.why, base))
			}
		}
		for _, p := range pkgs {
			if !matchesAny(r.covers, p) || matchesAny(r.except, p) {
				continue
			}
			for _, dep := range r.forbidden(graph[p]) {
				out = append(out, fmt.Sprintf("%s: %s depends on %s", r.why, p, dep))
			}
		}
	}
	return out
}

// forbidden is what of d the rule forbids, sorted, each once.
func (r layerRule) forbidden(d pkgDeps) []string {
	var out []string
	for _, dep := range d.deps {
		if standard(dep) && slices.Contains(r.forbidStd, dep) ||
			!standard(dep) && matchesAny(r.forbid, dep) && !matchesAny(r.allow, dep) {
			out = append(out, dep)
		}
	}
	for _, dep := range d.imports {
		if len(r.imports) > 0 && !standard(dep) && !matchesAny(r.imports, dep) {
			out = append(out, dep)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// builds are the builds the rules hold on, by GOOS and build tags: between
// them every non-test file of the module is in one (the failpoints tag's
// files, and those for Linux, for the other Unix systems, for the rest).
var builds = []struct{ goos, tags string }{
	{goos: "linux"},
	{goos: "darwin", tags: "failpoints"},
	{goos: "windows"},
}

// importGraph lists every package of the module with the packages it
// imports and depends on (non-test), in any of builds, as go list reports
// them.
func importGraph(t *testing.T) map[string]pkgDeps {
	t.Helper()
	graph := map[string]pkgDeps{}
	for _, b := range builds {
		for p, d := range listImports(t, b.goos, b.tags) {
			g := graph[p]
			g.imports = slices.Compact(slices.Sorted(slices.Values(append(g.imports, d.imports...))))
			g.deps = slices.Compact(slices.Sorted(slices.Values(append(g.deps, d.deps...))))
			graph[p] = g
		}
	}
	if _, ok := graph[modulePath+"/ledger"]; !ok {
		t.Fatalf("go list did not list %s/ledger; the graph is incomplete: %v", modulePath, graph)
	}
	return graph
}

// listImports is go list's import graph of the module for goos with the
// build tags tags.
func listImports(t *testing.T, goos, tags string) map[string]pkgDeps {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-tags="+tags, "-json=ImportPath,Imports,Deps,Error", "./...")
	cmd.Dir = repoRoot(t)
	cmd.Env = append(os.Environ(), "GOOS="+goos)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list (GOOS=%s, tags %q): %v\n%s", goos, tags, err, stderr.String())
	}
	graph := map[string]pkgDeps{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Imports    []string
			Deps       []string
			Error      *struct{ Err string }
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode go list: %v", err)
		}
		if p.Error != nil {
			t.Fatalf("go list %s (GOOS=%s, tags %q): %s", p.ImportPath, goos, tags, p.Error.Err)
		}
		graph[p.ImportPath] = pkgDeps{imports: p.Imports, deps: p.Deps}
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

// madeUp is a made-up graph in which every package imports what it
// depends on directly, but the ledger/access imports only the ledger core
// and github.com/google/uuid, which bring in the core's own dependencies.
func madeUp(deps map[string][]string) map[string]pkgDeps {
	g := make(map[string]pkgDeps, len(deps))
	for p, d := range deps {
		g[p] = pkgDeps{imports: slices.Clone(d), deps: slices.Clone(d)}
	}
	if a, ok := g[modulePath+"/ledger/access"]; ok {
		a.deps = append(a.deps, modulePath+"/ledger/failpoint", modulePath+"/internal/text")
		g[modulePath+"/ledger/access"] = a
	}
	return g
}

// TestLayeringCatchesViolations runs the rules over a made-up graph that
// breaks each of them once, and over one that keeps them all.
func TestLayeringCatchesViolations(t *testing.T) {
	t.Parallel()
	m := func(p string) string { return modulePath + "/" + p }
	clean := map[string][]string{
		m("ledger"):                                 {m("ledger/failpoint"), m("internal/text"), "github.com/google/uuid", "encoding/json"},
		m("ledger/failpoint"):                       {},
		m("ledger/access"):                          {m("ledger"), "github.com/google/uuid", "crypto/sha256"},
		m("ledger/report"):                          {m("ledger")},
		m("ledger/audit"):                           {m("ledger")},
		m("ledger/webhook"):                         {m("ledger"), m("delegate/egress"), "net/http"},
		m("compensation"):                           {m("ledger"), "github.com/go-jose/go-jose/v4"},
		m("compensation/compensationtest"):          {m("compensation")},
		m("compensation/extension"):                 {m("internal/specschema")},
		m("ledger/extension"):                       {m("internal/specschema")},
		m("internal/specschema"):                    {"github.com/santhosh-tekuri/jsonschema/v6"},
		m("delegate"):                               {m("ledger"), m("compensation"), m("delegate/a2a"), m("delegate/egress")},
		m("delegate/a2a"):                           {m("delegate/egress"), "net/http"},
		m("delegate/egress"):                        {"net/http"},
		m("internal/text"):                          {},
		m("internal/jose"):                          {m("internal/text"), "github.com/go-jose/go-jose/v4", "github.com/go-jose/go-jose/v4/json", "net/http"},
		m("delegate/jspeer"):                        {m("compensation/compensationtest")},
		m("cmd/quittance/internal/httpapi"):         {m("ledger"), "github.com/danielgtaylor/huma/v2"},
		m("cmd/quittance/internal/console"):         {m("ledger"), "html/template"},
		m("cmd/quittance/internal/gateway"):         {m("ledger"), m("delegate"), "github.com/a2aproject/a2a-go/v2/a2asrv"},
		m("cmd/quittance/internal/httpapi/apitest"): {m("sql/pgstore"), m("sql/pgtest")},
		m("sql/pgstore"):                            {m("ledger"), "github.com/jackc/pgx/v5", m("sql/internal/dbsqlc")},
		m("sql/pgtest"):                             {"github.com/jackc/pgx/v5"},
		m("cmd/quittance"):                          {m("sql/pgstore"), m("cmd/quittance/internal/httpapi")},
	}
	if v := checkLayering(madeUp(clean), layering); len(v) > 0 {
		t.Fatalf("a graph that keeps the rules has violations: %v", v)
	}
	breaks := []struct {
		pkg, dep, want string
	}{
		{m("delegate"), "github.com/jackc/pgx/v5/pgxpool", "domain packages"},
		{m("compensation"), m("sql/internal/dbsqlc"), "domain packages"},
		{m("ledger/failpoint"), "github.com/danielgtaylor/huma/v2", "domain packages"},
		{m("ledger"), m("compensation"), "the ledger core imports"},
		{m("ledger"), m("ledger/report"), "the ledger core imports"},
		{m("ledger"), m("ledger/access"), "the ledger core imports"},
		{m("ledger"), m("ledger/webhook"), "the ledger core imports"},
		{m("ledger"), "net/http", "the ledger core imports"},
		{m("ledger"), "database/sql", "the ledger core imports"},
		{m("ledger"), "golang.org/x/text/cases", "the ledger core imports"},
		{m("ledger/access"), m("compensation"), "ledger/access imports"},
		{m("ledger/access"), m("cmd/quittance/internal/httpapi"), "ledger/access imports"},
		{m("ledger/access"), m("internal/text"), "ledger/access imports"},
		{m("ledger/access"), "net/http", "ledger/access imports"},
		{m("ledger/access"), "database/sql", "ledger/access imports"},
		{m("ledger/access"), "golang.org/x/crypto/bcrypt", "ledger/access imports"},
		{m("ledger/audit"), m("delegate"), "ledger/report and ledger/audit import"},
		{m("ledger/webhook"), m("delegate"), "ledger/webhook imports no delegate package"},
		{m("ledger/webhook"), m("delegate/a2a"), "ledger/webhook imports no delegate package"},
		{m("delegate/a2a"), m("ledger"), "the A2A protocol client"},
		{m("delegate/egress"), m("delegate"), "the A2A protocol client"},
		{m("internal/jose"), m("ledger"), "the JOSE leaf imports no package"},
		{m("compensation/extension"), m("compensation"), "the extensions' specifications"},
		{m("compensation/extension"), "github.com/go-jose/go-jose/v4", "the extensions' specifications"},
		{m("internal/jose"), "github.com/google/uuid", "the JOSE leaf imports no package"},
		{m("cmd/quittance/internal/httpapi"), m("sql/pgstore"), "HTTP handlers never import the store"},
		{m("cmd/quittance"), m("sql/pgtest"), "test helpers are imported by tests only"},
	}
	for _, b := range breaks {
		graph := madeUp(clean)
		d := graph[b.pkg]
		d.imports, d.deps = append(d.imports, b.dep), append(d.deps, b.dep)
		graph[b.pkg] = d
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
	if v := checkLayering(madeUp(missing), layering); len(v) != 1 || !strings.Contains(v[0], "delegate/a2a does not exist") {
		t.Errorf("without delegate/a2a: violations %v, want one saying it does not exist", v)
	}
}
