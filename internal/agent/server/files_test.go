package server

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxio/sandboxio/internal/agent/proto"
)

// Both resolvers, openat2's and the O_NOFOLLOW walk used where openat2 is
// missing (old kernels, gVisor), give the same answers.
func TestFilesBothResolvers(t *testing.T) {
	for _, walk := range []bool{false, true} {
		name := "openat2"
		if walk {
			name = "walk"
		}
		t.Run(name, func(t *testing.T) {
			f, err := NewFiles()
			if err != nil {
				t.Fatal(err)
			}
			f.r.noOpen2 = walk
			dir := t.TempDir()
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			must(os.MkdirAll(filepath.Join(dir, "real/sub"), 0o755))
			must(os.WriteFile(filepath.Join(dir, "real/sub/file"), []byte("content"), 0o644))
			must(os.WriteFile(filepath.Join(dir, "victim"), []byte("original"), 0o644))
			must(os.Symlink(filepath.Join(dir, "real"), filepath.Join(dir, "abs")))    // absolute
			must(os.Symlink("real/sub", filepath.Join(dir, "rel")))                    // relative
			must(os.Symlink("../victim", filepath.Join(dir, "real/up")))               // .. inside
			must(os.Symlink(filepath.Join(dir, "victim"), filepath.Join(dir, "tool"))) // the deputy
			must(os.Symlink("/proc/self", filepath.Join(dir, "p")))
			must(os.Symlink("loop", filepath.Join(dir, "loop")))

			read := func(p string) (string, *proto.Error) {
				var b bytes.Buffer
				_, e := f.Read(p, 0, &b)
				return b.String(), e
			}
			for _, p := range []string{"abs/sub/file", "rel/file", "real/../real/sub/file"} {
				if got, e := read(filepath.Join(dir, p)); e != nil || got != "content" {
					t.Errorf("read %s: %q %v", p, got, e)
				}
			}
			if got, e := read(filepath.Join(dir, "real/up")); e != nil || got != "original" {
				t.Errorf("read through a .. link: %q %v", got, e)
			}
			kinds := []struct {
				p    string
				kind string
			}{
				{filepath.Join(dir, "p/environ"), proto.ErrInvalid}, // a magic link, or /proc itself
				{filepath.Join(dir, "loop"), proto.ErrInvalid},
				{filepath.Join(dir, "nope"), proto.ErrNotFound},
				{filepath.Join(dir, "real"), proto.ErrIsDir},
				{"/proc/self/status", proto.ErrForbidden},
			}
			for _, k := range kinds {
				if _, e := read(k.p); e == nil || e.Kind != k.kind && e.Kind != proto.ErrForbidden {
					t.Errorf("read %s: %v, want %s", k.p, e, k.kind)
				}
			}
			if _, e := f.Write(filepath.Join(dir, "tool"), 0o755, false, strings.NewReader("x"), 1); e == nil || e.Kind != proto.ErrSymlink {
				t.Errorf("write through the deputy link: %v", e)
			}
			if b, _ := os.ReadFile(filepath.Join(dir, "victim")); string(b) != "original" {
				t.Fatalf("victim written: %q", b)
			}
			if _, e := f.Write(filepath.Join(dir, "abs/new/deep/f"), 0o600, true, strings.NewReader("hi"), 2); e != nil {
				t.Errorf("write with parents through a dir link: %v", e)
			}
			if b, err := os.ReadFile(filepath.Join(dir, "real/new/deep/f")); err != nil || string(b) != "hi" {
				t.Errorf("landed: %q %v", b, err)
			}
			if e := f.Remove(filepath.Join(dir, "tool")); e != nil {
				t.Errorf("remove the link: %v", e)
			}
			if _, err := os.Stat(filepath.Join(dir, "victim")); err != nil {
				t.Errorf("remove followed the link: %v", err)
			}
			list, self, _, e := f.List(filepath.Join(dir, "real/sub"))
			if e != nil || self != nil || len(list) != 1 || list[0].Name != "file" {
				t.Errorf("list: %+v %+v %v", list, self, e)
			}
			if _, self, _, e = f.List(filepath.Join(dir, "real/sub/file")); e != nil || self == nil || self.Name != "file" {
				t.Errorf("list of a file: %+v %v", self, e)
			}
		})
	}
}
