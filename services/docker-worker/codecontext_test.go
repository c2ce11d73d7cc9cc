//go:build integration

package dockerworker

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"slices"
	"strings"
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

// dataImage is deploy/images' optional python-data image (numpy and
// matplotlib): built with `deploy/images/build.sh python-data` or
// SBX_IMAGES=python-data.
const dataImage = "sandboxio/python-data:3.11"

// needImage skips a test whose optional image is not built.
func needImage(t *testing.T, b *Backend, ref string) {
	t.Helper()
	if _, err := b.cli.ImageInspect(context.Background(), ref); err != nil {
		t.Skipf("%s is not built (deploy/images/build.sh python-data): %v", ref, err)
	}
}

// Matplotlib in a stateful context: plt.show(), the figures left open at the
// end of a run and a figure as the last expression are image/png results;
// display() of a figure too.
func TestStatefulContextMatplotlib(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{})
	needImage(t, b, dataImage)
	id := mustCreate(t, b, withImage(dataImage))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tests := []struct {
		name string
		code string
		// want is, per result, "png" or "png main" or the main text.
		want []string
	}{
		{"show", "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()", []string{"png"}},
		{"show twice", "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()\nplt.plot([2, 1])\nplt.show()", []string{"png", "png"}},
		{"left open", "import matplotlib.pyplot as plt\nplt.figure()\nplt.plot([3, 2, 1])\nNone", []string{"png"}},
		{"last expression", "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.plot([1, 2])\nfig", []string{"png main"}},
		{"display", "import matplotlib.pyplot as plt\nfig = plt.figure()\nplt.plot([1])\ndisplay(fig)\nplt.close(fig)\n7", []string{"png", "7"}},
		{"numpy", "import numpy as np\nint(np.arange(10).sum())", []string{"45"}},
		{"nothing drawn", "import matplotlib.pyplot as plt\nplt.show()", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			res, err := b.RunCode(ctx, id, worker.CodeRequest{Language: "python", Code: tc.code, ContextID: "mpl", Stderr: &stderr})
			if err != nil || res.Error != nil {
				t.Fatalf("run: %+v, %v; stderr %q", res.Error, err, stderr.String())
			}
			var got []string
			for _, r := range res.Results {
				switch {
				case r.PNG != "":
					png, err := base64.StdEncoding.DecodeString(r.PNG)
					if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) || !strings.HasPrefix(r.Text, "<Figure size") {
						t.Fatalf("not a PNG figure: text %q, %d bytes of base64, %v", r.Text, len(r.PNG), err)
					}
					got = append(got, map[bool]string{true: "png main", false: "png"}[r.IsMainResult])
				case r.IsMainResult:
					got = append(got, r.Text)
				default:
					got = append(got, "other: "+r.Text)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("results %q, want %q", got, tc.want)
			}
			if strings.Contains(stderr.String(), "non-interactive") || strings.Contains(stderr.String(), "Warning") {
				t.Fatalf("stderr: %q", stderr.String())
			}
		})
	}
}
