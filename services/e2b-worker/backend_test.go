package e2bworker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	e2bworker "github.com/sandboxio/sandboxio/services/e2b-worker"
	"github.com/sandboxio/sandboxio/services/e2b-worker/e2bfake"
	"github.com/sandboxio/sandboxio/services/e2b-worker/internal/e2bapi"
)

func TestNewBackendNeedsKey(t *testing.T) {
	srv := startFake(t)
	tests := []struct {
		name, key string
		want      string
	}{
		{"missing", "", "E2B_API_KEY is not set"},
		{"rejected", "e2b_ffffffffffffffffffffffffffffffffffffffff", "rejected E2B_API_KEY"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := srv.Env()
			env["E2B_API_KEY"] = tc.key
			cfg := e2bworker.ConfigFromEnv(func(k string) string { return env[k] })
			cfg.WorkerID = "w1"
			_, err := e2bworker.NewBackend(ctxT(t, 10*time.Second), cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewBackend: %v, want %q", err, tc.want)
			}
			if tc.key != "" && strings.Contains(err.Error(), tc.key) {
				t.Fatalf("the error shows the API key: %v", err)
			}
		})
	}
}

func TestConfigFromEnv(t *testing.T) {
	tests := []struct {
		env  map[string]string
		want e2bworker.Config
	}{
		{map[string]string{}, e2bworker.Config{Template: "base"}},
		{map[string]string{"SBX_E2B_TEMPLATE": "code-interpreter-v1"}, e2bworker.Config{Template: "code-interpreter-v1", CodeInterpreter: true}},
		{map[string]string{"SBX_E2B_TEMPLATE": "code-interpreter-v1", "SBX_E2B_CODE_INTERPRETER": "false", "SBX_E2B_USER": "user"},
			e2bworker.Config{Template: "code-interpreter-v1", User: "user"}},
		{map[string]string{"E2B_API_KEY": "k", "E2B_DOMAIN": "example.test", "E2B_API_URL": "http://a", "E2B_SANDBOX_URL": "http://s", "SBX_E2B_CODE_INTERPRETER": "1"},
			e2bworker.Config{E2B: e2bapi.Config{APIKey: "k", Domain: "example.test", APIURL: "http://a", SandboxURL: "http://s"}, Template: "base", CodeInterpreter: true}},
	}
	for _, tc := range tests {
		got := e2bworker.ConfigFromEnv(func(k string) string { return tc.env[k] })
		if diff := diff(tc.want, got); diff != "" {
			t.Errorf("ConfigFromEnv(%v) %s", tc.env, diff)
		}
	}
}

func TestInfo(t *testing.T) {
	srv := startFake(t)
	for _, interp := range []bool{false, true} {
		b := newBackend(t, srv, func(c *e2bworker.Config) { c.CodeInterpreter = interp })
		info := b.Info()
		if info.Name != "e2b" || info.Isolation != events.TierMicroVM {
			t.Fatalf("info: %+v", info)
		}
		for _, c := range []events.Capability{events.CapExec, events.CapStream, events.CapFiles, events.CapSignal,
			events.CapStdin, events.CapSetTimeout, events.CapNetworkAllowlist} {
			if !info.Capabilities.Has(c) {
				t.Errorf("missing capability %s", c)
			}
		}
		if info.Capabilities.Has(events.CapRunCode) != interp || info.Capabilities.Has(events.CapStatefulCode) != interp {
			t.Errorf("interpreter %t: capabilities %v", interp, info.Capabilities)
		}
		if info.Capabilities.Has(events.CapPause) {
			t.Errorf("pause is advertised but not implemented")
		}
	}
}

// createBody decodes the last create request the fake received.
func lastCreate(t *testing.T, srv *e2bfake.Server) map[string]any {
	t.Helper()
	reqs := srv.CreateRequests()
	if len(reqs) == 0 {
		t.Fatal("no create request recorded")
	}
	var body map[string]any
	if err := json.Unmarshal(reqs[len(reqs)-1], &body); err != nil {
		t.Fatal(err)
	}
	return body
}

