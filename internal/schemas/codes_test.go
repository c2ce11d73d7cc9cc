package schemas

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/sandboxio/sandboxio/pkg/events"
)

var docCode = regexp.MustCompile("`(SBX_E[0-9]{4})`")

// TestErrorsDocMatchesTheCode fails when docs/errors.md names a code that
// no code path returns, or a code path returns a code that docs/errors.md
// omits. It reads the catalog (pkg/events), the identifiers that name each
// code (pkg/events/errors.go), the doc, and every non-test Go file of the
// module: a code is returned when some file outside errors.go uses its
// Code constant, its sentinel (other than as the target of errors.Is or
// errors.As, which only classifies), or its literal.
func TestErrorsDocMatchesTheCode(t *testing.T) {
	doc, err := os.ReadFile("../../docs/errors.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[events.Code]bool{}
	for _, m := range docCode.FindAllSubmatch(doc, -1) {
		documented[events.Code(m[1])] = true
	}
	names := codeIdentifiers(t)
	returned := returnedCodes(t, "../..", names)
	var unreturned, undocumented []string
	for c := range documented {
		if _, ok := returned[c]; !ok {
			unreturned = append(unreturned, string(c))
		}
	}
	for c, where := range returned {
		if !documented[c] {
			undocumented = append(undocumented, string(c)+" ("+where+")")
		}
	}
	sort.Strings(unreturned)
	sort.Strings(undocumented)
	if len(unreturned) > 0 {
		t.Errorf("docs/errors.md names codes that no code path returns: %v", unreturned)
	}
	if len(undocumented) > 0 {
		t.Errorf("code paths return codes that docs/errors.md omits: %v", undocumented)
	}
	for _, e := range events.Catalog {
		if !documented[e.Code] {
			t.Errorf("catalog code %s is not in docs/errors.md (run make schemas)", e.Code)
		}
	}
	if len(documented) < 30 || len(returned) < 30 {
		t.Fatalf("found %d documented and %d returned codes: the test reads the wrong files", len(documented), len(returned))
	}
}

// codeIdentifiers maps the Code constants and Err sentinels that
// pkg/events/errors.go declares to their codes.
func codeIdentifiers(t *testing.T) map[string]events.Code {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "../../pkg/events/errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]events.Code{}
	sentinels := map[string]string{} // ErrX -> CodeX
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, spec := range gd.Specs {
			vs, ok := spec.(*ast.ValueSpec)
			if !ok || len(vs.Names) != 1 || len(vs.Values) != 1 {
				continue
			}
			name := vs.Names[0].Name
			switch v := vs.Values[0].(type) {
			case *ast.BasicLit: // CodeX Code = "SBX_E…"
				if s, err := strconv.Unquote(v.Value); err == nil && strings.HasPrefix(s, "SBX_E") {
					out[name] = events.Code(s)
				}
			case *ast.CallExpr: // ErrX = sentinel(CodeX)
				if fn, ok := v.Fun.(*ast.Ident); ok && fn.Name == "sentinel" && len(v.Args) == 1 {
					if arg, ok := v.Args[0].(*ast.Ident); ok {
						sentinels[name] = arg.Name
					}
				}
			}
		}
	}
	for errName, codeName := range sentinels {
		if c, ok := out[codeName]; ok {
			out[errName] = c
		}
	}
	return out
}

// returnedCodes finds the codes that non-test code outside errors.go
// names, each with one place that does.
func returnedCodes(t *testing.T, root string, names map[string]events.Code) map[events.Code]string {
	t.Helper()
	found := map[events.Code]string{}
	literal := regexp.MustCompile(`^SBX_E[0-9]{4}$`)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n != "." && n != ".." && (strings.HasPrefix(n, ".") || n == "testdata" || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") || filepath.ToSlash(p) == filepath.ToSlash(filepath.Join(root, "pkg/events/errors.go")) {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, 0)
		if err != nil {
			return err
		}
		inEvents := f.Name.Name == "events"
		classifying := map[ast.Expr]bool{}
		ast.Inspect(f, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok && len(call.Args) == 2 {
				if sel, ok := call.Fun.(*ast.SelectorExpr); ok && (sel.Sel.Name == "Is" || sel.Sel.Name == "As") {
					classifying[call.Args[1]] = true
				}
			}
			return true
		})
		rel, _ := filepath.Rel(root, p)
		note := func(c events.Code) {
			if _, ok := found[c]; !ok {
				found[c] = filepath.ToSlash(rel)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.SelectorExpr:
				if id, ok := x.X.(*ast.Ident); ok && id.Name == "events" && !classifying[x] {
					if c, ok := names[x.Sel.Name]; ok {
						note(c)
					}
				}
			case *ast.Ident:
				if inEvents && !classifying[x] {
					if c, ok := names[x.Name]; ok {
						note(c)
					}
				}
			case *ast.BasicLit:
				if s, err := strconv.Unquote(x.Value); err == nil && literal.MatchString(s) {
					note(events.Code(s))
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}
