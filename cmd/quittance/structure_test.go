package main

// Size limits of issue 24: a function or method fits on a screen (80 lines
// from `func` to its closing brace, at most 6 parameters) and an interface
// stays small enough to fake in a test (30 methods, embedded interfaces of
// the module counted). The checks parse the source, so they hold for every
// build tag; tests and generated code are left out.

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Size limits checked by TestFunctionsStaySmall and TestInterfacesStaySmall.
const (
	maxFuncLines      = 80
	maxFuncParams     = 6
	maxInterfaceMeths = 30
)

// sizeDebt lists the functions ("pkg/path.Func" or "pkg/path.Type.Method")
// and interfaces ("pkg/path.Name") that are over a limit today, in areas
// still being reworked. The list may only shrink: a new violation fails,
// and so does an entry that no longer violates, so it stays honest.
var sizeDebt = map[string]bool{}

// sourceFile is one parsed non-test Go file of the module, with pkg the
// module-relative directory of its package ("." for the root).
type sourceFile struct {
	pkg       string
	file      *ast.File
	generated bool
}

// sizeFindings is what one check saw: every declaration it looked at and,
// for those over a limit, why.
type sizeFindings struct {
	declared map[string]bool
	over     map[string]string
}

func newSizeFindings() sizeFindings {
	return sizeFindings{declared: map[string]bool{}, over: map[string]string{}}
}

// funcKey names a function declaration as sizeDebt does.
func funcKey(pkg string, fd *ast.FuncDecl) string {
	name := fd.Name.Name
	if fd.Recv != nil && len(fd.Recv.List) == 1 {
		if recv := receiverName(fd.Recv.List[0].Type); recv != "" {
			name = recv + "." + name
		}
	}
	return pkg + "." + name
}

// receiverName is the type name of a method receiver expression
// (T, *T, T[P], *T[P, Q]).
func receiverName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// paramCount counts a parameter list the way a reader does: each name,
// or each type when the parameters are unnamed.
func paramCount(fields *ast.FieldList) int {
	if fields == nil {
		return 0
	}
	n := 0
	for _, f := range fields.List {
		n += max(1, len(f.Names))
	}
	return n
}

// checkFuncSizes reports every function and method of the non-generated
// files that is longer than maxFuncLines or takes more than maxFuncParams.
func checkFuncSizes(fset *token.FileSet, files []sourceFile) sizeFindings {
	found := newSizeFindings()
	for _, sf := range files {
		if sf.generated {
			continue
		}
		for _, decl := range sf.file.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok {
				continue
			}
			key := funcKey(sf.pkg, fd)
			found.declared[key] = true
			start := fset.Position(fd.Pos())
			lines := fset.Position(fd.End()).Line - start.Line + 1
			params := paramCount(fd.Type.Params)
			var why []string
			if lines > maxFuncLines {
				why = append(why, fmt.Sprintf("%d lines (max %d)", lines, maxFuncLines))
			}
			if params > maxFuncParams {
				why = append(why, fmt.Sprintf("%d parameters (max %d)", params, maxFuncParams))
			}
			if len(why) > 0 {
				found.over[key] = start.String() + ": " + strings.Join(why, ", ")
			}
		}
	}
	return found
}

// ifaceDecl is one interface type declaration with what its file imports,
// so embedded interfaces can be looked up.
type ifaceDecl struct {
	pkg       string
	pos       token.Pos
	typ       *ast.InterfaceType
	imports   map[string]string // local name -> module-relative package dir
	generated bool
}

// moduleImports maps the local names a file gives to packages of this
// module to their module-relative directories; pkgNames gives the package
// name declared in each directory, used when an import has no alias.
func moduleImports(f *ast.File, pkgNames map[string]string) map[string]string {
	out := map[string]string{}
	for _, imp := range f.Imports {
		p, err := strconv.Unquote(imp.Path.Value)
		if err != nil || !strings.HasPrefix(p, modulePath+"/") {
			continue
		}
		dir := strings.TrimPrefix(p, modulePath+"/")
		name := pkgNames[dir]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		if name != "" && name != "_" && name != "." {
			out[name] = dir
		}
	}
	return out
}

