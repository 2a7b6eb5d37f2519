package main

// Domain types carry no framework tags (ledger/DESIGN.md §5): the HTTP
// layer and the store have their own types and map to them, so a domain
// struct knows JSON at most, never a database column, a validator or an
// API documentation framework.

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// domainTrees are the domain packages, with every package below them but
// the test helpers (testHelpers, layering_test.go).
var domainTrees = []string{"ledger", "compensation", "delegate"}

// tagKeys returns the keys of a struct tag in its conventional form
// (`key:"value" key2:"value"`), and false when the tag is not in that form.
func tagKeys(tag string) ([]string, bool) {
	var keys []string
	for {
		tag = strings.TrimLeft(tag, " ")
		if tag == "" {
			return keys, true
		}
		key, rest, ok := strings.Cut(tag, ":")
		if !ok || key == "" || strings.ContainsAny(key, " \"") {
			return keys, false
		}
		value, err := strconv.QuotedPrefix(rest)
		if err != nil {
			return keys, false
		}
		keys = append(keys, key)
		tag = rest[len(value):]
	}
}

// nonJSONTags returns, as "file:line: field tag" lines, every struct field
// tag in the Go source src that has a key other than json.
func nonJSONTags(fset *token.FileSet, name string, src any) ([]string, error) {
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var bad []*ast.BasicLit
	ast.Inspect(f, func(n ast.Node) bool {
		st, ok := n.(*ast.StructType)
		if !ok {
			return true
		}
		for _, field := range st.Fields.List {
			if field.Tag == nil {
				continue
			}
			tag, err := strconv.Unquote(field.Tag.Value)
			if err != nil {
				tag = field.Tag.Value
			}
			keys, ok := tagKeys(tag)
			for _, k := range keys {
				if k != "json" {
					ok = false
				}
			}
			if !ok {
				bad = append(bad, field.Tag)
			}
		}
		return true
	})
	slices.SortFunc(bad, func(a, b *ast.BasicLit) int { return int(a.Pos() - b.Pos()) })
	var out []string
	for _, tag := range bad {
		out = append(out, fset.Position(tag.Pos()).String()+": "+tag.Value)
	}
	return out, nil
}

// TestDomainStructTagsAreJSONOnly parses every non-test Go file of the
// domain packages and fails on a struct tag with a key other than json.
func TestDomainStructTagsAreJSONOnly(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	fset := token.NewFileSet()
	files := 0
	for _, tree := range domainTrees {
		err := filepath.WalkDir(filepath.Join(root, tree), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			rel = filepath.ToSlash(rel)
			if d.IsDir() {
				if d.Name() == "testdata" || d.Name() == "node_modules" || matchesAny(testHelpers, rel) {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
				return nil
			}
			files++
			bad, err := nonJSONTags(fset, path, nil)
			if err != nil {
				return err
			}
			for _, b := range bad {
				t.Errorf("%s: a domain type carries a tag other than json; map it in the layer that needs it", b)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if files < 50 {
		t.Fatalf("only %d Go files found under %v: the walk is broken", files, domainTrees)
	}
}

// TestNonJSONTagsCatchesFrameworkTags checks the check: json alone passes,
// any other key, alone or beside json, fails, and so does a malformed tag.
func TestNonJSONTagsCatchesFrameworkTags(t *testing.T) {
	t.Parallel()
	src := "package x\n\ntype T struct {\n" +
		"\tA string `json:\"a\"`\n" +
		"\tB string `json:\"b,omitempty\"`\n" +
		"\tC string\n" +
		"\tD string `json:\"d\" doc:\"the d\"`\n" +
		"\tE string `db:\"e\"`\n" +
		"\tF struct {\n\t\tG string `example:\"g\"`\n\t}\n" +
		"\tH string `json:h`\n" +
		"}\n"
	bad, err := nonJSONTags(token.NewFileSet(), "x.go", src)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, b := range bad {
		lines = append(lines, strings.SplitN(b, ":", 3)[1])
	}
	if got, want := strings.Join(lines, ","), "7,8,10,12"; got != want {
		t.Errorf("flagged lines %s, want %s: %v", got, want, bad)
	}
}