func TestCreateRequestMapping(t *testing.T) {
	srv := startFake(t)
	b := newBackend(t, srv, nil)
	env := startEnv(t, b)
	tests := []struct {
		name        string
		network     *events.NetworkPolicy
		wantNet     any
		wantNetwork map[string]any
	}{
		{"default is deny", nil, false, nil},
		{"deny", &events.NetworkPolicy{Egress: "deny"}, false, nil},
		{"allow all", &events.NetworkPolicy{Egress: "allow"}, true, nil},
		{"allowlist", &events.NetworkPolicy{Egress: "allow", Allow: []string{"pypi.org", "10.1.0.0/16", "1.1.1.1"}}, true,
			map[string]any{"allowOut": []any{"pypi.org", "10.1.0.0/16", "1.1.1.1"}, "denyOut": []any{"0.0.0.0/0"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t, time.Minute)
			r, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 90, Network: tc.network,
				Env: map[string]string{"PLAIN": "p"}, Secrets: map[string]string{"TOKEN": "s3cr3t-value"},
				Metadata: map[string]string{"team": "a"}})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _, _ = env.Client.Kill(context.Background(), r.SandboxID) }()
			body := lastCreate(t, srv)
			if body["allow_internet_access"] != tc.wantNet {
				t.Errorf("allow_internet_access = %v, want %v", body["allow_internet_access"], tc.wantNet)
			}
			var gotNetwork map[string]any
			if n, ok := body["network"]; ok {
				gotNetwork, _ = n.(map[string]any)
			}
			if diff := diff(tc.wantNetwork, gotNetwork); diff != "" {
				t.Errorf("network %s", diff)
			}
			if body["secure"] != true || body["templateID"] != "base" {
				t.Errorf("secure/template: %v %v", body["secure"], body["templateID"])
			}
			if to, _ := body["timeout"].(float64); to < 89 || to > 90 {
				t.Errorf("timeout %v, want 90 (ceil of the seconds to the deadline)", body["timeout"])
			}
			md, _ := body["metadata"].(map[string]any)
			if md[e2bworker.MetaSandbox] != r.SandboxID || md[e2bworker.MetaWorker] != env.WorkerID || md[e2bworker.MetaUserPrefix+"team"] != "a" {
				t.Errorf("metadata: %v", md)
			}
			raw, _ := json.Marshal(md)
			if strings.Contains(string(raw), "s3cr3t") {
				t.Errorf("a secret is in the metadata: %s", raw)
			}
			ev, _ := body["envVars"].(map[string]any)
			if ev["PLAIN"] != "p" || ev["TOKEN"] != "s3cr3t-value" {
				t.Errorf("envVars: %v", ev)
			}
			res, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: r.SandboxID, Cmd: []string{"sh", "-c", `printf '%s %s' "$PLAIN" "$TOKEN"`}})
			if err != nil || string(res.Stdout) != "p s3cr3t-value" {
				t.Fatalf("env in the sandbox: %+v %v", res, err)
			}
		})
	}
}

