package workertest

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// statefulContexts probes run_code with a context_id on backends that
// advertise stateful_code (Docker with its agent, E2B): one reply shape on
// every backend. A context is created by its first run; state is kept
// across runs and contexts are apart; stdout and stderr come back as the
// code wrote them; the last expression's value is the main text/plain
// result; display() of an object with _repr_html_ is a text/html result; an
// exception is name/value/traceback with exit code 1; an interpreter that
// ends is SBX_E1309 ContextCrashed, and the next run in that context starts
// a fresh one. code_context creates (idempotent), restarts (state lost, id
// kept; a crashed context too) and deletes a context; restart and delete of
// one never made or deleted are SBX_E1320 ContextNotFound. It needs a class
// whose image has Python (Options.CodeClass).
func (s *suite) statefulContexts(t *testing.T) {
	ctx := s.ctx(t)
	br, err := s.env.Client.Backends(ctx)
	if err != nil {
		t.Fatal(err)
	}
	offered := false
	for _, b := range br.Backends {
		if len(b.Workers) > 0 && b.Capabilities.Has(events.CapStatefulCode) {
			offered = true
		}
	}
	if !offered {
		t.Skip("stateful_code is not advertised")
	}
	if s.opts.CodeClass == "" {
		t.Skip("no class with Python (Options.CodeClass)")
	}
	r, err := s.env.Client.Create(ctx, events.CreateRequest{TimeoutS: s.opts.CreateTimeoutS, Class: s.opts.CodeClass})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { _, _ = s.env.Client.Kill(ctx, r.SandboxID) })
	runErr := func(cid, code string) (*events.RunCodeReply, error) {
		return s.env.Client.RunCode(ctx, events.RunCodeRequest{SandboxID: r.SandboxID, Language: "python", Code: code, ContextID: cid})
	}
	run := func(t *testing.T, cid, code string) *events.RunCodeReply {
		t.Helper()
		res, err := runErr(cid, code)
		if err != nil {
			t.Fatalf("run_code %q in %s: %v", code, cid, err)
		}
		return res
	}
	mainResult := func(t *testing.T, res *events.RunCodeReply) *events.RichResult {
		t.Helper()
		var main *events.RichResult
		for i := range res.Results {
			if res.Results[i].IsMainResult {
				if main != nil {
					t.Fatalf("two main results: %+v", res.Results)
				}
				main = &res.Results[i]
			}
		}
		return main
	}

	t.Run("State", func(t *testing.T) {
		if res := run(t, "ctx-a", "x = 21"); len(res.Results) != 0 || res.Error != nil || res.ExitCode != 0 {
			t.Fatalf("an assignment: results %+v, error %+v, exit %d", res.Results, res.Error, res.ExitCode)
		}
		res := run(t, "ctx-a", "x * 2")
		if main := mainResult(t, res); main == nil || main.Text != "42" || res.ExitCode != 0 {
			t.Fatalf("x * 2 in the same context: %+v, exit %d", res.Results, res.ExitCode)
		}
		if res := run(t, "ctx-a", "None"); len(res.Results) != 0 {
			t.Fatalf("None as the last expression: %+v", res.Results)
		}
		if res := run(t, "ctx-a", "'a' + 'b'"); mainResult(t, res) == nil || mainResult(t, res).Text != "'ab'" {
			t.Fatalf("a string is its repr: %+v", res.Results)
		}
	})
	t.Run("Apart", func(t *testing.T) {
		if res := run(t, "ctx-b", "x"); res.Error == nil || res.Error.Name != "NameError" {
			t.Fatalf("x in another context: %+v", res.Error)
		}
	})
	t.Run("Output", func(t *testing.T) {
		res := run(t, "ctx-a", "import sys\nprint('out 1')\nprint('err 1', file=sys.stderr)\nprint('out 2')\nx")
		if string(res.Stdout) != "out 1\nout 2\n" || !strings.Contains(string(res.Stderr), "err 1\n") {
			t.Fatalf("stdout %q, stderr %q", res.Stdout, res.Stderr)
		}
		if main := mainResult(t, res); main == nil || main.Text != "21" {
			t.Fatalf("the value after output: %+v", res.Results)
		}
	})
	t.Run("Error", func(t *testing.T) {
		res := run(t, "ctx-a", "print('before')\n1/0")
		if res.Error == nil || res.Error.Name != "ZeroDivisionError" || res.Error.Value != "division by zero" ||
			!strings.Contains(res.Error.Traceback, "ZeroDivisionError") {
			t.Fatalf("1/0: %+v", res.Error)
		}
		if res.ExitCode != 1 || string(res.Stdout) != "before\n" || len(res.Results) != 0 {
			t.Fatalf("1/0: exit %d, stdout %q, results %+v", res.ExitCode, res.Stdout, res.Results)
		}
		if res := run(t, "ctx-a", "x"); res.Error != nil || mainResult(t, res) == nil || mainResult(t, res).Text != "21" {
			t.Fatalf("the context after an exception: %+v %+v", res.Error, res.Results)
		}
	})
	t.Run("Display", func(t *testing.T) {
		res := run(t, "ctx-a", "class H:\n    def _repr_html_(self):\n        return '<b>hi</b>'\n    def __repr__(self):\n        return 'H()'\ndisplay(H())\nH()")
		if len(res.Results) != 2 {
			t.Fatalf("display and a last value: %+v", res.Results)
		}
		shown, main := res.Results[0], res.Results[1]
		if shown.IsMainResult || shown.HTML != "<b>hi</b>" || shown.Text != "H()" {
			t.Fatalf("display(H()): %+v", shown)
		}
		if !main.IsMainResult || main.HTML != "<b>hi</b>" || main.Text != "H()" {
			t.Fatalf("H() as the last expression: %+v", main)
		}
	})
	t.Run("Language", func(t *testing.T) {
		_, err := s.env.Client.RunCode(ctx, events.RunCodeRequest{SandboxID: r.SandboxID, Language: "no-such-language", Code: "1", ContextID: "ctx-l"})
		if !errors.Is(err, events.ErrInvalidValue) {
			t.Fatalf("a context of an unknown language: %v, want %s", err, events.CodeInvalidValue)
		}
	})
	t.Run("Contexts", func(t *testing.T) {
		op := func(cid, action, lang string) error {
			rep, err := s.env.Client.CodeContext(ctx, events.CodeContextRequest{SandboxID: r.SandboxID, ContextID: cid, Action: action, Language: lang})
			if err == nil && (rep.ContextID != cid || rep.Action != action) {
				t.Fatalf("code_context %s %s: reply %+v", action, cid, rep)
			}
			return err
		}
		must := func(cid, action string) {
			t.Helper()
			if err := op(cid, action, ""); err != nil {
				t.Fatalf("code_context %s %s: %v", action, cid, err)
			}
		}
		value := func(cid, code string) string {
			t.Helper()
			res := run(t, cid, code)
			if res.Error != nil {
				return res.Error.Name
			}
			if m := mainResult(t, res); m != nil {
				return m.Text
			}
			return ""
		}
		must("ctx-d", events.ContextCreate)
		run(t, "ctx-d", "z = 5")
		must("ctx-d", events.ContextCreate) // idempotent: the state stays
		if got := value("ctx-d", "z"); got != "5" {
			t.Fatalf("z after a second create: %q", got)
		}
		must("ctx-d", events.ContextRestart)
		if got := value("ctx-d", "z"); got != "NameError" {
			t.Fatalf("z after a restart: %q, want NameError", got)
		}
		run(t, "ctx-d", "z = 6")
		must("ctx-d", events.ContextDelete)
		for _, action := range []string{events.ContextRestart, events.ContextDelete} {
			if err := op("ctx-d", action, ""); !errors.Is(err, events.ErrContextNotFound) {
				t.Fatalf("%s of a deleted context: %v, want %s", action, err, events.CodeContextNotFound)
			}
			if err := op("never-made", action, ""); !errors.Is(err, events.ErrContextNotFound) {
				t.Fatalf("%s of an unknown context: %v, want %s", action, err, events.CodeContextNotFound)
			}
		}
		if got := value("ctx-d", "z"); got != "NameError" {
			t.Fatalf("z in a deleted context's id: %q, want NameError (a fresh context)", got)
		}
		if err := op("ctx-e", events.ContextCreate, "no-such-language"); !errors.Is(err, events.ErrInvalidValue) {
			t.Fatalf("create of an unknown language: %v, want %s", err, events.CodeInvalidValue)
		}
		if got := value("ctx-a", "x"); got != "21" {
			t.Fatalf("another context after all that: %q", got)
		}
	})
	t.Run("Plot", func(t *testing.T) {
		if s.opts.PlotClass == "" {
			t.Skip("no class with matplotlib (Options.PlotClass)")
		}
		p, err := s.env.Client.Create(ctx, events.CreateRequest{TimeoutS: s.opts.CreateTimeoutS, Class: s.opts.PlotClass})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		t.Cleanup(func() { _, _ = s.env.Client.Kill(ctx, p.SandboxID) })
		res, err := s.env.Client.RunCode(ctx, events.RunCodeRequest{SandboxID: p.SandboxID, Language: "python", ContextID: "plot",
			Code: "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()\nfig, ax = plt.subplots()\nax.bar(['a', 'b'], [3, 5])\nfig"})
		if err != nil || res.Error != nil {
			t.Fatalf("plot: %+v, %v", res, err)
		}
		if len(res.Results) != 2 {
			t.Fatalf("plt.show() and a figure as the last value: %d results, want 2", len(res.Results))
		}
		for i, r := range res.Results {
			png, err := base64.StdEncoding.DecodeString(r.PNG)
			if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) || r.IsMainResult != (i == 1) {
				t.Fatalf("result %d: main %t, text %q, %d bytes of base64 PNG (%v)", i, r.IsMainResult, r.Text, len(r.PNG), err)
			}
		}
	})
	t.Run("Crashed", func(t *testing.T) {
		run(t, "ctx-c", "y = 1")
		_, err := runErr("ctx-c", "import os\nos._exit(3)")
		if !errors.Is(err, events.ErrContextCrashed) {
			t.Fatalf("an interpreter that exits: %v, want %s", err, events.CodeContextCrashed)
		}
		// The next run restarts the context: a fresh interpreter.
		if res := run(t, "ctx-c", "y"); res.Error == nil || res.Error.Name != "NameError" {
			t.Fatalf("y after the restart: %+v %+v", res.Error, res.Results)
		}
		if res := run(t, "ctx-c", "y = 2\ny"); mainResult(t, res) == nil || mainResult(t, res).Text != "2" {
			t.Fatalf("the restarted context: %+v", res.Results)
		}
		if res := run(t, "ctx-a", "x"); mainResult(t, res) == nil || mainResult(t, res).Text != "21" {
			t.Fatalf("another context after a crash: %+v", res.Results)
		}
		// A crashed context is still known: it restarts.
		if _, err := runErr("ctx-c", "import os\nos._exit(3)"); !errors.Is(err, events.ErrContextCrashed) {
			t.Fatalf("a second exit: %v", err)
		}
		if _, err := s.env.Client.CodeContext(ctx, events.CodeContextRequest{SandboxID: r.SandboxID, ContextID: "ctx-c", Action: events.ContextRestart}); err != nil {
			t.Fatalf("restart of a crashed context: %v", err)
		}
		if res := run(t, "ctx-c", "y"); res.Error == nil || res.Error.Name != "NameError" {
			t.Fatalf("y after the restart of a crashed context: %+v", res.Error)
		}
	})
}
