// Command ctxfields fails when a struct type holds a context.Context that
// scripts/ctx-fields.txt does not name with its reason. A context belongs
// to a call: it is passed, first, to the functions that need it, and not
// kept where it outlives the call that made it. `make check` runs it as
// `go run ./scripts/ctxfields`.
package main

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

const allowFile = "scripts/ctx-fields.txt"

func main() {
	files, err := goFiles()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ctxfields:", err)
		os.Exit(2)
	}
	allow, err := readAllow(allowFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ctxfields:", err)
		os.Exit(2)
	}
	fset := token.NewFileSet()
	var bad []string
	seen := map[string]bool{}
	for _, f := range files {
		found, err := ctxFields(fset, f)
		if err != nil {
			fmt.Fprintln(os.Stderr, "ctxfields:", err)
			os.Exit(2)
		}
		for _, x := range found {
			seen[x.key] = true
			if _, ok := allow[x.key]; !ok {
				bad = append(bad, fmt.Sprintf("%s: %s holds a context.Context (pass it to the calls instead, or name it in %s with the reason)", x.pos, x.key, allowFile))
			}
		}
	}
	var stale []string
	for k := range allow {
		if !seen[k] {
			stale = append(stale, k)
		}
	}
	sort.Strings(stale)
	for _, k := range stale {
		bad = append(bad, fmt.Sprintf("%s names %s, which holds no context.Context any more: remove the line", allowFile, k))
	}
	if len(bad) > 0 {
		for _, b := range bad {
			fmt.Println(b)
		}
		os.Exit(1)
	}
	fmt.Printf("no context.Context in a struct but the %d in %s\n", len(allow), allowFile)
}

// goFiles lists the tracked Go files, or every Go file outside a clone.
func goFiles() ([]string, error) {
	out, err := exec.Command("git", "ls-files", "--cached", "--others", "--exclude-standard", "*.go").Output()
	if err != nil {
		return walkGoFiles()
	}
	var fs []string
	for _, l := range strings.Split(string(out), "\n") {
		if l != "" && !strings.Contains(l, "/testdata/") {
			if _, err := os.Stat(l); err == nil {
				fs = append(fs, l)
			}
		}
	}
	return fs, nil
}

// walkGoFiles lists the Go files below the working directory but those
// of testdata and hidden directories (.data).
func walkGoFiles() ([]string, error) {
	var fs []string
	err := filepath.WalkDir(".", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != "." && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") {
			fs = append(fs, p)
		}
		return nil
	})
	return fs, err
}

// readAllow reads "path Type.field reason" lines; # starts a comment.
func readAllow(p string) (map[string]string, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		fs := strings.Fields(l)
		if len(fs) < 3 {
			return nil, fmt.Errorf("%s:%d: want \"path Type.field reason\"", p, n)
		}
		m[fs[0]+" "+fs[1]] = strings.Join(fs[2:], " ")
	}
	return m, sc.Err()
}

type finding struct {
	pos string
	key string // "path Type.field"
}

// ctxFields finds the fields of struct types in one file whose type is
// context.Context (under whatever name the file imports "context"),
// embedded or named.
func ctxFields(fset *token.FileSet, path string) ([]finding, error) {
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	pkgName := ""
	for _, im := range f.Imports {
		if v, _ := strconv.Unquote(im.Path.Value); v == "context" {
			pkgName = "context"
			if im.Name != nil {
				pkgName = im.Name.Name
			}
		}
	}
	if pkgName == "" || pkgName == "_" {
		return nil, nil
	}
	isCtx := func(e ast.Expr) bool {
		if st, ok := e.(*ast.StarExpr); ok {
			e = st.X
		}
		sel, ok := e.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "Context" {
			return false
		}
		id, ok := sel.X.(*ast.Ident)
		return ok && id.Name == pkgName
	}
	var out []finding
	// The name of the type a struct is declared as, "" for a literal.
	var owner func(n ast.Node) string
	names := map[*ast.StructType]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		if ts, ok := n.(*ast.TypeSpec); ok {
			if st, ok := ts.Type.(*ast.StructType); ok {
				names[st] = ts.Name.Name
			}
		}
		return true
	})
	owner = func(n ast.Node) string {
		if s := names[n.(*ast.StructType)]; s != "" {
			return s
		}
		return "struct{}"
	}
	ast.Inspect(f, func(n ast.Node) bool {
		st, ok := n.(*ast.StructType)
		if !ok {
			return true
		}
		for _, fl := range st.Fields.List {
			if !isCtx(fl.Type) {
				continue
			}
			fieldNames := []string{"Context"}
			if len(fl.Names) > 0 {
				fieldNames = fieldNames[:0]
				for _, id := range fl.Names {
					fieldNames = append(fieldNames, id.Name)
				}
			}
			for _, fn := range fieldNames {
				out = append(out, finding{
					pos: fset.Position(fl.Pos()).String(),
					key: path + " " + owner(st) + "." + fn,
				})
			}
		}
		return true
	})
	return out, nil
}
