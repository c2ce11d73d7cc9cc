// Command apicheck fails when an exported identifier of a package under
// pkg/ names a type of internal/ or services/ in its API: a field, a
// parameter or result, a method, an embedded type or a type argument that a
// program outside this module could not name. check-deps.sh (make check)
// runs it on every package under pkg/ but the ones it names as exempt.
//
//	go run ./scripts/apicheck [-exempt importpath,...] ./pkg/...
package main

import (
	"flag"
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
)

const module = "github.com/sandboxio/sandboxio"

func main() {
	exempt := flag.String("exempt", "", "comma-separated import paths not checked")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: apicheck [-exempt paths] packages")
		os.Exit(2)
	}
	skip := map[string]bool{}
	for _, p := range strings.Split(*exempt, ",") {
		if p != "" {
			skip[p] = true
		}
	}
	roots, exports, err := list(flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "apicheck:", err)
		os.Exit(2)
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok || f == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	var bad []string
	for _, path := range roots {
		if skip[path] {
			continue
		}
		pkg, err := imp.Import(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "apicheck:", err)
			os.Exit(2)
		}
		bad = append(bad, Leaks(pkg)...)
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		for _, b := range bad {
			fmt.Println(b)
		}
		fmt.Println("pkg/ is the public API: its exported identifiers name only types that a program outside the module can name")
		os.Exit(1)
	}
	fmt.Printf("the API of %d packages names no internal type\n", len(roots)-len(skip))
}

// list returns the import paths of the patterns (no test packages) and
// the export data file of each of them and of their dependencies.
func list(patterns []string) ([]string, map[string]string, error) {
	out, err := exec.Command("go", append([]string{"list", "-f", "{{.ImportPath}}"}, patterns...)...).Output()
	if err != nil {
		return nil, nil, fmt.Errorf("go list: %w", err)
	}
	roots := strings.Fields(string(out))
	out, err = exec.Command("go", append([]string{"list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}"}, roots...)...).Output()
	if err != nil {
		return nil, nil, fmt.Errorf("go list -export: %w", err)
	}
	exports := map[string]string{}
	for _, l := range strings.Split(string(out), "\n") {
		if p, f, ok := strings.Cut(l, "\t"); ok {
			exports[p] = f
		}
	}
	return roots, exports, nil
}

// private reports whether a package path is one that a program outside
// the module cannot import.
func private(path string) bool {
	rest, ok := strings.CutPrefix(path, module+"/")
	if !ok {
		return false
	}
	return strings.HasPrefix(rest, "internal/") || strings.HasPrefix(rest, "services/") ||
		strings.Contains(rest, "/internal/") || strings.HasSuffix(rest, "/internal")
}

// Leaks lists where pkg's exported API names a private type.
func Leaks(pkg *types.Package) []string {
	w := &walker{pkg: pkg, seen: map[types.Type]bool{}}
	sc := pkg.Scope()
	for _, name := range sc.Names() {
		obj := sc.Lookup(name)
		if !obj.Exported() {
			continue
		}
		where := pkg.Path() + "." + name
		switch o := obj.(type) {
		case *types.TypeName:
			w.named(where, o.Type())
		default:
			w.typ(where, obj.Type())
		}
	}
	return w.bad
}

type walker struct {
	pkg  *types.Package
	seen map[types.Type]bool
	bad  []string
}

// named checks a type declared by the package: its underlying type and
// its exported methods.
func (w *walker) named(where string, t types.Type) {
	if w.seen[t] {
		return
	}
	w.seen[t] = true
	if a, ok := t.(*types.Alias); ok {
		w.typ(where, a.Rhs())
		return
	}
	n, ok := t.(*types.Named)
	if !ok {
		w.typ(where, t)
		return
	}
	w.typ(where, n.Underlying())
	if types.IsInterface(n) {
		return // its methods are its underlying type's
	}
	ms := types.NewMethodSet(types.NewPointer(n)) // the value's methods too
	for i := range ms.Len() {
		m := ms.At(i).Obj()
		if m.Exported() && m.Pkg() == w.pkg {
			w.typ(where+"."+m.Name(), m.Type())
		}
	}
}

func (w *walker) typ(where string, t types.Type) {
	switch t := t.(type) {
	case *types.Alias:
		w.typ(where, t.Rhs())
	case *types.Named:
		obj := t.Obj()
		if obj.Pkg() != nil && private(obj.Pkg().Path()) {
			w.bad = append(w.bad, fmt.Sprintf("%s names %s.%s", where, strings.TrimPrefix(obj.Pkg().Path(), module+"/"), obj.Name()))
			return
		}
		if args := t.TypeArgs(); args != nil {
			for i := range args.Len() {
				w.typ(where, args.At(i))
			}
		}
		// The package's own unexported types are part of its API where an
		// exported identifier reaches them; other packages' types are
		// checked where they are declared.
		if obj.Pkg() == w.pkg && !obj.Exported() {
			w.named(where, t)
		}
	case *types.Pointer:
		w.typ(where, t.Elem())
	case *types.Slice:
		w.typ(where, t.Elem())
	case *types.Array:
		w.typ(where, t.Elem())
	case *types.Map:
		w.typ(where, t.Key())
		w.typ(where, t.Elem())
	case *types.Chan:
		w.typ(where, t.Elem())
	case *types.Signature:
		for _, tup := range []*types.Tuple{t.Params(), t.Results()} {
			for i := range tup.Len() {
				w.typ(where, tup.At(i).Type())
			}
		}
	case *types.Struct:
		for i := range t.NumFields() {
			f := t.Field(i)
			if f.Exported() || f.Embedded() {
				w.typ(where+"."+f.Name(), f.Type())
			}
		}
	case *types.Interface:
		for i := range t.NumMethods() {
			m := t.Method(i)
			if m.Exported() {
				w.typ(where+"."+m.Name(), m.Type())
			}
		}
		for i := range t.NumEmbeddeds() {
			w.typ(where, t.EmbeddedType(i))
		}
	}
}
