package integration

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/auth"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/services/auditor"
	"github.com/sandboxio/sandboxio/services/reaper"
)

// TestCanarySecretFoundNowhere plants a canary as a create secret and in
// credential-shaped exec arguments, runs every kind of operation, and looks
// for it in every stream (SBX_OPS, SBX_OUT, the KV buckets, the object
// store), the audit log, every log line of every service, and the auditor's
// spans and metrics. SBX_CMD, which carries the secret to the worker, must be
// empty once the commands are acknowledged.
func TestCanarySecretFoundNowhere(t *testing.T) {
	logs := &logCapture{}
	log := logs.logger()
	env := sbxtest.Start(t, sbxtest.Options{Logger: log})
	js, err := jetstream.New(env.Conn("inspector"))
	if err != nil {
		t.Fatal(err)
	}
	sink := &spanSink{}
	auditPath := filepath.Join(t.TempDir(), "audit.jsonl")
	aud, audSvc := startAuditor(t, env.Conn("auditor"), auditor.Config{LogPath: auditPath, SpanExporter: sink, Logger: log, Batch: 8})
	_, reapSvc := startReaper(t, env.Conn("reaper"), reaper.Config{Logger: log, Interval: time.Second, LeaderTTL: time.Second, SigningSeed: env.SigningSeed(auth.ReaperSigner)})

	canary := "cnry" + events.NewID()
	var (
		secretVal = canary + "Secret"
		tokenVal  = canary + "Token"
		bearerVal = canary + "Bearer0123456789"
		flagVal   = canary + "Flag"
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := env.Client

	sb, err := cl.Create(ctx, events.CreateRequest{TimeoutS: 300,
		Secrets: map[string]string{"DB_PASSWORD": secretVal}, Env: map[string]string{"PLAIN": "x"}})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	id := sb.SandboxID

	// The secret reaches the sandbox (buffered output is a reply, never stored).
	res, err := cl.Exec(ctx, events.ExecRequest{SandboxID: id, Cmd: []string{"env", "DB_PASSWORD"}})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != secretVal {
		t.Fatalf("secret did not reach the sandbox: %v %+v", err, res)
	}
	// Credentials in argv and env, in the shapes people use.
	res, err = cl.Exec(ctx, events.ExecRequest{SandboxID: id,
		Cmd: []string{"exit", "0", "token=" + tokenVal, "Authorization: Bearer " + bearerVal, "--password", flagVal,
			"--header", "authorization: basic " + bearerVal, "DB_PASSWORD=" + secretVal},
		Env: map[string]string{"API_TOKEN": tokenVal}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec with credentials: %v %+v", err, res)
	}
	// Failures whose error messages quote argv: the secret value, and a
	// credential-looking argument.
	for _, argv0 := range []string{"nosuch-" + secretVal, "token=" + tokenVal} {
		_, err = cl.Exec(ctx, events.ExecRequest{SandboxID: id, Cmd: []string{argv0}})
		if !errors.Is(err, events.ErrExecFailed) {
			t.Fatalf("exec %q: want ExecFailed, got %v", argv0, err)
		}
		if strings.Contains(err.Error(), canary) {
			t.Errorf("error returned to the client quotes the canary: %v", err)
		}
	}

	// Streamed, with stdin and a TERM.
	p, err := cl.Stream(ctx, events.ExecRequest{SandboxID: id, Cmd: []string{"cat", "token=" + tokenVal}, KeepStdinOpen: true})
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	if err := cl.SendStdin(ctx, id, p.ProcessID, []byte("hello\n"), false); err != nil {
		t.Fatalf("stdin: %v", err)
	}
	chunk, err := p.Next()
	if err != nil || string(chunk.Data) != "hello\n" {
		t.Fatalf("streamed output: %q %v", chunk.Data, err)
	}
	if err := cl.Signal(ctx, id, p.ProcessID, "TERM"); err != nil {
		t.Fatalf("signal: %v", err)
	}
	for _, err := range p.Chunks() {
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
	}
	if r, err := p.Wait(); err != nil || r.ExitCode != 143 {
		t.Fatalf("streamed exit: %+v %v", r, err)
	}
	// Streamed, killed with KILL.
	p, err = cl.Stream(ctx, events.ExecRequest{SandboxID: id, Cmd: []string{"sleep", "60000", "Authorization: Bearer " + bearerVal}})
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	if err := cl.Signal(ctx, id, p.ProcessID, "KILL"); err != nil {
		t.Fatalf("signal: %v", err)
	}
	for _, err := range p.Chunks() {
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
	}
	if _, err := p.Wait(); err != nil {
		t.Fatalf("killed stream: %v", err)
	}

	if _, err := cl.RunCode(ctx, events.RunCodeRequest{SandboxID: id, Code: "print(1)  # api_key=" + tokenVal}); err != nil {
		t.Fatalf("run_code: %v", err)
	}
	if err := rawCall(ctx, cl.Conn(), events.OpFilesWrite, events.FilesWriteRequest{SandboxID: id, Path: "/work/notes.txt",
		Data: base64.StdEncoding.EncodeToString([]byte("hello"))}, nil); err != nil {
		t.Fatalf("files write: %v", err)
	}
	var read events.FilesReadReply
	if err := rawCall(ctx, cl.Conn(), events.OpFilesRead, events.FilesReadRequest{SandboxID: id, Path: "/work/notes.txt"}, &read); err != nil {
		t.Fatalf("files read: %v", err)
	}
	var list events.FilesListReply
	if err := rawCall(ctx, cl.Conn(), events.OpFilesList, events.FilesListRequest{SandboxID: id, Path: "/work"}, &list); err != nil || len(list.Entries) != 1 {
		t.Fatalf("files list: %v %+v", err, list)
	}
	if _, err := cl.SetTimeout(ctx, id, 2*time.Minute); err != nil {
		t.Fatalf("set_timeout: %v", err)
	}
	// A second sandbox with the secret, left to reach its deadline (worker
	// kill and reaper).
	short, err := cl.Create(ctx, events.CreateRequest{TimeoutS: 1, Secrets: map[string]string{"DB_PASSWORD": secretVal}})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if _, err := cl.Kill(ctx, id); err != nil {
		t.Fatalf("kill: %v", err)
	}
	sbxtest.Eventually(t, 15*time.Second, func() bool {
		s, err := cl.Get(ctx, short.SandboxID)
		return err == nil && s.State.Ended()
	}, "sandbox %s outlived its deadline", short.SandboxID)

	entries := waitAudited(t, env, js, auditPath, 30*time.Second)
	kinds := map[string]int{}
	for _, r := range records(t, entries) {
		kinds[r.Kind+"/"+r.Phase]++
	}
	for _, k := range []string{events.OpCreate, events.OpExec, events.OpRunCode, events.OpFilesWrite, events.OpFilesRead,
		events.OpFilesList, events.OpSetTimeout, events.OpKill} {
		if kinds[k+"/"+events.EventOpened] == 0 || kinds[k+"/"+events.EventClosed] == 0 {
			t.Errorf("no %s record opened and closed in the audit log: %v", k, kinds)
		}
	}
	rec := httptest.NewRecorder()
	aud.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	metrics := readAll(t, rec.Result().Body)
	if !strings.Contains(string(metrics), "sandboxio_operations_total") {
		t.Errorf("metrics have no operation counter:\n%s", metrics)
	}
	reapSvc.stop(t)
	audSvc.stop(t) // flushes the spans

	// SBX_CMD is a work queue: every command, creates with their secrets
	// included, is gone once acknowledged.
	sbxtest.Eventually(t, 10*time.Second, func() bool { return streamMsgs(t, js, events.StreamCommands) == 0 },
		"SBX_CMD still holds %d commands", streamMsgs(t, js, events.StreamCommands))

	needle := []byte(canary)
	found, scanned := scanStreams(t, js, needle)
	if scanned == 0 {
		t.Fatal("no stream message was scanned")
	}
	for _, f := range found {
		t.Errorf("canary in %s", f)
	}
	audit, err := os.ReadFile(auditPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range linesWith(audit, needle) {
		t.Errorf("canary in the audit log: %s", l)
	}
	logged := logs.Bytes()
	if len(logged) == 0 {
		t.Fatal("no log line captured")
	}
	for _, l := range linesWith(logged, needle) {
		t.Errorf("canary in a log line: %s", l)
	}
	spans := sink.Spans()
	if len(spans) == 0 {
		t.Fatal("the auditor exported no span")
	}
	for _, s := range spans {
		var b strings.Builder
		b.WriteString(s.Name + " " + s.Status.Description)
		for _, a := range s.Attributes {
			b.WriteString(" " + string(a.Key) + "=" + a.Value.String())
		}
		for _, e := range s.Events {
			b.WriteString(" " + e.Name)
			for _, a := range e.Attributes {
				b.WriteString(" " + string(a.Key) + "=" + a.Value.String())
			}
		}
		for _, a := range s.Resource.Attributes() {
			b.WriteString(" " + string(a.Key) + "=" + a.Value.String())
		}
		if strings.Contains(b.String(), canary) {
			t.Errorf("canary in span %s: %s", s.Name, b.String())
		}
	}
	for _, l := range linesWith(metrics, needle) {
		t.Errorf("canary in a metric: %s", l)
	}
	t.Logf("searched %d stream messages, %d audit lines, %d log bytes, %d spans, %d metric bytes",
		scanned, len(entries), len(logged), len(spans), len(metrics))
}
