//go:build integration

package dockerworker

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/internal/agent/proto"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

// TestNoAgentWriteRacesSymlinkSwap (issue 22 E.26): without the agent, the
// sandbox's own code swaps a directory and a file it owns for symlinks to a
// root-owned directory while the API writes through them, many times. The
// write must never modify a file the sandbox user could not modify itself:
// a check followed by a write with the daemon's rights loses this race.
func TestNoAgentWriteRacesSymlinkSwap(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{Agent: AgentOff})
	id := mustCreate(t, b)
	sb := b.lookupCached(id)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	asRoot := func(script string) string {
		t.Helper()
		var out, errb strings.Builder
		st, err := b.execIn(ctx, sb, worker.Process{Cmd: []string{"sh", "-c", script}, Stdout: &out, Stderr: &errb}, "0:0")
		if err != nil || st.Code != 0 {
			t.Fatalf("as root %q: %v %+v %s", script, err, st, errb.String())
		}
		return out.String()
	}
	victim := func() string {
		return asRoot(`cd /tmp/victim && ls -a && stat -c '%n %u %g %a %s %Y' . * && md5sum f g`)
	}
	asRoot(`mkdir -m 755 /tmp/victim && echo original > /tmp/victim/f && echo original > /tmp/victim/g && chmod 644 /tmp/victim/f /tmp/victim/g`)
	before := victim()

	// The racer, as the sandbox user: /work/d flips between a directory and
	// a symlink to /tmp/victim, /work/g between a file and a symlink to
	// /tmp/victim/g, until /work/stop appears (or two minutes pass).
	type racerEnd struct {
		out string
		err error
	}
	racer := make(chan racerEnd, 1)
	go func() {
		var out strings.Builder
		_, err := b.Exec(ctx, id, worker.Process{Cmd: []string{"timeout", "120", "sh", "-c", `cd /work || exit 1
			n=0
			while [ ! -e /tmp/stop ]; do
				rm -rf d g; mkdir d; echo mine > g
				rm -rf d g; ln -s /tmp/victim d; ln -s /tmp/victim/g g
				n=$((n+1))
			done 2>/dev/null
			echo "$n swaps"`}, Stdout: &out})
		racer <- racerEnd{out.String(), err}
	}()
	defer func() {
		asRoot(`touch /tmp/stop`)
		select {
		case r := <-racer:
			t.Logf("racer: %s %v", strings.TrimSpace(r.out), r.err)
		case <-time.After(time.Minute):
			t.Errorf("the racer did not stop")
		}
	}()

	const writes = 240
	ok, refused := 0, 0
	why := map[string]int{} // refusals by their first words
	example := map[string]string{}
	for i := range writes {
		p := "/work/d/f"
		if i%2 == 1 {
			p = "/work/g"
		}
		err := b.WriteFile(ctx, id, p, 0o644, strings.NewReader("pwned\n"), 6)
		if err != nil {
			refused++
			k := strings.Join(strings.Fields(err.Error())[:min(2, len(strings.Fields(err.Error())))], " ")
			why[k]++
			example[k] = err.Error()
		} else {
			ok++
		}
		if i%40 == 39 {
			if got := victim(); got != before {
				t.Fatalf("after %d writes (%d written, %d refused) the root-owned target changed:\nbefore\n%s\nafter\n%s", i+1, ok, refused, before, got)
			}
		}
	}
	if got := victim(); got != before {
		t.Fatalf("the root-owned target changed:\nbefore\n%s\nafter\n%s", before, got)
	}
	t.Logf("%d writes: %d written, %d refused %v; /tmp/victim unchanged; last of each: %q", writes, ok, refused, why, example)
	if ok == 0 {
		t.Fatalf("no write went through: the race was not exercised")
	}
}

