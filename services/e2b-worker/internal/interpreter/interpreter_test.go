package interpreter_test

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/services/e2b-worker/e2bfake"
	"github.com/sandboxio/sandboxio/services/e2b-worker/internal/envd"
	"github.com/sandboxio/sandboxio/services/e2b-worker/internal/interpreter"
)

func setup(t *testing.T) (*e2bfake.Server, string, *interpreter.Client) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not available")
	}
	fake := e2bfake.New(e2bfake.Options{TB: t})
	fake.Start()
	info, err := fake.CreateSandbox(e2bfake.SandboxOptions{TemplateID: "code-interpreter-v1", Secure: true})
	if err != nil {
		t.Fatal(err)
	}
	c, err := interpreter.New(interpreter.Config{BaseURL: fake.SandboxURL(), SandboxID: info.ID, AccessToken: info.EnvdAccessToken})
	if err != nil {
		t.Fatal(err)
	}
	return fake, info.ID, c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestExecute(t *testing.T) {
	_, _, c := setup(t)
	ctx := ctxT(t)
	tests := []struct {
		name      string
		code      string
		env       map[string]string
		stdout    string
		stderr    string
		main      string
		html      bool
		errName   string
		errValue  string
		displayed int
	}{
		{name: "print and value", code: "x = 40\nprint('hi')\nx + 2", stdout: "hi\n", main: "42"},
		{name: "state persists", code: "x", main: "40"},
		{name: "stderr", code: "import sys\nsys.stderr.write('oops\\n')", stderr: "oops\n", main: "5"},
		{name: "error", code: "undefined_name", errName: "NameError", errValue: "name 'undefined_name' is not defined"},
		{name: "env vars per execution", code: "import os\nos.environ['FOO']", env: map[string]string{"FOO": "bar"}, main: "'bar'"},
		{name: "env vars restored", code: "import os\nos.environ.get('FOO')"},
		{name: "rich html and display", code: "class H:\n  def _repr_html_(self): return '<b>x</b>'\ndisplay(1)\nH()", html: true, displayed: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ex, err := c.Execute(ctx, tc.code, "python", "", interpreter.ExecuteOptions{EnvVars: tc.env})
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(ex.Stdout, ""); got != tc.stdout {
				t.Errorf("stdout = %q, want %q", got, tc.stdout)
			}
			if got := strings.Join(ex.Stderr, ""); got != tc.stderr {
				t.Errorf("stderr = %q, want %q", got, tc.stderr)
			}
			var main *interpreter.Result
			displayed := 0
			for i := range ex.Results {
				if ex.Results[i].IsMainResult {
					main = &ex.Results[i]
				} else {
					displayed++
				}
			}
			if tc.main != "" && (main == nil || main.Text != tc.main) {
				t.Errorf("main result = %+v, want %q", main, tc.main)
			}
			if tc.html && (main == nil || main.HTML != "<b>x</b>") {
				t.Errorf("html result = %+v", main)
			}
			if displayed != tc.displayed {
				t.Errorf("display() results = %d, want %d", displayed, tc.displayed)
			}
			if tc.errName != "" {
				if ex.Error == nil || ex.Error.Name != tc.errName || ex.Error.Value != tc.errValue || !strings.Contains(ex.Error.Traceback, tc.errName) {
					t.Errorf("error = %+v", ex.Error)
				}
			} else if ex.Error != nil {
				t.Errorf("unexpected error %+v", ex.Error)
			}
			if ex.ExecutionCount == 0 {
				t.Error("execution count missing")
			}
		})
	}
}

func TestContexts(t *testing.T) {
	fake, _, c := setup(t)
	ctx := ctxT(t)
	k, err := c.CreateContext(ctx, "python", "/tmp")
	if err != nil || k.ID == "" || k.Language != "python" || k.Cwd != "/tmp" {
		t.Fatalf("CreateContext = %+v, %v", k, err)
	}
	if _, err := c.Execute(ctx, "y = 7", "", k.ID); err != nil {
		t.Fatal(err)
	}
	ex, err := c.Execute(ctx, "y", "", k.ID)
	if err != nil || len(ex.Results) != 1 || ex.Results[0].Text != "7" {
		t.Fatalf("state: %+v, %v", ex, err)
	}
	list, err := c.ListContexts(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("ListContexts = %+v, %v", list, err)
	}
	if err := c.RestartContext(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	ex, err = c.Execute(ctx, "y", "", k.ID)
	if err != nil || ex.Error == nil || ex.Error.Name != "NameError" {
		t.Fatalf("after restart: %+v, %v", ex, err)
	}
	if err := c.DeleteContext(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"execute": func() error { _, err := c.Execute(ctx, "1", "", k.ID); return err }(),
		"restart": c.RestartContext(ctx, k.ID),
		"delete":  c.DeleteContext(ctx, k.ID),
	} {
		if !errors.Is(err, envd.ErrNotFound) {
			t.Errorf("%s of a deleted context: %v, want ErrNotFound", name, err)
		}
	}
	if _, err := c.Execute(ctx, "1", "python", "someid"); !errors.Is(err, envd.ErrInvalidArgument) {
		t.Errorf("language and context: %v, want ErrInvalidArgument", err)
	}
	_ = fake
}

func TestExecuteFaults(t *testing.T) {
	tests := []struct {
		name   string
		faults e2bfake.Faults
		code   string
		want   error
	}{
		{name: "omit end", faults: e2bfake.Faults{OmitEnd: true}, code: "print(1)", want: envd.ErrStreamBroken},
		{name: "drop", faults: e2bfake.Faults{DropStreamAfter: 1}, code: "print(1)\nprint(2)", want: envd.ErrStreamBroken},
		{name: "bad gateway", faults: e2bfake.Faults{BadGateway: true}, code: "1", want: envd.ErrSandboxGone},
		{name: "expire mid-exec", faults: e2bfake.Faults{ExpireAfter: 1}, code: "print(1)\nimport time\ntime.sleep(5)", want: envd.ErrSandboxGone},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fake, id, c := setup(t)
			fake.SetSandboxFaults(id, tc.faults)
			_, err := c.Execute(ctxT(t), tc.code, "python", "")
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}