func TestSetTimeoutExtendsBoth(t *testing.T) {
	srv := startFake(t)
	b := newBackend(t, srv, nil)
	env := startEnv(t, b)
	ctx := ctxT(t, time.Minute)
	api := apiClient(t, srv)
	r, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 30})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = env.Client.Kill(context.Background(), r.SandboxID) }()
	e2bID, ok := b.E2BSandboxID(r.SandboxID)
	if !ok {
		t.Fatal("no E2B sandbox id")
	}
	d, err := api.Get(ctx, e2bID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := d.EndAt.Sub(r.Deadline); diff < -time.Second || diff > 2*time.Second {
		t.Fatalf("E2B endAt %s vs our deadline %s", d.EndAt, r.Deadline)
	}
	for _, secs := range []int{600, 45} { // extend, then shorten
		deadline, err := env.Client.SetTimeout(ctx, r.SandboxID, time.Duration(secs)*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		d, err := api.Get(ctx, e2bID)
		if err != nil {
			t.Fatal(err)
		}
		if diff := d.EndAt.Sub(deadline); diff < -time.Second || diff > 2*time.Second {
			t.Fatalf("set_timeout %d: E2B endAt %s vs our deadline %s", secs, d.EndAt, deadline)
		}
		got, err := env.Client.Get(ctx, r.SandboxID)
		if err != nil || !got.Deadline.Equal(deadline) {
			t.Fatalf("record deadline %v vs %v (%v)", got.Deadline, deadline, err)
		}
	}
}

func apiClient(t *testing.T, srv *e2bfake.Server) *e2bapi.Client {
	t.Helper()
	env := srv.Env()
	c, err := e2bapi.New(e2bapi.ConfigFromEnv(func(k string) string { return env[k] }))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func contains(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func TestKillBothSides(t *testing.T) {
	srv := startFake(t)
	b := newBackend(t, srv, nil)
	env := startEnv(t, b)
	ctx := ctxT(t, time.Minute)

	t.Run("ours kills E2B's", func(t *testing.T) {
		r, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 60})
		if err != nil {
			t.Fatal(err)
		}
		e2bID, _ := b.E2BSandboxID(r.SandboxID)
		if !contains(srv.SandboxIDs(), e2bID) {
			t.Fatalf("E2B sandbox %s not live", e2bID)
		}
		if _, err := env.Client.Kill(ctx, r.SandboxID); err != nil {
			t.Fatal(err)
		}
		if contains(srv.SandboxIDs(), e2bID) {
			t.Fatalf("E2B sandbox %s survived the kill", e2bID)
		}
	})
	t.Run("E2B's end is seen as gone", func(t *testing.T) {
		r, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 60})
		if err != nil {
			t.Fatal(err)
		}
		e2bID, _ := b.E2BSandboxID(r.SandboxID)
		if _, err := apiClient(t, srv).Kill(ctx, e2bID); err != nil {
			t.Fatal(err)
		}
		_, err = env.Client.Exec(ctx, events.ExecRequest{SandboxID: r.SandboxID, Cmd: []string{"true"}})
		if !errors.Is(err, events.ErrSandboxGone) {
			t.Fatalf("exec on a sandbox E2B killed: %v, want SandboxGone", err)
		}
		// Our kill still succeeds: E2B's 404 means already gone.
		kr, err := env.Client.Kill(ctx, r.SandboxID)
		if err != nil || kr.State != events.StateGone {
			t.Fatalf("kill after E2B's kill: %+v %v", kr, err)
		}
	})
	t.Run("restart adopts by metadata", func(t *testing.T) {
		r, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 60})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _, _ = env.Client.Kill(context.Background(), r.SandboxID) }()
		e2bID, _ := b.E2BSandboxID(r.SandboxID)
		// A second backend with the same worker id knows nothing in memory.
		b2 := newBackend(t, srv, func(c *e2bworker.Config) { c.WorkerID = env.WorkerID })
		listed, err := b2.ListSandboxes(ctx)
		if err != nil || len(listed) == 0 {
			t.Fatalf("list: %v %v", listed, err)
		}
		var found bool
		for _, l := range listed {
			found = found || (l.SandboxID == r.SandboxID && l.WorkerID == env.WorkerID && !l.Deadline.IsZero())
		}
		if !found {
			t.Fatalf("list %+v lacks %s", listed, r.SandboxID)
		}
		if err := b2.Kill(ctx, r.SandboxID); err != nil {
			t.Fatal(err)
		}
		if contains(srv.SandboxIDs(), e2bID) {
			t.Fatal("the adopted sandbox survived the kill")
		}
		if err := b2.Kill(ctx, r.SandboxID); err != nil {
			t.Fatalf("second kill: %v", err)
		}
	})
}

