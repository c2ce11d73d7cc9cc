//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

// TestSandboxSurvivesRandomRequests is the API-level property test: a seeded
// random sequence of file, exec, watch, signal and stdin requests (empty and
// deep directories, 250-byte names under ~3,900-byte paths, FIFOs, device
// files, symlink loops, binary data, many processes) against real Docker
// sandboxes through the router, checking after every request that
//   - every error is a catalogued SBX code,
//   - the sandbox is still running (get) unless the sequence killed it,
//
// and after the sequence that it answers an exec and that the registry and
// Docker agree on it (running in both, then gone from both after kill).
//
// SBX_PROPERTY_SEED and SBX_PROPERTY_OPS replay or lengthen a run; CI runs a
// fixed seed, so a failure there is reproducible with the seed it prints.
func TestSandboxSurvivesRandomRequests(t *testing.T) {
	cli := dockerClient(t)
	seed, ops := propertyKnobs(t)
	b := newDockerBackend(t, "w-prop")
	routing := dockerRouting
	classes := []string{"base"}
	if _, ok := b.RuntimeTier("runsc"); ok {
		routing += "  hardened: {backend: docker, image: \"sandboxio/base:latest\", runtime: runsc, require_isolation: gvisor}\n"
		classes = append(classes, "hardened")
	}
	env := sbxtest.Start(t, sbxtest.Options{Backend: b, Routing: routing, Logger: testLogger(),
		Worker: func(c *worker.Config) { c.WorkerID = "w-prop" }})
	js, err := jetstream.New(env.Conn("inspector"))
	if err != nil {
		t.Fatal(err)
	}
	for i, class := range classes {
		t.Run(class, func(t *testing.T) {
			p := &property{t: t, env: env, rnd: rand.New(rand.NewPCG(seed, uint64(i)))}
			p.create(class)
			for n, op := range p.prologue() {
				p.step(n, op)
			}
			for n := range ops {
				p.step(len(p.prologue())+n, p.pick())
			}
			p.finish(func() []string { return containers(t, cli, "w-prop") }, func() map[string]events.Sandbox { return registry(t, js) })
		})
	}
}

func propertyKnobs(t *testing.T) (seed uint64, ops int) {
	seed, ops = 20261207, 40
	if s := os.Getenv("SBX_PROPERTY_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SBX_PROPERTY_SEED: %v", err)
		}
		seed = v
	}
	if s := os.Getenv("SBX_PROPERTY_OPS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("SBX_PROPERTY_OPS: %q", s)
		}
		ops = v
	}
	t.Logf("seed %d, %d requests a sandbox (SBX_PROPERTY_SEED, SBX_PROPERTY_OPS)", seed, ops)
	return seed, ops
}

// deepDir is a directory whose path is about 3,900 bytes: a 250-byte name
// in it makes a path longer than PATH_MAX, which the sandbox's own code
// may create (relative to its working directory) and the API cannot name.
var deepDir = "/tmp/" + strings.TrimSuffix(strings.Repeat(strings.Repeat("d", 205)+"/", 19), "/")

var longName = strings.Repeat("n", 250)

// paths are what the requests name: empty, deep, special, missing, looping.
var propertyPaths = []string{
	"/work", "/tmp", "/", "/proc/self", "/dev", "/dev/null", "/dev/zero", "/work/fifo", "/work/loop",
	"/work/link-to-tmp", "/work/missing/x", "/work/" + longName, deepDir, "/work/bin.dat", "/etc/passwd",
}

var sbxCode = regexp.MustCompile(`^SBX_E\d{4}$`)

type property struct {
	t     *testing.T
	env   *sbxtest.Env
	rnd   *rand.Rand
	id    string
	procs []string // streamed processes started, running or not
}

type propertyOp struct {
	name string
	run  func(ctx context.Context) error
}

func (p *property) create(class string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := p.env.Client.Create(ctx, events.CreateRequest{Class: class, TimeoutS: 600})
	if err != nil {
		p.t.Fatalf("create %s: %v", class, err)
	}
	p.id = r.SandboxID
}