// TestNoAgentListOneLevel (issue 22 E.26): without the agent, listing a
// directory reads one level as the sandbox user. A subtree of 64 GiB (a
// sparse file: the archive API would stream every byte of it) lists within
// seconds; names with newlines, odd bytes and shell characters come back
// exactly; a directory over proto.MaxEntries is cut there.
func TestNoAgentListOneLevel(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{Agent: AgentOff})
	for _, image := range []string{baseImage, pythonImage} { // busybox; dash and GNU coreutils
		t.Run(image, func(t *testing.T) {
			t.Parallel()
			listOneLevel(t, b, image)
		})
	}
}

func listOneLevel(t *testing.T, b *Backend, image string) {
	id := mustCreate(t, b, withImage(image))
	sh(t, b, id, `set -e; mkdir -p /work/big/sub/deep /work/odd/emptydir /work/many
		truncate -s 64G /work/big/sub/deep/huge; printf 12345 > /work/big/top; mkdir /work/big/dir
		cd /work/odd
		for n in 'new
line' 'trailing
' '
' 'a
b
c' "$(printf 'tab\there')" -dash '*' 'sp ace' "quote'\"" 'back\slash' "$(printf '\377\376bytes')" .hidden ' lead'; do
			printf x > "$n"
		done
		ln -s /etc/passwd link; ln -s /nowhere dangling; mkfifo fifo
		cd /work/many; i=0; while [ $i -lt 10050 ]; do : > f$i; i=$((i+1)); done`)
	odd := []string{"new\nline", "trailing\n", "\n", "a\nb\nc", "tab\there", "-dash", "*", "sp ace", "quote'\"", `back\slash`,
		"\xff\xfebytes", ".hidden", " lead"}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	list, err := b.ListFiles(ctx, id, "/work/big")
	if err != nil {
		t.Fatalf("list /work/big (64 GiB below it) in 20s: %v", err)
	}
	t.Logf("listed /work/big in %v: %+v", time.Since(start), list)
	got := map[string]events.FileInfo{}
	for _, f := range list {
		got[f.Name] = f
	}
	if len(list) != 3 || got["top"].Size != 5 || got["top"].Path != "/work/big/top" || !got["sub"].IsDir || !got["dir"].IsDir {
		t.Fatalf("list /work/big: %+v, want sub/, dir/ and top (5 bytes), one level", list)
	}

	list, err = b.ListFiles(ctx, id, "odd")
	if err != nil {
		t.Fatalf("list odd: %v", err)
	}
	got = map[string]events.FileInfo{}
	for _, f := range list {
		got[f.Name] = f
	}
	for _, n := range odd {
		if f, ok := got[n]; !ok || f.Size != 1 || f.Path != "/work/odd/"+n || f.IsDir || fs.FileMode(f.Mode)&fs.ModeType != 0 {
			t.Errorf("entry %q: %+v (found %v)", n, f, ok)
		}
	}
	for n, want := range map[string]fs.FileMode{"link": fs.ModeSymlink, "dangling": fs.ModeSymlink, "fifo": fs.ModeNamedPipe, "emptydir": fs.ModeDir} {
		if f, ok := got[n]; !ok || fs.FileMode(f.Mode)&fs.ModeType != want {
			t.Errorf("entry %q: %+v, want type %v", n, f, want)
		}
	}
	if len(list) != len(odd)+4 {
		t.Errorf("list odd: %d entries, want %d: %q", len(list), len(odd)+4, slices.Collect(maps.Keys(got)))
	}

	list, err = b.ListFiles(ctx, id, "/work/many")
	if err != nil || len(list) != proto.MaxEntries {
		t.Fatalf("list of 10,050 entries: %d entries, %v; want %d", len(list), err, proto.MaxEntries)
	}
	if list, err = b.ListFiles(ctx, id, "/"); err != nil || len(list) < 5 {
		t.Fatalf("list /: %+v %v", list, err)
	}
}

