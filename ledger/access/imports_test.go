package access_test

import (
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestAccessImports: the access package depends on the standard library,
// github.com/google/uuid and the ledger core only — no database driver or
// generated code, no HTTP stack, no other domain package (see doc.go).
func TestAccessImports(t *testing.T) {
	t.Parallel()
	allowed := map[string]bool{
		"github.com/google/uuid":                true,
		"github.com/quittance/quittance/ledger": true,
	}
	forbiddenStd := map[string]bool{"net/http": true, "database/sql": true}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, entry := range entries {
		name := entry.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				t.Fatal(err)
			}
			std := !strings.Contains(strings.Split(path, "/")[0], ".")
			if (std && forbiddenStd[path]) || (!std && !allowed[path]) {
				t.Errorf("%s imports %s", name, path)
			}
		}
	}
}