// interfaceIndex collects every named interface type of files, keyed
// "pkg/path.Name".
func interfaceIndex(files []sourceFile) map[string]*ifaceDecl {
	pkgNames := map[string]string{}
	for _, sf := range files {
		pkgNames[sf.pkg] = sf.file.Name.Name
	}
	index := map[string]*ifaceDecl{}
	for _, sf := range files {
		imports := moduleImports(sf.file, pkgNames)
		ast.Inspect(sf.file, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			if it, ok := ts.Type.(*ast.InterfaceType); ok {
				index[sf.pkg+"."+ts.Name.Name] = &ifaceDecl{
					pkg: sf.pkg, pos: ts.Pos(), typ: it, imports: imports, generated: sf.generated,
				}
			}
			return true
		})
	}
	return index
}

// interfaceMethods adds to methods the names of the methods of d,
// following embedded interfaces declared in this module by name (T in the
// same package, p.T through an import). seen stops embedding cycles.
func interfaceMethods(index map[string]*ifaceDecl, d *ifaceDecl, methods, seen map[string]bool) {
	for _, m := range d.typ.Methods.List {
		if _, ok := m.Type.(*ast.FuncType); ok {
			for _, name := range m.Names {
				methods[name.Name] = true
			}
			continue
		}
		var key string
		switch e := m.Type.(type) {
		case *ast.Ident:
			key = d.pkg + "." + e.Name
		case *ast.SelectorExpr:
			if x, ok := e.X.(*ast.Ident); ok && d.imports[x.Name] != "" {
				key = d.imports[x.Name] + "." + e.Sel.Name
			}
		}
		if embedded := index[key]; embedded != nil && !seen[key] {
			seen[key] = true
			interfaceMethods(index, embedded, methods, seen)
		}
	}
}

// checkInterfaceSizes reports every interface of the non-generated files
// whose method set, embedded module interfaces included, is over
// maxInterfaceMeths.
func checkInterfaceSizes(fset *token.FileSet, files []sourceFile) sizeFindings {
	found := newSizeFindings()
	index := interfaceIndex(files)
	for key, d := range index {
		if d.generated {
			continue
		}
		found.declared[key] = true
		methods := map[string]bool{}
		interfaceMethods(index, d, methods, map[string]bool{key: true})
		if len(methods) > maxInterfaceMeths {
			found.over[key] = fmt.Sprintf("%s: %d methods (max %d)", fset.Position(d.pos), len(methods), maxInterfaceMeths)
		}
	}
	return found
}

// moduleRoot walks up from the working directory to the go.mod that
// declares this module.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(mod), "module "+modulePath+"\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of %s above the working directory", modulePath)
		}
		dir = parent
	}
}

// moduleSources parses every non-test Go file of the module once: below
// root, skipping hidden, testdata and node_modules directories, nested
// modules and the generated sql/internal/dbsqlc. Files with a "Code
// generated" header are marked generated.
var moduleSources = sync.OnceValues(func() (parsedModule, error) {
	root, err := moduleRoot()
	if err != nil {
		return parsedModule{}, err
	}
	fset := token.NewFileSet()
	var files []sourceFile
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == "." {
				return nil
			}
			name := d.Name()
			if strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || rel == "sql/internal/dbsqlc" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files = append(files, sourceFile{pkg: filepath.ToSlash(filepath.Dir(rel)), file: f, generated: ast.IsGenerated(f)})
		return nil
	})
	return parsedModule{fset, files}, err
})

// parsedModule is the result of moduleSources.
type parsedModule struct {
	fset  *token.FileSet
	files []sourceFile
}

