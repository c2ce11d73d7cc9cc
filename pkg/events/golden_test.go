package events

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/*.json from the samples")

var (
	t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	t1 = t0.Add(5 * time.Minute)
)

func ptr[T any](v T) *T { return &v }

var lease = WorkerLease{Backend: "fake", Worker: "01jdxk8v6m3n4p5q6r7s8t9v0w", Host: "host-1", Isolation: TierContainer,
	Capabilities: Capabilities{CapExec, CapFiles, CapStream}, Capacity: 64, Load: 3, Version: "0.1.0",
	ProtocolVersion: ProtocolVersion, StartedAt: t0, HeartbeatAt: t1}

var sandbox = Sandbox{SandboxID: "01jdxk9a2b3c4d5e6f7g8h9j0k", Backend: "docker", Worker: "01jdxk8v6m3n4p5q6r7s8t9v0w",
	Class: "standard", State: StateRunning, Isolation: TierContainer, Capabilities: Capabilities{CapExec, CapFiles, CapStream},
	Image: "sandboxio/python:3.11", Owner: "alice", Metadata: map[string]string{"team": "ml"}, CreatedAt: t0, Deadline: t1,
	CreateOp: "01jdxk9a2b3c4d5e6f7g8h9j0m"}

var createRequest = CreateRequest{Class: "standard", TimeoutS: 300, RequireIsolation: TierContainer,
	Network: &NetworkPolicy{Egress: EgressAllow}, Resources: &Resources{CPUs: 1.5, MemoryMB: 512, PIDs: 256, DiskMB: 1024},
	Env: map[string]string{"LANG": "C.UTF-8"}, Secrets: map[string]string{"API_TOKEN": "s3cr3t"},
	Metadata: map[string]string{"team": "ml"}, Requires: []Capability{CapExec, CapStream}, IdempotencyKey: "job-42", Owner: "alice"}

// goldenSamples is one representative value of every type that crosses the
// wire. Each is marshalled and compared with testdata/golden/<name>.json, and
// unmarshalled back equal. internal/schemas validates the same files against
// docs/protocol.
var goldenSamples = []struct {
	name string
	v    any
}{
	{"create_request", createRequest},
	{"create_request_minimal", CreateRequest{TimeoutS: 60}},
	{"create_reply", CreateReply{SandboxID: sandbox.SandboxID, Backend: "docker", Class: "standard", Isolation: TierContainer,
		Capabilities: Capabilities{CapExec, CapFiles, CapStream}, Deadline: t1, Warnings: []string{"isolation tier is unknown"}}},
	{"exec_request", ExecRequest{SandboxID: sandbox.SandboxID, Cmd: []string{"python", "-c", "print('hi')"},
		Env: map[string]string{"PYTHONUNBUFFERED": "1"}, Cwd: "/work", Stdin: "AAH/", StdinEncoding: EncodingBase64,
		TimeoutMS: 30000, OutputLimit: 1 << 20}},
	{"exec_request_stream", ExecRequest{SandboxID: sandbox.SandboxID, Cmd: []string{"cat"}, Stream: true, KeepStdinOpen: true, ProcessID: "p1"}},
	{"exec_result", ExecResult{ProcessID: "p1", ExitCode: 0, Stdout: []byte("hi\n"), Stderr: []byte("naïve ✓\n"),
		DurationMS: 12, StdoutBytes: 3, StderrBytes: 10}},
	{"exec_result_binary", ExecResult{ProcessID: "p2", ExitCode: 1, Stdout: []byte{0x00, 0xff, 0xfe, 'a'}, Stderr: []byte("ok\n"),
		Truncated: true, DurationMS: 7, StdoutBytes: 300000, StderrBytes: 3}},
	{"exec_result_timeout", ExecResult{ProcessID: "p3", ExitCode: 137, Stdout: []byte("partial"), TimedOut: true,
		Signal: "KILL", DurationMS: 1000, StdoutBytes: 7}},
	{"exit_marker", ExecResult{ProcessID: "p1", ExitCode: 0, Streamed: true, DurationMS: 2500, StdoutBytes: 1000000, StderrBytes: 0}},
	{"exit_marker_error", ExecResult{ProcessID: "p4", ExitCode: 137, Streamed: true, TimedOut: true, Signal: "KILL",
		DurationMS: 5000, StdoutBytes: 10, Err: Errorf(CodeExecutionTimeout, "process p4 ran past its timeout and was killed")}},
	{"exec_stream_reply", ExecStreamReply{SandboxID: "s1", ProcessID: "p1", Subjects: StreamSubjectsFor(TenantOpen, "s1", "p1")}},
	{"resize_request", ResizeRequest{SandboxID: "s1", ProcessID: "p1", Rows: 40, Cols: 120}},
	{"code_context_request", CodeContextRequest{SandboxID: "s1", ContextID: "c1", Action: ContextCreate, Language: "python"}},
	{"code_context_reply", CodeContextReply{ContextID: "c1", Action: ContextCreate}},
	{"files_watch_request", FilesWatchRequest{SandboxID: "s1", Path: "/work", TimeoutMS: 10000, MaxEvents: 100}},
	{"files_watch_reply", FilesWatchReply{Events: []FileEvent{{Type: FileCreate, Path: "/work/a"}, {Type: FileRename, Path: "/work/a"},
		{Type: FileCreate, Path: "/work/b"}, {Type: FileCreate, Path: "/work/d", IsDir: true}}, Truncated: true}},
	{"run_code_request", RunCodeRequest{SandboxID: sandbox.SandboxID, Language: "python", Code: "1+1", ContextID: "ctx1", TimeoutMS: 10000}},
	{"run_code_reply", RunCodeReply{
		ExecResult: ExecResult{ExitCode: 0, Stdout: []byte("hello\n"), DurationMS: 40, StdoutBytes: 6},
		Results: []RichResult{{Text: "2", IsMainResult: true}, {PNG: base64.StdEncoding.EncodeToString([]byte("\x89PNG")),
			JSON: map[string]any{"a": 1.0, "b": []any{"x"}}}},
	}},
	{"run_code_reply_error", RunCodeReply{
		ExecResult: ExecResult{ExitCode: 1, Stderr: []byte("Traceback\n"), DurationMS: 5, StderrBytes: 10},
		Results:    []RichResult{},
		Error:      &CodeError{Name: "ZeroDivisionError", Value: "division by zero", Traceback: "Traceback (most recent call last): ..."},
	}},
	{"files_write_request", FilesWriteRequest{SandboxID: "s1", Path: "/work/a.txt", Data: base64.StdEncoding.EncodeToString([]byte("hello")), Mode: 0o644}},
	{"files_write_request_ref", FilesWriteRequest{SandboxID: "s1", Path: "/work/big.bin", Ref: &FileRef{Bucket: BucketFiles, Name: "upload-1", Size: 10 << 20, Digest: "SHA-256=abc"}}},
	{"files_write_reply", FilesWriteReply{Path: "/work/a.txt", Size: 5}},
	{"files_read_request", FilesReadRequest{SandboxID: "s1", Path: "/work/a.txt"}},
	{"files_read_reply", FilesReadReply{Path: "/work/a.txt", Size: 5, Data: base64.StdEncoding.EncodeToString([]byte("hello"))}},
	{"files_read_reply_ref", FilesReadReply{Path: "/work/big.bin", Size: 10 << 20, Ref: &FileRef{Bucket: BucketFiles, Name: "s1-download-1", Size: 10 << 20}}},
	{"files_list_request", FilesListRequest{SandboxID: "s1", Path: "/work"}},
	{"files_list_reply", FilesListReply{Entries: []FileInfo{{Name: "a.txt", Path: "/work/a.txt", Size: 5, Mode: 0o644, ModTime: t0},
		{Name: "lib", Path: "/work/lib", Mode: 0o755, IsDir: true, ModTime: t0}}}},
	{"signal_request", SignalRequest{SandboxID: "s1", ProcessID: "p1", Signal: "TERM"}},
	{"stdin_request", StdinRequest{SandboxID: "s1", ProcessID: "p1", Data: "line\n", Close: true}},
	{"ok_reply", OKReply{OK: true}},
	{"kill_request", KillRequest{SandboxID: "s1"}},
	{"kill_reply", KillReply{SandboxID: "s1", State: StateGone}},
	{"get_request", GetRequest{SandboxID: sandbox.SandboxID}},
	{"list_request", ListRequest{Backend: "docker", State: StateRunning, Metadata: map[string]string{"team": "ml"}, Owner: "alice", Limit: 10}},
	{"list_reply", ListReply{Sandboxes: []Sandbox{sandbox}}},
	{"set_timeout_request", SetTimeoutRequest{SandboxID: "s1", TimeoutS: 600}},
	{"set_timeout_reply", SetTimeoutReply{SandboxID: "s1", Deadline: t1}},
	{"backends_request", BackendsRequest{}},
	{"attach_request", AttachRequest{SandboxID: "s1", ProcessID: "p1", Nonce: "n1"}},
	{"attach_reply", AttachReply{SandboxID: "s1", ProcessID: "p1", Replay: ReplaySubject("ACME", "n1"),
		Subjects: StreamSubjectsFor("ACME", "s1", "p1"), Stored: 3}},
	{"quota_request", QuotaRequest{}},
	{"quota_reply", QuotaReply{Tenant: "ACME", Name: "team-a", Limits: TenantLimits{MaxSandboxes: 10, MaxExecs: 20, MaxLifetimeS: 36000},
		Usage: TenantUsage{Sandboxes: 2, Execs: 1, LifetimeS: 600}}},
	{"files_get_request", FilesGetRequest{SandboxID: "s1", Name: "ACME/s1/f1", Part: 0}},
	{"files_get_reply", FilesGetReply{Name: "ACME/s1/f1", Part: 0, Parts: 3, Data: "aGk="}},
	{"files_put_request", FilesPutRequest{SandboxID: "s1", Name: "ACME/s1/u1", Part: 1, Data: "aGk="}},
	{"files_put_reply", FilesPutReply{Name: "ACME/s1/u1", Part: 1, Size: 2}},
	{"backends_reply", BackendsReply{
		Backends: []BackendInfo{{Name: "fake", Isolation: TierContainer, Capabilities: lease.Capabilities, Workers: []WorkerLease{lease}, Capacity: 64, Load: 3}},
		Classes:  []ClassInfo{{Name: "fake", Backend: "fake", Default: true}, {Name: "hardened", Backend: "docker", RequireIsolation: TierGVisor}},
	}},
	{"sandbox", sandbox},
	{"sandbox_ended", func() Sandbox {
		s := sandbox
		s.State = StateGone
		s.EndedAt = ptr(t1)
		s.EndReason = "killed"
		return s
	}()},
	{"worker_lease", lease},
	{"create_command", CreateCommand{SandboxID: sandbox.SandboxID, Spec: ClassSpec{Name: "standard", Backend: "docker",
		Image: "sandboxio/python:3.11", Runtime: "runc", RequireIsolation: TierContainer, Resources: &Resources{CPUs: 1},
		ReadOnlyRoot: true, Options: map[string]string{"shm_mb": "64"}}, Request: createRequest, Deadline: t1}},
	{"op_record_opened", OpRecord{OpID: "01jdxkb0000000000000000000", Kind: OpExec, Phase: EventOpened, SandboxID: "s1", Backend: "docker",
		Worker: "w1", ProcessID: "p1", Owner: "alice", StartedAt: t0, Summary: map[string]string{"cmd": "echo hi"},
		Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}},
	{"op_record_closed", OpRecord{OpID: "01jdxkb0000000000000000000", Kind: OpExec, Phase: EventClosed, SandboxID: "s1", Backend: "docker",
		Worker: "w1", ProcessID: "p1", StartedAt: t0, EndedAt: ptr(t0.Add(1500 * time.Millisecond)), DurationMS: 1500,
		Outcome: OutcomeError, ErrorCode: CodeExecutionTimeout, Error: "process p1 ran past its timeout and was killed",
		ExitCode: ptr(137), BytesIn: 0, BytesOut: 42, Summary: map[string]string{"cmd": "sleep 10"}, Metadata: map[string]string{"team": "ml"}}},
	{"ports_expose_request", PortsExposeRequest{SandboxID: "s1", Port: 8000, Access: PortPrivate}},
	{"ports_expose_reply", PortInfo{SandboxID: "s1", Port: 8000, Access: PortPrivate, URL: "http://8000-s1.sbx.localhost:8480/",
		PathURL: "http://127.0.0.1:8480/sandboxes/s1/ports/8000/", Token: "sbxp_3q2-7wAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", ExposedAt: t0}},
	{"ports_list_request", PortsListRequest{SandboxID: "s1"}},
	{"ports_list_reply", PortsListReply{Ports: []PortInfo{{SandboxID: "s1", Port: 8000, Access: PortPrivate, URL: "http://8000-s1.sbx.localhost:8480/",
		PathURL: "http://127.0.0.1:8480/sandboxes/s1/ports/8000/", ExposedAt: t0}, {SandboxID: "s1", Port: 3000, Access: PortPublic, ExposedAt: t0}}}},
	{"ports_unexpose_request", PortsUnexposeRequest{SandboxID: "s1", Port: 8000}},
	{"ports_unexpose_reply", PortsUnexposeReply{SandboxID: "s1", Port: 8000, WasExposed: true}},
	{"ports_token_request", PortsTokenRequest{SandboxID: "s1", Port: 8000, Rotate: true, LinkTTLS: 600}},
	{"ports_token_reply", PortInfo{SandboxID: "s1", Port: 8000, Access: PortPrivate, URL: "http://8000-s1.sbx.localhost:8480/",
		Link: "http://8000-s1.sbx.localhost:8480/?sbx_link=1764590400.c2lnbmF0dXJl", LinkExpires: ptr(t1), ExposedAt: t0}},
	{"error_body", ErrorBody{Error: Errorf(CodeExecutionTimeout, "process p1 ran past its timeout and was killed").With("sandbox_id", "s1")}},
	{"error_body_unknown_field", ErrorBody{Error: Errorf(CodeUnknownField, "unknown field %q", "timeout").With("field", "timeout")}},
}

func TestGolden(t *testing.T) {
	names := map[string]bool{}
	for _, s := range goldenSamples {
		t.Run(s.name, func(t *testing.T) {
			if names[s.name] {
				t.Fatalf("sample %s listed twice", s.name)
			}
			names[s.name] = true
			got, err := json.MarshalIndent(s.v, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			path := filepath.Join("testdata", "golden", s.name+".json")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./pkg/events -run TestGolden -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from the golden file (a wire change? run with -update and review the diff)\ngot:\n%s\nwant:\n%s", path, got, want)
			}
			back := reflect.New(reflect.TypeOf(s.v))
			if err := json.Unmarshal(want, back.Interface()); err != nil {
				t.Fatalf("unmarshal %s: %v", path, err)
			}
			if !reflect.DeepEqual(back.Elem().Interface(), s.v) {
				t.Errorf("%s does not unmarshal to the sample:\ngot  %#v\nwant %#v", path, back.Elem().Interface(), s.v)
			}
		})
	}
	// Every golden file belongs to a sample: a removed sample leaves no stale file.
	files, _ := filepath.Glob(filepath.Join("testdata", "golden", "*.json"))
	for _, f := range files {
		if n := strings.TrimSuffix(filepath.Base(f), ".json"); !names[n] {
			if *update {
				_ = os.Remove(f)
				continue
			}
			t.Errorf("%s has no sample in goldenSamples", f)
		}
	}
}

// Requests in the golden files are what a client sends: they must pass the
// server's strict decoder and its validation.
func TestGoldenRequestsDecodeStrictly(t *testing.T) {
	for _, s := range goldenSamples {
		if !strings.HasSuffix(s.name, "_request") && !strings.Contains(s.name, "_request_") {
			continue
		}
		// files_write_request -> files.write; ports_list_request -> ports.list;
		// run_code_request -> run_code.
		op := strings.Replace(strings.Split(s.name, "_request")[0], "files_", "files.", 1)
		op = strings.Replace(op, "ports_", "ports.", 1)
		op = strings.Replace(op, "snapshots_", "snapshots.", 1)
		b, err := os.ReadFile(filepath.Join("testdata", "golden", s.name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		if e := validateCase(op, string(b)); e != nil {
			t.Errorf("%s (op %s): %v", s.name, op, e)
		}
	}
}

func TestExecResultWireShape(t *testing.T) {
	tests := []struct {
		name             string
		r                ExecResult
		stdout, stderr   string
		encoding         string
		hasEncodingField bool
	}{
		{"utf8", ExecResult{Stdout: []byte("héllo"), Stderr: []byte("x")}, "héllo", "x", "", false},
		{"empty", ExecResult{}, "", "", "", false},
		{"binary stdout makes both base64", ExecResult{Stdout: []byte{0xff}, Stderr: []byte("x")}, "/w==", "eA==", EncodingBase64, true},
		{"binary stderr makes both base64", ExecResult{Stdout: []byte("a"), Stderr: []byte{0xc3}}, "YQ==", "ww==", EncodingBase64, true},
	}
	for _, tt := range tests {
		b, err := json.Marshal(tt.r)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		if m["stdout"] != tt.stdout || m["stderr"] != tt.stderr {
			t.Errorf("%s: stdout/stderr = %q/%q, want %q/%q", tt.name, m["stdout"], m["stderr"], tt.stdout, tt.stderr)
		}
		enc, has := m["encoding"]
		if has != tt.hasEncodingField || (has && enc != tt.encoding) {
			t.Errorf("%s: encoding = %v (present %v), want %q", tt.name, enc, has, tt.encoding)
		}
		for _, k := range []string{"exit_code", "streamed", "timed_out", "oom_killed", "truncated", "duration_ms", "stdout_bytes", "stderr_bytes"} {
			if _, ok := m[k]; !ok {
				t.Errorf("%s: %s missing from %s", tt.name, k, b)
			}
		}
	}
	var r ExecResult
	if err := json.Unmarshal([]byte(`{"exit_code":0,"stdout":"x","stderr":"","encoding":"hex"}`), &r); err == nil {
		t.Error("an unknown encoding was accepted")
	}
	if err := json.Unmarshal([]byte(`{"exit_code":0,"stdout":"!","stderr":"","encoding":"base64"}`), &r); err == nil {
		t.Error("bad base64 was accepted")
	}
}

func TestRunCodeReplyFlat(t *testing.T) {
	b, err := json.Marshal(RunCodeReply{ExecResult: ExecResult{ExitCode: 2, Stdout: []byte("o")}})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	_ = json.Unmarshal(b, &m)
	if string(m["exit_code"]) != "2" || string(m["stdout"]) != `"o"` || string(m["results"]) != "[]" {
		t.Errorf("run_code reply is not flat: %s", b)
	}
	if _, ok := m["error"]; ok {
		t.Errorf("error present without a code error: %s", b)
	}
	if _, ok := m["ExecResult"]; ok {
		t.Errorf("embedded struct leaked: %s", b)
	}
}

func FuzzExecResultJSON(f *testing.F) {
	f.Add([]byte("hello\n"), []byte(""), 0, false)
	f.Add([]byte{0, 1, 2, 0xff}, []byte("err"), 1, true)
	f.Add([]byte("naïve ✓"), []byte{0xed, 0xa0, 0x80}, 137, false) // an encoded surrogate is not UTF-8
	f.Add([]byte(`"\u0000</script>`), []byte("\r\n\t"), -1, true)
	f.Add([]byte{0xef, 0xbf, 0xbd}, []byte{0xc3}, 2, false)
	f.Fuzz(func(t *testing.T, stdout, stderr []byte, code int, streamed bool) {
		in := ExecResult{ProcessID: "p1", ExitCode: code, Stdout: stdout, Stderr: stderr, Streamed: streamed,
			StdoutBytes: int64(len(stdout)), StderrBytes: int64(len(stderr))}
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		var out ExecResult
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("unmarshal %s: %v", b, err)
		}
		if !bytes.Equal(out.Stdout, stdout) || !bytes.Equal(out.Stderr, stderr) {
			t.Fatalf("output mangled: %q/%q -> %s -> %q/%q", stdout, stderr, b, out.Stdout, out.Stderr)
		}
		out.Stdout, out.Stderr, in.Stdout, in.Stderr = nil, nil, nil, nil
		if !reflect.DeepEqual(out, in) {
			t.Fatalf("fields changed: %+v -> %+v", in, out)
		}
		// The same holds inside run_code's flattened reply.
		rb, err := json.Marshal(RunCodeReply{ExecResult: ExecResult{Stdout: stdout, Stderr: stderr}})
		if err != nil {
			t.Fatal(err)
		}
		var rr RunCodeReply
		if err := json.Unmarshal(rb, &rr); err != nil || !bytes.Equal(rr.Stdout, stdout) || !bytes.Equal(rr.Stderr, stderr) {
			t.Fatalf("run_code output mangled: %s: %v", rb, err)
		}
	})
}
