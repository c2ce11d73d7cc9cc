package auth

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/sandboxio/sandboxio/internal/portauth"
)

// A layout older than the port link key gets one (auth init --if-missing);
// one that has it keeps it.
func TestEnsurePortLinkKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "auth")
	l, _, err := Init(dir)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := os.ReadFile(l.PortLinkKeyFile())
	if err != nil {
		t.Fatal(err)
	}
	if written, err := EnsurePortLinkKey(dir); err != nil || written {
		t.Fatalf("a layout with a key: written %v, %v", written, err)
	}
	if now, _ := os.ReadFile(l.PortLinkKeyFile()); !bytes.Equal(now, kept) {
		t.Fatal("the key was replaced")
	}
	if err := os.Remove(l.PortLinkKeyFile()); err != nil {
		t.Fatal(err)
	}
	if written, err := EnsurePortLinkKey(dir); err != nil || !written {
		t.Fatalf("a layout without a key: written %v, %v", written, err)
	}
	if k, err := portauth.LoadKey(l.PortLinkKeyFile()); err != nil || len(k) != portauth.KeySize {
		t.Fatalf("the added key: %d bytes, %v", len(k), err)
	}
	if st, _ := os.Stat(l.PortLinkKeyFile()); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
}
