//go:build integration

package dockerworker

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

// Issue 10: run_code with a context_id keeps a Python interpreter per
// context, with the E2B backend's reply shape.
func TestStatefulContext(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{})
	if !b.Info().Capabilities.Has(events.CapStatefulCode) {
		t.Fatal("stateful_code not advertised with the agent")
	}
	id := mustCreate(t, b, withImage(pythonImage))
	run := func(ctx context.Context, cid, code string) (worker.CodeResult, string, string, error) {
		var out, errb bytes.Buffer
		res, err := b.RunCode(ctx, id, worker.CodeRequest{Language: "python", Code: code, ContextID: cid, Stdout: &out, Stderr: &errb})
		return res, out.String(), errb.String(), err
	}
	ctx := context.Background()
	if _, _, _, err := run(ctx, "c1", "x = 21"); err != nil {
		t.Fatal(err)
	}
	res, out, _, err := run(ctx, "c1", "print('half', x)\nx * 2")
	if err != nil || out != "half 21\n" || len(res.Results) != 1 || res.Results[0].Text != "42" || !res.Results[0].IsMainResult || res.Code != 0 {
		t.Fatalf("x*2: %+v out %q err %v", res, out, err)
	}
	// Contexts are apart.
	res, _, _, err = run(ctx, "c2", "x")
	if err != nil || res.Error == nil || res.Error.Name != "NameError" || res.Code != 1 {
		t.Fatalf("x in another context: %+v %v", res, err)
	}
	// Rich display.
	res, _, _, err = run(ctx, "c1", "class H:\n    def _repr_html_(self): return '<b>hi</b>'\ndisplay(H())\nH()")
	if err != nil || len(res.Results) != 2 || res.Results[0].HTML != "<b>hi</b>" || res.Results[0].IsMainResult || !res.Results[1].IsMainResult {
		t.Fatalf("html: %+v %v", res, err)
	}
	// Errors: name, value, traceback; the context survives them.
	res, _, _, err = run(ctx, "c1", "1/0")
	if err != nil || res.Error == nil || res.Error.Name != "ZeroDivisionError" || res.Error.Value != "division by zero" || res.Error.Traceback == "" {
		t.Fatalf("1/0: %+v %v", res, err)
	}
	// A run past its deadline is interrupted; the state stays.
	tctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, _, _, err = run(tctx, "c1", "while True: pass")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("endless loop: %v", err)
	}
	if res, _, _, err = run(ctx, "c1", "x"); err != nil || len(res.Results) != 1 || res.Results[0].Text != "21" {
		t.Fatalf("after the interrupt: %+v %v", res, err)
	}
	// A crashed context has its own code, and the next run starts afresh.
	if _, _, _, err = run(ctx, "c1", "import os; os._exit(3)"); !errors.Is(err, events.ErrContextCrashed) {
		t.Fatalf("os._exit: %v, want ContextCrashed", err)
	}
	if res, _, _, err = run(ctx, "c1", "x"); err != nil || res.Error == nil || res.Error.Name != "NameError" {
		t.Fatalf("after the crash: %+v %v", res, err)
	}
	// An image without python says so.
	bare := mustCreate(t, b)
	if _, err := b.RunCode(ctx, bare, worker.CodeRequest{Code: "1", ContextID: "c1"}); !errors.Is(err, events.ErrExecFailed) {
		t.Fatalf("no python: %v, want ExecFailed", err)
	}
}
