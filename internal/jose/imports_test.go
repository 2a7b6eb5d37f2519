package jose_test

import (
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestLeafImports: the JOSE leaf depends on the standard library,
// go-jose (and its packages) and internal/text only — no domain package of this module (see
// doc.go).
func TestLeafImports(t *testing.T) {
	t.Parallel()
	allowed := map[string]bool{
		"github.com/go-jose/go-jose/v4":                true,
		"github.com/quittance/quittance/internal/text": true,
	}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	for _, entry := range entries {
		name := entry.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		files++
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
			goJOSE := strings.HasPrefix(path, "github.com/go-jose/go-jose/v4/")
			if !std && !allowed[path] && !goJOSE {
				t.Errorf("%s imports %s", name, path)
			}
		}
	}
	if files == 0 {
		t.Fatal("no source files found")
	}
}