// checkAgainstDebt fails on every finding not in sizeDebt and on every
// sizeDebt entry this check declares that is no longer over its limit.
func checkAgainstDebt(t *testing.T, found sizeFindings, what, fix string) {
	t.Helper()
	keys := make([]string, 0, len(found.over))
	for k := range found.over {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !sizeDebt[k] {
			t.Errorf("%s: %s %s is over the limit; %s", found.over[k], what, k, fix)
		}
	}
	for k := range sizeDebt {
		if found.declared[k] && found.over[k] == "" {
			t.Errorf("%s %s is within the limits now: remove %s from sizeDebt", what, k, k)
		}
	}
}

// TestFunctionsStaySmall fails on a function or method over 80 lines or
// over 6 parameters that sizeDebt does not list, and on a stale entry.
func TestFunctionsStaySmall(t *testing.T) {
	t.Parallel()
	mod, err := moduleSources()
	if err != nil {
		t.Fatal(err)
	}
	fset, files := mod.fset, mod.files
	if len(files) < 100 {
		t.Fatalf("only %d Go files found: the walk is broken", len(files))
	}
	found := checkFuncSizes(fset, files)
	checkAgainstDebt(t, found, "function", "split it into named steps or group its parameters in a struct")
	ifaces := checkInterfaceSizes(fset, files)
	for k := range sizeDebt {
		if !found.declared[k] && !ifaces.declared[k] {
			t.Errorf("%s names no function or interface of the module: remove %s from sizeDebt", k, k)
		}
	}
}

// TestInterfacesStaySmall fails on an interface over 30 methods that
// sizeDebt does not list, and on a stale entry.
func TestInterfacesStaySmall(t *testing.T) {
	t.Parallel()
	mod, err := moduleSources()
	if err != nil {
		t.Fatal(err)
	}
	fset, files := mod.fset, mod.files
	checkAgainstDebt(t, checkInterfaceSizes(fset, files), "interface", "split it into the smaller interfaces its callers need")
}

// TestSizeChecksCatchViolations checks the checks on a small source: a
// function of 81 lines, one of 7 parameters and an interface that reaches
// 31 methods through an embedded one are reported; their neighbours at the
// limits are not.
func TestSizeChecksCatchViolations(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("package x\n\n")
	b.WriteString("func long() {\n" + strings.Repeat("\t_ = 0\n", 79) + "}\n\n")
	b.WriteString("func fits() {\n" + strings.Repeat("\t_ = 0\n", 78) + "}\n\n")
	b.WriteString("func many(a, b, c int, d string, e, f, g bool) {}\n\n")
	b.WriteString("func six(a, b, c int, d string, e, f bool) {}\n\n")
	b.WriteString("type T struct{}\n\nfunc (T) method(int, int, int, int, int, int, int) {}\n\n")
	b.WriteString("type Base interface {\n")
	for i := range 30 {
		fmt.Fprintf(&b, "\tM%d()\n", i)
	}
	b.WriteString("}\n\ntype BigStore interface {\n\tBase\n\tExtra()\n\tM0()\n}\n")
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "x.go", b.String(), parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	files := []sourceFile{{pkg: "x", file: f}}

	funcs := checkFuncSizes(fset, files)
	for _, k := range []string{"x.long", "x.many", "x.T.method"} {
		if funcs.over[k] == "" {
			t.Errorf("%s not reported; got %v", k, funcs.over)
		}
	}
	for _, k := range []string{"x.fits", "x.six"} {
		if !funcs.declared[k] || funcs.over[k] != "" {
			t.Errorf("%s: declared %v, reported %q; want declared and within limits", k, funcs.declared[k], funcs.over[k])
		}
	}
	ifaces := checkInterfaceSizes(fset, files)
	if ifaces.over["x.BigStore"] == "" || ifaces.over["x.Base"] != "" {
		t.Errorf("interfaces reported %v; want x.BigStore (31 methods) and not x.Base (30)", ifaces.over)
	}
}
