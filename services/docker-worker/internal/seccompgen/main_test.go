package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const committed = "../../seccomp.json"

// TestProfileDenies: in the committed profile no allow rule names a denied
// call, and one errno rule names them all.
func TestProfileDenies(t *testing.T) {
	raw, err := os.ReadFile(committed)
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		DefaultAction string `json:"defaultAction"`
		Syscalls      []struct {
			Names  []string `json:"names"`
			Action string   `json:"action"`
			Args   []struct {
				Index uint   `json:"index"`
				Value uint64 `json:"value"`
				Op    string `json:"op"`
			} `json:"args"`
		} `json:"syscalls"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	if p.DefaultAction != "SCMP_ACT_ERRNO" {
		t.Errorf("default action %s", p.DefaultAction)
	}
	denied := map[string]bool{}
	for _, r := range p.Syscalls {
		for _, n := range r.Names {
			if r.Action == "SCMP_ACT_ALLOW" && slices.Contains(Denied, n) {
				t.Errorf("%s is allowed by a rule", n)
			}
			if r.Action == "SCMP_ACT_ERRNO" {
				denied[n] = true
			}
			if n == "socket" && r.Action == "SCMP_ACT_ALLOW" &&
				(len(r.Args) != 1 || r.Args[0].Index != 0 || r.Args[0].Value != 40 || r.Args[0].Op != "SCMP_CMP_NE") {
				t.Errorf("socket allowed without the AF_VSOCK exclusion: %+v", r.Args)
			}
		}
	}
	for _, n := range Denied {
		if !denied[n] {
			t.Errorf("%s has no deny rule", n)
		}
	}
}

// TestProfileUpToDate regenerates the profile from moby's default.json
// when the module is in the module cache, and compares.
func TestProfileUpToDate(t *testing.T) {
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Skip("no go env")
	}
	src := filepath.Join(strings.TrimSpace(string(out)), "github.com", "moby", "profiles", "seccomp@v0.1.0", "default.json")
	raw, err := os.ReadFile(src)
	if err != nil {
		t.Skipf("moby's default profile is not in the module cache (go mod download github.com/moby/profiles/seccomp@v0.1.0): %v", err)
	}
	got, err := generate(raw)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(committed)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("services/docker-worker/seccomp.json is not what seccompgen makes from moby's default.json: regenerate it")
	}
}