// prologue is what every sequence starts with: the requests that once
// ended a sandbox (an empty directory listed first, a watch that sees a
// path longer than the API carries, many processes under gVisor), so that
// every seed covers them; the random requests follow.
func (p *property) prologue() []propertyOp {
	return []propertyOp{
		p.listOp("/work"), p.listOp("/tmp"), p.readOp("/work"),
		p.bufferedExec(propertyScripts[0]),
		{"watch deep", func(ctx context.Context) error { return p.watchSees(ctx, deepDir) }},
		p.bufferedExec(propertyScripts[4]),
	}
}

func (p *property) listOp(path string) propertyOp {
	return propertyOp{"list " + path, func(ctx context.Context) error {
		_, err := p.env.Client.ListFiles(ctx, p.id, path)
		return err
	}}
}

func (p *property) readOp(path string) propertyOp {
	return propertyOp{"read " + path, func(ctx context.Context) error {
		_, err := p.env.Client.ReadFile(ctx, p.id, path)
		return err
	}}
}

// pick draws one request.
func (p *property) pick() propertyOp {
	path := propertyPaths[p.rnd.IntN(len(propertyPaths))]
	switch p.rnd.IntN(8) {
	case 0:
		return p.listOp(path)
	case 1:
		return p.readOp(path)
	case 2:
		data := make([]byte, p.rnd.IntN(64<<10))
		for i := range data {
			data[i] = byte(p.rnd.UintN(256))
		}
		return propertyOp{fmt.Sprintf("write %d bytes to %s", len(data), path), func(ctx context.Context) error {
			return p.env.Client.WriteFile(ctx, p.id, path, data, 0o644)
		}}
	case 3, 4:
		return p.pickExec()
	case 5:
		return propertyOp{"watch " + path, func(ctx context.Context) error {
			_, err := p.watch(ctx, path)
			return err
		}}
	case 6:
		sigs := []string{"TERM", "KILL", "INT", "HUP", "QUIT", "USR1", "USR2", "STOP"} // STOP is refused
		sig := sigs[p.rnd.IntN(len(sigs))]
		proc := p.someProcess()
		return propertyOp{"signal " + sig + " " + proc, func(ctx context.Context) error {
			return p.env.Client.Signal(ctx, p.id, proc, sig)
		}}
	default:
		proc := p.someProcess()
		data := []byte{0, 1, 2, 0xff, '\n'}
		return propertyOp{"stdin " + proc, func(ctx context.Context) error {
			return p.env.Client.SendStdin(ctx, p.id, proc, data, p.rnd.IntN(2) == 0)
		}}
	}
}

// scripts are the commands an exec runs: what a sandbox's own code may do
// to the directories the other requests name.
var propertyScripts = []string{
	"mkdir -p " + deepDir + " && cd " + deepDir + " && touch " + longName + " && ls | wc -l",
	"mkfifo /work/fifo 2>/dev/null; ln -sfn /work/loop /work/loop; ln -sfn /tmp /work/link-to-tmp; true",
	"head -c 70000 /dev/urandom > /work/bin.dat && head -c 3000 /dev/urandom",
	"touch /work/" + longName,
	"for i in $(seq 120); do sleep 4 & done; echo started",
	"rm -rf /work/* /tmp/d*; true",
	"exit 7",
	"printf '\\x00\\xff\\xfe binary'",
	"cat",
	"kill -STOP $$",
}

func (p *property) pickExec() propertyOp {
	return p.execOp(propertyScripts[p.rnd.IntN(len(propertyScripts))])
}

func (p *property) execOp(script string) propertyOp {
	if p.rnd.IntN(3) == 0 { // streamed, left running, with stdin open
		proc := events.NewID()
		p.procs = append(p.procs, proc)
		return propertyOp{"stream " + script, func(ctx context.Context) error {
			_, err := p.env.Client.Stream(ctx, events.ExecRequest{SandboxID: p.id, ProcessID: proc, KeepStdinOpen: true,
				Cmd: []string{"sh", "-c", script + "; sleep 5"}})
			return err
		}}
	}
	return p.bufferedExec(script)
}

func (p *property) bufferedExec(script string) propertyOp {
	return propertyOp{"exec " + script, func(ctx context.Context) error {
		_, err := p.env.Client.Exec(ctx, events.ExecRequest{SandboxID: p.id, Cmd: []string{"sh", "-c", script},
			Stdin: "input\n", TimeoutMS: 10_000})
		return err
	}}
}

// watchName is what the watch's maker creates: under deepDir its event's
// path is longer than the 4,096 bytes the API carries.
var watchName = longName[:240]