// TestNoAgentReadLimitRace: without the agent, a file the sandbox swaps for
// a larger one between the worker's stat and the copy is still held to the
// read limit.
func TestNoAgentReadLimitRace(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{Agent: AgentOff})
	id := mustCreate(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	racer := make(chan error, 1)
	go func() {
		_, err := b.Exec(ctx, id, worker.Process{Cmd: []string{"timeout", "120", "sh", "-c", `cd /work || exit 1
			head -c 2000000 /dev/zero > big.src; printf x > small.src
			while [ ! -e /tmp/stop ]; do cp small.src s.tmp; mv -f s.tmp r; cp big.src b.tmp; mv -f b.tmp r; done`}})
		racer <- err
	}()
	defer func() {
		sh(t, b, id, "touch /tmp/stop")
		select {
		case err := <-racer:
			t.Logf("racer: %v", err)
		case <-time.After(time.Minute):
			t.Errorf("the racer did not stop")
		}
	}()
	const lim = 1 << 20
	rctx := worker.WithReadLimit(ctx, lim)
	small, refused := 0, 0
	for range 150 {
		var out bytes.Buffer
		n, err := b.ReadFile(rctx, id, "/work/r", &out)
		if n > lim || out.Len() > lim {
			t.Fatalf("read %d bytes under a limit of %d (%v)", n, lim, err)
		}
		if err == nil {
			small++
		} else {
			refused++
		}
	}
	t.Logf("150 reads: %d small, %d refused or missing", small, refused)
}

// TestNoAgentWriteAsUser: without the agent, a write lands as the sandbox
// user on busybox and on Debian's dash and coreutils: parents made, an
// existing file replaced at the new mode, an empty file, a short body
// refused with nothing left behind, a root-owned directory Forbidden.
func TestNoAgentWriteAsUser(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{Agent: AgentOff})
	for _, image := range []string{baseImage, pythonImage} {
		t.Run(image, func(t *testing.T) {
			t.Parallel()
			id := mustCreate(t, b, withImage(image))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			write := func(p string, mode uint32, body string, size int64) error {
				return b.WriteFile(ctx, id, p, mode, strings.NewReader(body), size)
			}
			if err := write("a/b/c.txt", 0o600, "one", 3); err != nil {
				t.Fatalf("write with parents: %v", err)
			}
			if err := write("/work/a/b/c.txt", 0o640, "second", -1); err != nil {
				t.Fatalf("overwrite: %v", err)
			}
			if err := write("/tmp/empty", 0, "", 0); err != nil {
				t.Fatalf("empty file: %v", err)
			}
			if err := write("/work/short", 0o644, "12345", 10); err == nil {
				t.Fatalf("a body shorter than its size was written")
			}
			sb := b.lookupCached(id)
			var out strings.Builder
			if st, err := b.execIn(ctx, sb, worker.Process{Cmd: []string{"sh", "-c", "mkdir -m 755 /tmp/rootdir"}, Stdout: &out}, "0:0"); err != nil || st.Code != 0 {
				t.Fatalf("mkdir as root: %v %+v", err, st)
			}
			if err := write("/tmp/rootdir/f", 0o644, "x", 1); !errors.Is(err, events.ErrForbidden) {
				t.Fatalf("write into a root-owned directory: %v, want Forbidden", err)
			}
			want := "1000 640 6 second|1000 755|1000 644 0 |no short|no temp"
			got := sh(t, b, id, `u=$(id -u); f() { stat -c "%u %a %s" "$1" | sed "s/^$u /1000 /"; }
				printf '%s %s|' "$(f /work/a/b/c.txt)" "$(cat /work/a/b/c.txt)"
				printf '%s|' "$(stat -c '%u %a' /work/a/b | sed "s/^$u /1000 /")"
				printf '%s %s|' "$(f /tmp/empty)" "$(cat /tmp/empty)"
				[ -e /work/short ] && printf 'short|' || printf 'no short|'
				ls -a /work /work/a/b /tmp /tmp/rootdir | grep -q sbx-write && echo temp || echo no temp`)
			if got != want {
				t.Fatalf("after the writes: %q, want %q", got, want)
			}
		})
	}
}
