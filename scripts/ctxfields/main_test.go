package main

import (
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestCtxFields(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      []string
	}{
		{"named", "package p\nimport \"context\"\ntype S struct{ a int; ctx context.Context }\n", []string{"S.ctx"}},
		{"embedded", "package p\nimport \"context\"\ntype S struct{ context.Context }\n", []string{"S.Context"}},
		{"two names", "package p\nimport \"context\"\ntype S struct{ a, b context.Context }\n", []string{"S.a", "S.b"}},
		{"renamed import", "package p\nimport stdctx \"context\"\ntype S struct{ c stdctx.Context }\n", []string{"S.c"}},
		{"pointer", "package p\nimport \"context\"\ntype S struct{ c *context.Context }\n", []string{"S.c"}},
		{"literal in a func", "package p\nimport \"context\"\nfunc f() { _ = struct{ c context.Context }{} }\n", []string{"struct{}.c"}},
		{"a func field is not one", "package p\nimport \"context\"\ntype S struct{ f func(context.Context) }\n", nil},
		{"cancel func is not one", "package p\nimport \"context\"\ntype S struct{ cancel context.CancelFunc }\n", nil},
		{"another package's Context", "package p\nimport \"example.com/other/context\"\ntype S struct{ c context.Context }\n", nil},
		{"no import", "package p\ntype S struct{ c int }\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "x.go")
			if err := os.WriteFile(p, []byte(tc.src), 0o600); err != nil {
				t.Fatal(err)
			}
			found, err := ctxFields(token.NewFileSet(), p)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range found {
				got = append(got, f.key[len(p)+1:])
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
