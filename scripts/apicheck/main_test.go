package main

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"slices"
	"testing"
)

// check type-checks src as package path, importing the packages in deps.
func check(t *testing.T, path, src string, deps map[string]*types.Package) *types.Package {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "x.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	conf := types.Config{Importer: importerFunc(func(p string) (*types.Package, error) {
		if d, ok := deps[p]; ok {
			return d, nil
		}
		return importer.Default().Import(p)
	})}
	pkg, err := conf.Check(path, fset, []*ast.File{f}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return pkg
}

type importerFunc func(string) (*types.Package, error)

func (f importerFunc) Import(p string) (*types.Package, error) { return f(p) }

func TestLeaks(t *testing.T) {
	in := check(t, module+"/internal/in", "package in\ntype Cfg struct{ N int }\ntype Conn struct{}\n", nil)
	pub := check(t, module+"/pkg/pub", "package pub\ntype Cfg struct{ N int }\n", nil)
	deps := map[string]*types.Package{in.Path(): in, pub.Path(): pub}
	for _, tc := range []struct {
		name, src string
		want      []string
	}{
		{"field", "type Config struct{ Bus in.Cfg }", []string{"Config.Bus names internal/in.Cfg"}},
		{"unexported field", "type Config struct{ bus in.Cfg }", nil},
		{"func result", "func Dial() *in.Conn { return nil }", []string{"Dial names internal/in.Conn"}},
		{"method param", "type W struct{}\nfunc (W) Use(m map[string][]in.Cfg) {}", []string{"W.Use names internal/in.Cfg"}},
		{"unexported method", "type W struct{}\nfunc (W) use(in.Cfg) {}", nil},
		{"interface method", "type B interface{ Conn() in.Conn }", []string{"B.Conn names internal/in.Conn"}},
		{"alias", "type Cfg = in.Cfg", []string{"Cfg names internal/in.Cfg"}},
		{"var", "var Default in.Cfg", []string{"Default names internal/in.Cfg"}},
		{"through an unexported type", "type hidden struct{ C in.Cfg }\nfunc New() hidden { return hidden{} }", []string{"New.C names internal/in.Cfg"}},
		{"embedded unexported", "type inner struct{ C in.Cfg }\ntype Outer struct{ inner }", []string{"Outer.inner.C names internal/in.Cfg"}},
		{"public package", "type Config struct{ Bus pub.Cfg }", nil},
		{"unexported func", "func dial() *in.Conn { return nil }", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := "package p\nimport (\n\tin \"" + in.Path() + "\"\n\tpub \"" + pub.Path() + "\"\n)\nvar _ in.Cfg\nvar _ pub.Cfg\n" + tc.src + "\n"
			pkg := check(t, module+"/pkg/p", src, deps)
			var got []string
			for _, l := range Leaks(pkg) {
				got = append(got, l[len(pkg.Path())+1:])
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPrivate(t *testing.T) {
	for path, want := range map[string]bool{
		module + "/internal/bus":                      true,
		module + "/services/router":                   true,
		module + "/services/e2b-worker/internal/envd": true,
		module + "/pkg/bus":                           false,
		module + "/pkg/worker":                        false,
		"github.com/nats-io/nats.go":                  false,
		"github.com/other/module/internal/x":          false,
		module + "/pkg/worker/internalish":            false,
	} {
		if got := private(path); got != want {
			t.Errorf("private(%s) = %v, want %v", path, got, want)
		}
	}
}
