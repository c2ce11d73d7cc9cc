package cli

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// cliIn is cli with stdin (a pipe, as a shell gives it).
func cliIn(t *testing.T, url string, stdin []byte, args ...string) result {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = w.Write(stdin); _ = w.Close() }()
	defer r.Close()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code := runWithStdin(ctx, "sandboxio", append([]string{"--nats", url, "--log-level", "error"}, args...), r, &out, &errb)
	return result{code, out.String(), errb.String()}
}

// created runs `create -q` with args and returns the id.
func created(t *testing.T, url string, args ...string) string {
	t.Helper()
	r := cli(t, url, append([]string{"create", "--class", "fake", "-q"}, args...)...)
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || !events.ValidID(id) {
		t.Fatalf("create -q %v: %+v", args, r)
	}
	return id
}

var processLine = regexp.MustCompile(`process ([a-z0-9_-]+) in sandbox ([a-z0-9_-]+)`)

// withoutProcessLine is stderr without the line that names the process
// (exec and run print it first).
func withoutProcessLine(stderr string) string {
	return regexp.MustCompile(`(?m)^sandboxio: process [a-z0-9_-]+ in sandbox [a-z0-9_-]+\n`).ReplaceAllString(stderr, "")
}

// TestCLISurface drives each item of the CLI's user-facing behaviour
// against `sandboxio dev` (issue 11), one subtest per item.
func TestCLISurface(t *testing.T) {
	dev := startDev(t, "--backends", "fake,nope", "--log-level", "info")
	url := dev.URL
	dev.waitLive(t, "fake", "")

	t.Run("durations accept 90, 90s and 5m", func(t *testing.T) {
		for _, tc := range []struct {
			flag, value string
			want        time.Duration
		}{{"--lifetime", "90", 90 * time.Second}, {"--lifetime", "90s", 90 * time.Second}, {"--lifetime", "5m", 5 * time.Minute}, {"--timeout", "2m", 2 * time.Minute}} {
			r := cli(t, url, "create", "--class", "fake", tc.flag, tc.value)
			var c events.CreateReply
			if r.code != 0 || json.Unmarshal([]byte(r.stdout), &c) != nil {
				t.Fatalf("create %s %s: %+v", tc.flag, tc.value, r)
			}
			if left := time.Until(c.Deadline); left > tc.want || left < tc.want-30*time.Second {
				t.Errorf("create %s %s: %v left", tc.flag, tc.value, left)
			}
			cli(t, url, "kill", c.SandboxID)
		}
		id := created(t, url)
		defer cli(t, url, "kill", id)
		for _, d := range []string{"90", "90s", "5m"} {
			if r := cli(t, url, "set-timeout", id, d); r.code != 0 || !strings.Contains(r.stdout, "deadline") {
				t.Errorf("set-timeout %s: %+v", d, r)
			}
			if r := cli(t, url, "exec", "--exec-timeout", d, id, "echo", "ok"); r.code != 0 || r.stdout != "ok\n" {
				t.Errorf("exec --exec-timeout %s: %+v", d, r)
			}
		}
		if r := cli(t, url, "create", "--class", "fake", "--lifetime", "soon"); r.code != exitUsage || !strings.Contains(r.stderr, "want seconds (90) or a number with a unit") || strings.Contains(r.stderr, "strconv") {
			t.Errorf("create --lifetime soon: %+v", r)
		}
	})

	t.Run("-q and --format on listing commands", func(t *testing.T) {
		id := created(t, url, "--metadata", "fmt=yes")
		defer cli(t, url, "kill", id)
		if r := cli(t, url, "ls", "-q", "--metadata", "fmt=yes"); r.code != 0 || strings.TrimSpace(r.stdout) != id {
			t.Errorf("ls -q: %+v", r)
		}
		var list []events.Sandbox
		if r := cli(t, url, "ls", "--format", "json", "--metadata", "fmt=yes"); r.code != 0 || json.Unmarshal([]byte(r.stdout), &list) != nil || len(list) != 1 {
			t.Errorf("ls --format json: %+v", r)
		}
		if r := cli(t, url, "ls", "--format", "{{.SandboxID}} {{.State}}", "--metadata", "fmt=yes"); r.code != 0 || r.stdout != id+" running\n" {
			t.Errorf("ls --format template: %+v", r)
		}
		if r := cli(t, url, "ls", "--format", "{{.Nope"); r.code != exitUsage {
			t.Errorf("ls with a broken template: %+v", r)
		}
		if r := cli(t, url, "get", "--format", "{{.Class}}", id); r.code != 0 || r.stdout != "fake\n" {
			t.Errorf("get --format: %+v", r)
		}
		if r := cli(t, url, "backends", "-q"); r.code != 0 || !strings.Contains(r.stdout, "fake\n") {
			t.Errorf("backends -q: %+v", r)
		}
		r := cli(t, url, "backends")
		if r.code != 0 || !strings.Contains(r.stdout, "BACKEND") || !strings.Contains(r.stdout, "CLASS") {
			t.Errorf("backends table: %+v", r)
		}
		if r := cli(t, url, "quota", "--format", "{{.Tenant}}"); r.code != 0 || r.stdout != events.TenantOpen+"\n" {
			t.Errorf("quota --format: %+v", r)
		}
	})

	t.Run("backends shows no zero started_at", func(t *testing.T) {
		for _, args := range [][]string{{"backends"}, {"backends", "--format", "json"}} {
			if r := cli(t, url, args...); r.code != 0 || strings.Contains(r.stdout, "0001-01-01") {
				t.Errorf("%v shows a zero time: %s", args, r.stdout)
			}
		}
	})

	t.Run("process ids on stderr, attach without a process id", func(t *testing.T) {
		id := created(t, url)
		defer cli(t, url, "kill", id)
		r := cli(t, url, "exec", id, "echo", "first")
		m := processLine.FindStringSubmatch(r.stderr)
		if r.code != 0 || m == nil || m[2] != id {
			t.Fatalf("exec does not name its process on stderr: %+v", r)
		}
		if r := cli(t, url, "attach", id, m[1]); r.code != 0 || r.stdout != "first\n" {
			t.Errorf("attach with the printed id: %+v", r)
		}
		cli(t, url, "exec", id, "echo", "latest")
		if r := cli(t, url, "attach", id); r.code != 0 || r.stdout != "latest\n" {
			t.Errorf("attach to the latest: %+v", r)
		}
		if r := cli(t, url, "run", "--class", "fake", "echo", "x"); r.code != 0 || processLine.FindStringSubmatch(r.stderr) == nil {
			t.Errorf("run does not name its process: %+v", r)
		}
	})

	t.Run("arguments after the command as in docker", func(t *testing.T) {
		if r := cli(t, url, "run", "--class", "fake", "echo", "-c", "print(1)"); r.code != 0 || r.stdout != "-c print(1)\n" {
			t.Errorf("run without --: %+v", r)
		}
		if r := cli(t, url, "run", "--class", "fake", "--", "echo", "--lifetime"); r.code != 0 || r.stdout != "--lifetime\n" {
			t.Errorf("run with --: %+v", r)
		}
		id := created(t, url)
		defer cli(t, url, "kill", id)
		if r := cli(t, url, "exec", id, "echo", "-e", "x"); r.code != 0 || r.stdout != "-e x\n" {
			t.Errorf("exec without --: %+v", r)
		}
	})

	t.Run("kill goes on past a missing id and exits non-zero", func(t *testing.T) {
		a, b := created(t, url), created(t, url)
		r := cli(t, url, "kill", a, "nope", b)
		if r.code == 0 || !strings.Contains(r.stderr, "kill nope") || !strings.Contains(r.stdout, a+" gone") || !strings.Contains(r.stdout, b+" gone") {
			t.Errorf("kill A nope B: %+v", r)
		}
	})

	t.Run("exit codes", func(t *testing.T) {
		id := created(t, url)
		defer cli(t, url, "kill", id)
		for _, tc := range []struct {
			name string
			args []string
			want int
			says string
		}{
			{"timeout", []string{"exec", "--exec-timeout", "200ms", id, "sleep", "60000"}, exitTimeout, "SBX_E1302"},
			{"buffered timeout", []string{"exec", "--buffered", "--exec-timeout", "200ms", id, "sleep", "60000"}, exitTimeout, "SBX_E1302"},
			{"not found", []string{"exec", id, "no-such-command"}, exitNotFound, "SBX_E1303"},
			{"sandboxio error", []string{"exec", "nosuchsandbox", "echo"}, exitSBXError, "SBX_E"},
			{"usage", []string{"exec", id}, exitUsage, "requires at least 2 arg"},
			{"the command's own", []string{"exec", id, "exit", "7"}, 7, ""},
		} {
			if r := cli(t, url, tc.args...); r.code != tc.want || !strings.Contains(r.stderr, tc.says) {
				t.Errorf("%s: %v: %+v, want exit %d", tc.name, tc.args, r, tc.want)
			}
		}
		if r := cli(t, "nats://127.0.0.1:1", "ls"); r.code != exitUnreachable || !strings.Contains(r.stderr, "cannot reach sandboxio") {
			t.Errorf("unreachable server: %+v", r)
		}
	})

	t.Run("-i forwards piped stdin; without it a warning", func(t *testing.T) {
		if r := cliIn(t, url, []byte("piped data\n"), "run", "-i", "--class", "fake", "cat"); r.code != 0 || r.stdout != "piped data\n" {
			t.Errorf("run -i cat: %+v", r)
		}
		r := cliIn(t, url, []byte("lost\n"), "run", "--class", "fake", "echo", "x")
		if r.code != 0 || r.stdout != "x\n" || !strings.Contains(r.stderr, "use -i") {
			t.Errorf("piped stdin without -i: %+v", r)
		}
		id := created(t, url)
		defer cli(t, url, "kill", id)
		if r := cliIn(t, url, []byte("to exec\n"), "exec", "-i", id, "cat"); r.code != 0 || r.stdout != "to exec\n" {
			t.Errorf("exec -i cat: %+v", r)
		}
		if r := cli(t, url, "run", "--class", "fake", "echo", "y"); strings.Contains(r.stderr, "use -i") {
			t.Errorf("a warning without piped stdin: %+v", r)
		}
	})

	t.Run("cp as docker cp", func(t *testing.T) { testCp(t, url) })

	t.Run("run-code from a file and from stdin", func(t *testing.T) {
		id := created(t, url)
		defer cli(t, url, "kill", id)
		file := filepath.Join(t.TempDir(), "prog.py")
		if err := os.WriteFile(file, []byte("print(6*7)"), 0o644); err != nil {
			t.Fatal(err)
		}
		// The fake interpreter echoes its code and returns it as the result.
		if r := cli(t, url, "run-code", id, file); r.code != 0 || !strings.Contains(r.stdout, "print(6*7)") {
			t.Errorf("run-code FILE: %+v", r)
		}
		if r := cliIn(t, url, []byte("from stdin"), "run-code", id, "-"); r.code != 0 || !strings.Contains(r.stdout, "from stdin") {
			t.Errorf("run-code -: %+v", r)
		}
		if r := cliIn(t, url, []byte("raise"), "run-code", id); r.code != 1 || !strings.Contains(r.stderr, "RuntimeError: raised as asked") {
			t.Errorf("run-code of code that raises: %+v", r)
		}
		if r := cli(t, url, "run-code", "--context", "c1", id, file); r.code != exitSBXError || !strings.Contains(r.stderr, "SBX_E1105") {
			t.Errorf("run-code --context on a backend without contexts: %+v", r)
		}
	})

	t.Run("help texts", func(t *testing.T) {
		for _, args := range [][]string{{"run", "--help"}, {"create", "--help"}, {"exec", "--help"}, {"e2b-worker", "--help"}, {"--help"}, {"mcp", "--help"}} {
			r := cli(t, url, args...)
			for _, bad := range []string{"mandatory, default 300", "(default 300) (default 300)", "Run a e2b", "a e2b"} {
				if strings.Contains(r.stdout, bad) {
					t.Errorf("%v says %q:\n%s", args, bad, r.stdout)
				}
			}
		}
		if r := cli(t, url, "run", "--help"); !strings.Contains(r.stdout, "--lifetime duration") || !strings.Contains(r.stdout, "--exec-timeout duration") {
			t.Errorf("run --help lacks the two timeouts:\n%s", r.stdout)
		}
	})

	t.Run("dev logs only the backends that started", func(t *testing.T) {
		log := dev.Err.String()
		if !strings.Contains(log, "backends=[fake]") || strings.Contains(log, "backends=[fake nope]") {
			t.Errorf("dev's start-up line:\n%s", log)
		}
	})
}