func TestSignal(t *testing.T) {
	srv := startFake(t)
	b := newBackend(t, srv, nil)
	env := startEnv(t, b)
	ctx := ctxT(t, time.Minute)
	r, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 60})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = env.Client.Kill(context.Background(), r.SandboxID) }()
	p, err := env.Client.Stream(ctx, events.ExecRequest{SandboxID: r.SandboxID, Cmd: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := env.Client.Signal(ctx, r.SandboxID, p.ProcessID, "HUP"); !errors.Is(err, events.ErrCapabilityNotSupported) {
		t.Fatalf("HUP: %v, want CapabilityNotSupported", err)
	}
	sbxtest.Eventually(t, 10*time.Second, func() bool {
		return env.Client.Signal(ctx, r.SandboxID, p.ProcessID, "TERM") == nil
	}, "TERM never delivered")
	res, err := p.Wait()
	if err != nil || res.Signal != "TERM" || res.ExitCode != 143 {
		t.Fatalf("after TERM: %+v %v", res, err)
	}
}

func TestFiles(t *testing.T) {
	srv := startFake(t)
	b := newBackend(t, srv, nil)
	env := startEnv(t, b)
	ctx := ctxT(t, time.Minute)
	r, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 60})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = env.Client.Kill(context.Background(), r.SandboxID) }()
	data := "hello\x00\xff files\n"
	if err := b.WriteFile(ctx, r.SandboxID, "/home/user/dir/a.txt", 0o644, strings.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	n, err := b.ReadFile(ctx, r.SandboxID, "/home/user/dir/a.txt", &got)
	if err != nil || n != int64(len(data)) || got.String() != data {
		t.Fatalf("read: %d %q %v", n, got.String(), err)
	}
	list, err := b.ListFiles(ctx, r.SandboxID, "/home/user/dir")
	if err != nil || len(list) != 1 || list[0].Name != "a.txt" || list[0].Path != "/home/user/dir/a.txt" || list[0].Size != int64(len(data)) || list[0].IsDir {
		t.Fatalf("list: %+v %v", list, err)
	}
	list, err = b.ListFiles(ctx, r.SandboxID, "/home/user")
	if err != nil || len(list) != 1 || !list[0].IsDir || list[0].Name != "dir" {
		t.Fatalf("list home: %+v %v", list, err)
	}
	if _, err := b.ReadFile(ctx, r.SandboxID, "/home/user/missing", &got); !errors.Is(err, events.ErrFileNotFound) {
		t.Fatalf("missing file: %v, want InvalidValue", err)
	}
	if _, err := b.ListFiles(ctx, r.SandboxID, "/nope"); !errors.Is(err, events.ErrFileNotFound) {
		t.Fatalf("missing dir: %v, want InvalidValue", err)
	}
}

func TestRunCode(t *testing.T) {
	srv := startFake(t)
	b := newBackend(t, srv, nil)
	env := startEnv(t, b)
	ctx := ctxT(t, 2*time.Minute)
	r, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 120})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = env.Client.Kill(context.Background(), r.SandboxID) }()
	tests := []struct {
		name      string
		code      string
		stdout    string
		results   []events.RichResult
		codeError string
	}{
		{"value", "1 + 41", "", []events.RichResult{{Text: "42", IsMainResult: true}}, ""},
		{"stdout", "print('hi')", "hi\n", nil, ""},
		{"html", "class H:\n    def _repr_html_(self): return '<b>x</b>'\n    def __repr__(self): return 'H'\nH()",
			"", []events.RichResult{{Text: "H", HTML: "<b>x</b>", IsMainResult: true}}, ""},
		{"error", "raise ValueError('boom')", "", nil, "ValueError"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := env.Client.RunCode(ctx, events.RunCodeRequest{SandboxID: r.SandboxID, Code: tc.code})
			if err != nil {
				t.Fatal(err)
			}
			if string(res.Stdout) != tc.stdout {
				t.Errorf("stdout %q, want %q", res.Stdout, tc.stdout)
			}
			if d := diff(tc.results, res.Results); d != "" && (len(tc.results) > 0 || len(res.Results) > 0) {
				t.Errorf("results %s", d)
			}
			switch {
			case tc.codeError == "" && res.Error != nil:
				t.Errorf("unexpected error %+v", res.Error)
			case tc.codeError != "" && (res.Error == nil || res.Error.Name != tc.codeError || res.Error.Value != "boom" || !strings.Contains(res.Error.Traceback, "ValueError")):
				t.Errorf("error %+v, want %s boom", res.Error, tc.codeError)
			case tc.codeError != "" && res.ExitCode == 0:
				t.Errorf("exit code 0 for code that raised")
			}
		})
	}
}