// watch watches path while a streamed process makes long names in it, for
// long enough that the watch, however late it starts, sees some.
func (p *property) watch(ctx context.Context, path string) (*events.FilesWatchReply, error) {
	maker := "cd " + path + " 2>/dev/null && for i in $(seq 10 70); do touch " + watchName + "$i; sleep 0.1; done"
	if _, err := p.env.Client.Stream(ctx, events.ExecRequest{SandboxID: p.id, Cmd: []string{"sh", "-c", maker}}); err != nil {
		return nil, err
	}
	return p.env.Client.WatchFiles(ctx, p.id, path, 5*time.Second, 3)
}

// watchSees watches a directory whose events cannot all be carried: the
// reply must say so (events dropped make it truncated), and the sandbox
// must live on (step checks).
func (p *property) watchSees(ctx context.Context, path string) error {
	if n := len(path) + 1 + len(watchName) + 2; n <= 4096 {
		p.t.Fatalf("the watched path's events are %d bytes: they must exceed 4,096", n)
	}
	r, err := p.watch(ctx, path)
	if err == nil && !r.Truncated && len(r.Events) == 0 {
		p.t.Fatalf("watch %s: no event and not truncated while names were being made in it: %+v", short(path), r)
	}
	return err
}

func (p *property) someProcess() string {
	if len(p.procs) == 0 || p.rnd.IntN(4) == 0 {
		return "no-such-process"
	}
	return p.procs[p.rnd.IntN(len(p.procs))]
}

// step runs one request and checks the invariants after it.
func (p *property) step(n int, op propertyOp) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	start := time.Now()
	err := op.run(ctx)
	p.t.Logf("request %d: %s in %s: %.300v", n, short(op.name), time.Since(start).Round(time.Millisecond), err)
	if err != nil {
		var e *events.Error
		if !errors.As(err, &e) || !sbxCode.MatchString(string(e.Code)) {
			p.t.Fatalf("request %d (%s): an error with no SBX code: %v", n, op.name, err)
		}
		if _, ok := events.Lookup(e.Code); !ok {
			p.t.Fatalf("request %d (%s): %s is not in the catalog", n, op.name, e.Code)
		}
		switch e.Code {
		case events.CodeSandboxGone, events.CodeSandboxNotFound, events.CodeAgentProtocol:
			p.t.Fatalf("request %d (%s) ended the sandbox: %v", n, op.name, err)
		}
	}
	sb, gerr := p.env.Client.Get(ctx, p.id)
	if gerr != nil || sb.State != events.StateRunning {
		p.t.Fatalf("after request %d (%s, err %v): the sandbox is %+v, %v", n, op.name, err, sb, gerr)
	}
}

// finish checks that the sandbox still works and that the registry and
// Docker agree on it, running and then gone.
func (p *property) finish(docker func() []string, reg func() map[string]events.Sandbox) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The sandbox's own processes may hold its whole process limit for a
	// few seconds (fork fails with EAGAIN, a coded ExecFailed): alive means
	// it answers once they end.
	for deadline := time.Now().Add(45 * time.Second); ; {
		res, err := p.env.Client.Exec(ctx, events.ExecRequest{SandboxID: p.id, Cmd: []string{"echo", "alive"}})
		if err == nil && strings.TrimSpace(string(res.Stdout)) == "alive" {
			break
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("after the sequence the sandbox does not answer an exec: %+v, %v", res, err)
		}
		select {
		case <-ctx.Done():
			p.t.Fatalf("after the sequence the sandbox does not answer an exec: %+v, %v", res, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
	if !containsPrefix(docker(), p.id+" (running)") || reg()[p.id].State != events.StateRunning {
		p.t.Fatalf("registry and Docker disagree: docker %v, registry %+v", docker(), reg()[p.id])
	}
	if _, err := p.env.Client.Kill(ctx, p.id); err != nil {
		p.t.Fatalf("kill: %v", err)
	}
	sbxtest.Eventually(p.t, 30*time.Second, func() bool {
		return !containsPrefix(docker(), p.id+" ") && reg()[p.id].State != events.StateRunning
	}, "after kill: docker %v, registry %+v", docker(), reg()[p.id])
}

func containsPrefix(list []string, prefix string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

// short keeps a request's name readable in the log: long names and deep
// paths are cut.
func short(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