// testCp copies files, directories and tar streams both ways.
func testCp(t *testing.T, url string) {
	id := created(t, url)
	defer cli(t, url, "kill", id)
	local := t.TempDir()
	must := func(r result, what string) {
		t.Helper()
		if r.code != 0 {
			t.Fatalf("%s: %+v", what, r)
		}
	}
	write := func(p, s string) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Errorf("read %s: %v", p, err)
		}
		return string(b)
	}
	// A file in, onto a new path and into an existing directory.
	write(filepath.Join(local, "a.txt"), "alpha")
	must(cli(t, url, "cp", filepath.Join(local, "a.txt"), id+":/work/renamed.txt"), "cp file in")
	must(cli(t, url, "cp", filepath.Join(local, "a.txt"), id+":/work"), "cp file into a directory")
	// A directory in: onto a missing path it becomes it, onto an existing
	// directory it goes inside.
	write(filepath.Join(local, "src", "one.txt"), "one")
	write(filepath.Join(local, "src", "sub", "two.txt"), "two")
	must(cli(t, url, "cp", filepath.Join(local, "src"), id+":/work/copy"), "cp dir onto a new path")
	must(cli(t, url, "cp", filepath.Join(local, "src"), id+":/work"), "cp dir into a directory")
	for p, want := range map[string]string{"/work/renamed.txt": "alpha", "/work/a.txt": "alpha", "/work/copy/one.txt": "one",
		"/work/copy/sub/two.txt": "two", "/work/src/sub/two.txt": "two"} {
		out := filepath.Join(t.TempDir(), "f")
		if r := cli(t, url, "cp", id+":"+p, out); r.code != 0 || read(out) != want {
			t.Errorf("%s in the sandbox: %+v %q", p, r, read(out))
		}
	}
	// A directory out, onto a new path and into an existing directory.
	must(cli(t, url, "cp", id+":/work/copy", filepath.Join(local, "out")), "cp dir out onto a new path")
	if read(filepath.Join(local, "out", "sub", "two.txt")) != "two" {
		t.Error("directory out: sub/two.txt missing")
	}
	must(cli(t, url, "cp", id+":/work/copy", filepath.Join(local, "out")), "cp dir out into a directory")
	if read(filepath.Join(local, "out", "copy", "one.txt")) != "one" {
		t.Error("directory out into a directory: copy/one.txt missing")
	}
	// Tar streams: - in unpacks into a directory, - out packs a directory.
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	for name, body := range map[string]string{"t/x.txt": "ex", "../../escape.txt": "no way out"} {
		_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o600, Size: int64(len(body))})
		_, _ = tw.Write([]byte(body))
	}
	_ = tw.Close()
	must(cliIn(t, url, tb.Bytes(), "cp", "-", id+":/work/tarred"), "cp - in")
	r := cli(t, url, "cp", id+":/work/tarred", "-")
	must(r, "cp - out")
	got := map[string]string{}
	tr := tar.NewReader(strings.NewReader(r.stdout))
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		b, _ := io.ReadAll(tr)
		got[h.Name] = string(b)
	}
	if got["tarred/t/x.txt"] != "ex" || got["tarred/escape.txt"] != "no way out" {
		t.Errorf("tar round trip (an escaping name lands inside): %v", got)
	}
	if r := cli(t, url, "cp", id+":/work/nope.txt", filepath.Join(local, "x")); r.code != exitSBXError || !strings.Contains(r.stderr, "SBX_E1207") {
		t.Errorf("cp of a missing file: %+v", r)
	}
	if r := cli(t, url, "cp", "a", "b"); r.code != exitUsage {
		t.Errorf("cp with no sandbox side: %+v", r)
	}
}

// TestTenantAddLifetimeDurations: --max-lifetime takes seconds as well as
// a duration, and a wrong one is a usage error.
func TestTenantAddLifetimeDurations(t *testing.T) {
	dir := t.TempDir()
	run := func(args ...string) result {
		var out, errb bytes.Buffer
		code := runWithStdin(context.Background(), "sandboxio", args, nil, &out, &errb)
		return result{code, out.String(), errb.String()}
	}
	if r := run("auth", "init", "--dir", dir); r.code != 0 {
		t.Fatalf("auth init: %+v", r)
	}
	for _, tc := range []struct {
		name, value string
		want        int
	}{{"seconds", "3600", 0}, {"duration", "50h", 0}, {"unlimited", "-1", 0}, {"nonsense", "soon", exitUsage}} {
		if r := run("tenant", "add", "t-"+tc.name, "--dir", dir, "--max-lifetime", tc.value); r.code != tc.want {
			t.Errorf("tenant add --max-lifetime %s: %+v, want exit %d", tc.value, r, tc.want)
		}
	}
}