func TestStatefulContext(t *testing.T) {
	srv := startFake(t)
	b := newBackend(t, srv, nil)
	env := startEnv(t, b)
	ctx := ctxT(t, 2*time.Minute)
	r, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 120})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = env.Client.Kill(context.Background(), r.SandboxID) }()
	run := func(contextID, code string) *events.RunCodeReply {
		t.Helper()
		res, err := env.Client.RunCode(ctx, events.RunCodeRequest{SandboxID: r.SandboxID, ContextID: contextID, Code: code})
		if err != nil {
			t.Fatalf("%s: %v", code, err)
		}
		return res
	}
	run("c1", "x = 41")
	if res := run("c1", "x + 1"); len(res.Results) != 1 || res.Results[0].Text != "42" {
		t.Fatalf("state lost in c1: %+v", res)
	}
	if res := run("c2", "x"); res.Error == nil || res.Error.Name != "NameError" {
		t.Fatalf("c2 sees c1's state: %+v", res)
	}
	if res := run("", "x"); res.Error == nil || res.Error.Name != "NameError" {
		t.Fatalf("the default context sees c1's state: %+v", res)
	}
}

// diff returns "" when want and got are deeply equal, else both values.
func diff(want, got any) string {
	if reflect.DeepEqual(want, got) {
		return ""
	}
	return fmt.Sprintf("want %#v\n got %#v", want, got)
}

// TestTermReachesProcessGroup: a TERM to a process reaches the processes of
// its group too (a background job of a shell), as a terminal's signal does
// and as on Docker, although envd's SendSignal signals the process alone.
func TestTermReachesProcessGroup(t *testing.T) {
	srv := startFake(t)
	b := newBackend(t, srv, nil)
	env := startEnv(t, b)
	ctx := ctxT(t, time.Minute)
	r, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 60})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = env.Client.Kill(context.Background(), r.SandboxID) }()
	p, err := env.Client.Stream(ctx, events.ExecRequest{SandboxID: r.SandboxID,
		Cmd: []string{"sh", "-c", `sleep 60 & echo $!; wait`}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var out strings.Builder
	for !strings.HasSuffix(out.String(), "\n") {
		c, err := p.Next()
		if err != nil {
			t.Fatalf("waiting for the child's pid: %v (%q)", err, out.String())
		}
		out.Write(c.Data)
	}
	child := strings.TrimSpace(out.String())
	alive := []string{"sh", "-c", `[ -d /proc/$1 ] && ! grep -q '^State:.*Z' /proc/$1/status`, "sh", child}
	if res, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: r.SandboxID, Cmd: alive}); err != nil || res.ExitCode != 0 {
		t.Fatalf("child %s not running before the TERM: %+v, %v", child, res, err)
	}
	if err := env.Client.Signal(ctx, r.SandboxID, p.ProcessID, "TERM"); err != nil {
		t.Fatal(err)
	}
	if res, err := p.Wait(); err != nil || res.Signal != "TERM" {
		t.Fatalf("after TERM: %+v, %v; want TERM", res, err)
	}
	sbxtest.Eventually(t, 10*time.Second, func() bool {
		res, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: r.SandboxID, Cmd: alive})
		return err == nil && res.ExitCode != 0
	}, "child %s of the TERMed shell, in its process group, still runs", child)
}
