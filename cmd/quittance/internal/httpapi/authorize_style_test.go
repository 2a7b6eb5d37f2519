package httpapi_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOneAuthorizationStyle keeps the API and the console on one way to
// authorize: every role check asks the action table in ledger/permissions.go
// (ledger.Authorize or Principal.Permits). It fails on a comparison of a
// role (x.Role == y, r != ledger.RoleOncall), a switch over a role, and a
// call of a function named require or requireOncall, in the non-test Go
// files of httpapi and console.
func TestOneAuthorizationStyle(t *testing.T) {
	t.Parallel()
	for _, dir := range []string{".", "../console"} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		fset := token.NewFileSet()
		for _, e := range entries {
			name := e.Name()
			if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, problem := range roleChecks(fset, f) {
				t.Errorf("%s: use ledger.Authorize or Principal.Permits with an Action", problem)
			}
		}
	}
}

// roleChecks lists the role checks in f that bypass the action table.
func roleChecks(fset *token.FileSet, f *ast.File) []string {
	var out []string
	report := func(n ast.Node, what string) {
		out = append(out, fset.Position(n.Pos()).String()+": "+what)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BinaryExpr:
			if (n.Op == token.EQL || n.Op == token.NEQ) && (isRole(n.X) || isRole(n.Y)) {
				report(n, "a role compared with "+n.Op.String())
			}
		case *ast.SwitchStmt:
			if n.Tag != nil && isRole(n.Tag) {
				report(n, "a switch over a role")
			}
		case *ast.CaseClause:
			for _, e := range n.List {
				if isRole(e) {
					report(e, "a case naming a role")
				}
			}
		case *ast.CallExpr:
			if name := calledName(n.Fun); name == "require" || name == "requireOncall" {
				report(n, "a call of "+name)
			}
		}
		return true
	})
	return out
}

// isRole reports whether e is a principal's role (x.Role) or a role
// constant (ledger.RoleOncall).
func isRole(e ast.Expr) bool {
	sel, ok := ast.Unparen(e).(*ast.SelectorExpr)
	if !ok {
		return false
	}
	if sel.Sel.Name == "Role" {
		return true
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && pkg.Name == "ledger" && strings.HasPrefix(sel.Sel.Name, "Role")
}

// calledName is the name of the function a call calls, if it is named.
func calledName(fun ast.Expr) string {
	switch f := ast.Unparen(fun).(type) {
	case *ast.Ident:
		return f.Name
	case *ast.SelectorExpr:
		return f.Sel.Name
	}
	return ""
}
