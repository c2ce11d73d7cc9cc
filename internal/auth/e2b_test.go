package auth

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// A layout older than the e2b role gets its creds (auth init --if-missing);
// one that has them keeps them.
func TestEnsureE2BCreds(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "auth")
	l, _, err := Init(dir)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := os.ReadFile(l.Creds(RoleE2B))
	if err != nil {
		t.Fatalf("Init wrote no e2b creds: %v", err)
	}
	if written, err := EnsureE2BCreds(dir); err != nil || written {
		t.Fatalf("a layout with the creds: written %v, %v", written, err)
	}
	if now, _ := os.ReadFile(l.Creds(RoleE2B)); !bytes.Equal(now, kept) {
		t.Fatal("the creds were replaced")
	}
	if err := os.Remove(l.Creds(RoleE2B)); err != nil {
		t.Fatal(err)
	}
	if written, err := EnsureE2BCreds(dir); err != nil || !written {
		t.Fatalf("a layout without the creds: written %v, %v", written, err)
	}
	if u, err := readCredsUser(l.Creds(RoleE2B)); err != nil || u == "" {
		t.Fatalf("the added creds: %q, %v", u, err)
	}
	if st, _ := os.Stat(l.Creds(RoleE2B)); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
}
