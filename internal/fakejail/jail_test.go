package fakejail

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestJail(t *testing.T) {
	m := Detect()
	t.Logf("jail mode: %s", m)
	root := t.TempDir()
	if err := PrepareRoot(root, "work"); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "work", "marker"), []byte("inside"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := Command(m, root, "/work", nil, []string{"sh", "-c", `cat marker; echo; echo made > /tmp/out; ls /work`})
	cmd.Env = []string{"PATH=" + DefaultPath}
	out, err := cmd.CombinedOutput()
	if m == None {
		// Host paths: only the working directory is mapped.
		if err != nil || !strings.HasPrefix(string(out), "inside\n") {
			t.Fatalf("none mode: %q, %v", out, err)
		}
		return
	}
	if err != nil || string(out) != "inside\nmarker\n" {
		t.Fatalf("jailed: %q, %v", out, err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "tmp", "out")); err != nil || string(b) != "made\n" {
		t.Fatalf("a file written in the jail: %q, %v", b, err)
	}
	// The system directories are read-only inside, and nothing stays
	// mounted outside.
	cmd = Command(m, root, "/", nil, []string{"sh", "-c", "touch /usr/fakejail-probe"})
	cmd.Env = []string{"PATH=" + DefaultPath}
	if err := cmd.Run(); err == nil {
		_ = os.Remove("/usr/fakejail-probe")
		t.Fatal("wrote into the host's /usr from a jail")
	}
	if entries, _ := os.ReadDir(filepath.Join(root, "usr")); len(entries) != 0 {
		t.Fatalf("the jail's /usr mount point shows %d entries outside the jail", len(entries))
	}
}
