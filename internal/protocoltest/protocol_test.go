package protocoltest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/schemas"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker/fake"
)

// The protocol as a foreign client knows it: literal subjects, header names
// and JSON, deliberately not taken from pkg/events.
const (
	apiPrefix       = "sbx.api.v1."
	outStream       = "SBX_OUT"
	hdrErrCode      = "Nats-Service-Error-Code"
	hdrErr          = "Nats-Service-Error"
	hdrSeq          = "Sbx-Seq"
	hdrExitCode     = "Sbx-Exit-Code"
	hdrLastSeqOut   = "Sbx-Last-Seq-Stdout"
	hdrLastSeqErr   = "Sbx-Last-Seq-Stderr"
	requestDeadline = 15 * time.Second
)

type harness struct {
	t   *testing.T
	env *sbxtest.Env
	nc  *nats.Conn
	js  jetstream.JetStream
	v   *schemas.Validator
}

func start(t *testing.T) *harness {
	t.Helper()
	env := sbxtest.Start(t, sbxtest.Options{Listen: true})
	if env.URL == "" {
		t.Fatal("sbxtest gave no URL")
	}
	nc, err := nats.Connect(env.URL, nats.Name("protocoltest"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	v, err := schemas.LoadValidator("../../docs/protocol")
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, env: env, nc: nc, js: js, v: v}
}

// request sends body to sbx.api.v1.<op> and returns the raw reply.
func (h *harness) request(op string, body []byte) *nats.Msg {
	h.t.Helper()
	m, err := h.nc.Request(apiPrefix+op, body, requestDeadline)
	if err != nil {
		h.t.Fatalf("request %s: %v", op, err)
	}
	return m
}

// ok sends a request that must succeed, checks the reply against its schema
// and decodes it into out.
func (h *harness) ok(op string, body string, schema string, out any) []byte {
	h.t.Helper()
	m := h.request(op, []byte(body))
	if code := m.Header.Get(hdrErrCode); code != "" {
		h.t.Fatalf("%s %s: error %s %s: %s", op, body, code, m.Header.Get(hdrErr), m.Data)
	}
	if err := h.v.Validate(schema, m.Data); err != nil {
		h.t.Errorf("%s reply: %v\n%s", op, err, m.Data)
	}
	if out != nil {
		if err := json.Unmarshal(m.Data, out); err != nil {
			h.t.Fatalf("%s reply %s: %v", op, m.Data, err)
		}
	}
	return m.Data
}

type errorBody struct {
	Error struct {
		Code      string         `json:"code"`
		Name      string         `json:"name"`
		Message   string         `json:"message"`
		Retryable bool           `json:"retryable"`
		Details   map[string]any `json:"details"`
	} `json:"error"`
}

// checkError asserts that m is a failed reply with code in both the micro
// header and the JSON body.
func (h *harness) checkError(m *nats.Msg, code string) errorBody {
	h.t.Helper()
	var eb errorBody
	if err := json.Unmarshal(m.Data, &eb); err != nil {
		h.t.Fatalf("error body %q: %v", m.Data, err)
	}
	if err := h.v.Validate("error.json", m.Data); err != nil {
		h.t.Errorf("%v\n%s", err, m.Data)
	}
	if eb.Error.Code != code {
		h.t.Errorf("body code = %s, want %s (%s)", eb.Error.Code, code, m.Data)
	}
	if want := strings.TrimPrefix(code, "SBX_E"); m.Header.Get(hdrErrCode) != strings.TrimLeft(want, "0") {
		h.t.Errorf("%s = %q, want %q", hdrErrCode, m.Header.Get(hdrErrCode), want)
	}
	if hv := m.Header.Get(hdrErr); !strings.HasPrefix(hv, eb.Error.Name+": ") || eb.Error.Name == "" {
		h.t.Errorf("%s = %q, want it to start with the name %q", hdrErr, hv, eb.Error.Name)
	}
	if eb.Error.Message == "" {
		h.t.Errorf("error without a message: %s", m.Data)
	}
	return eb
}

type createReply struct {
	SandboxID    string   `json:"sandbox_id"`
	Backend      string   `json:"backend"`
	Class        string   `json:"class"`
	Isolation    string   `json:"isolation"`
	Capabilities []string `json:"capabilities"`
	Deadline     string   `json:"deadline"`
	Warnings     []string `json:"warnings"`
}

type execResult struct {
	ProcessID   string `json:"process_id"`
	ExitCode    int    `json:"exit_code"`
	Stdout      string `json:"stdout"`
	Stderr      string `json:"stderr"`
	Encoding    string `json:"encoding"`
	Streamed    bool   `json:"streamed"`
	TimedOut    bool   `json:"timed_out"`
	Truncated   bool   `json:"truncated"`
	StdoutBytes int64  `json:"stdout_bytes"`
	SbxError    *struct {
		Code string `json:"code"`
	} `json:"sbx_error"`
}

type streamReply struct {
	SandboxID string `json:"sandbox_id"`
	ProcessID string `json:"process_id"`
	Subjects  struct {
		Stdout, Stderr, Exit, Filter, Stream, Live string
	} `json:"subjects"`
}

type sandboxRecord struct {
	SandboxID string `json:"sandbox_id"`
	Backend   string `json:"backend"`
	State     string `json:"state"`
}

type listReply struct {
	Sandboxes []sandboxRecord `json:"sandboxes"`
}

func (h *harness) create() createReply {
	h.t.Helper()
	var r createReply
	h.ok("create", `{"timeout_s":60,"metadata":{"suite":"protocoltest"}}`, "create.reply.json", &r)
	return r
}

func TestMicroDiscovery(t *testing.T) {
	h := start(t)
	m, err := h.nc.Request("$SRV.INFO.sandboxio", nil, requestDeadline)
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Type      string            `json:"type"`
		Name      string            `json:"name"`
		Version   string            `json:"version"`
		Metadata  map[string]string `json:"metadata"`
		Endpoints []struct {
			Name     string            `json:"name"`
			Subject  string            `json:"subject"`
			Metadata map[string]string `json:"metadata"`
		} `json:"endpoints"`
	}
	if err := json.Unmarshal(m.Data, &info); err != nil {
		t.Fatalf("%s: %v", m.Data, err)
	}
	if info.Name != "sandboxio" || info.Metadata["protocol_version"] != "1" || info.Version == "" {
		t.Errorf("service info: %s", m.Data)
	}
	subjects := map[string]string{}
	for _, e := range info.Endpoints {
		subjects[e.Subject] = e.Metadata["op"]
	}
	ops := []string{"create", "exec", "run_code", "files.write", "files.read", "files.list", "signal", "stdin", "kill", "get", "list", "set_timeout", "backends",
		"attach", "quota", "files.get", "files.put", "resize", "code_context", "files.watch",
		"pause", "resume", "snapshot", "snapshots.list", "snapshots.delete",
		"ports.expose", "ports.list", "ports.unexpose", "ports.token"}
	for _, op := range ops {
		if got, ok := subjects[apiPrefix+op]; !ok || got != op {
			t.Errorf("endpoint %s%s missing or with op %q; endpoints: %v", apiPrefix, op, got, subjects)
		}
	}
	if len(info.Endpoints) != len(ops) {
		t.Errorf("%d endpoints, want %d", len(info.Endpoints), len(ops))
	}
	// PING answers too, as `nats micro ls` needs.
	if _, err := h.nc.Request("$SRV.PING.sandboxio", nil, requestDeadline); err != nil {
		t.Errorf("$SRV.PING.sandboxio: %v", err)
	}
	// An op that is not part of v1 has no responder.
	if _, err := h.nc.Request(apiPrefix+"teleport", []byte(`{}`), 2*time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("unknown op: %v, want no responders", err)
	}
}

func TestCreateExecGetListKill(t *testing.T) {
	h := start(t)
	sb := h.create()
	if sb.Backend != "fake" || sb.Class != "fake" || len(sb.SandboxID) == 0 {
		t.Fatalf("create reply %+v", sb)
	}
	if _, err := time.Parse(time.RFC3339Nano, sb.Deadline); err != nil {
		t.Errorf("deadline %q: %v", sb.Deadline, err)
	}

	var res execResult
	h.ok("exec", fmt.Sprintf(`{"sandbox_id":%q,"cmd":["echo","hello","world"]}`, sb.SandboxID), "exec.reply.json", &res)
	if res.ExitCode != 0 || res.Stdout != "hello world\n" || res.Encoding != "" || res.Streamed {
		t.Errorf("exec: %+v", res)
	}
	h.ok("exec", fmt.Sprintf(`{"sandbox_id":%q,"cmd":["exit","3"]}`, sb.SandboxID), "exec.reply.json", &res)
	if res.ExitCode != 3 {
		t.Errorf("exit 3: %+v", res)
	}
	// Binary output comes back as base64, announced by encoding.
	res = execResult{}
	h.ok("exec", fmt.Sprintf(`{"sandbox_id":%q,"cmd":["binary"]}`, sb.SandboxID), "exec.reply.json", &res)
	raw, err := base64.StdEncoding.DecodeString(res.Stdout)
	if res.Encoding != "base64" || err != nil || len(raw) != 256 || raw[0] != 0 || raw[255] != 255 {
		t.Errorf("binary: encoding %q, %d bytes, %v", res.Encoding, len(raw), err)
	}
	// stdin as base64.
	res = execResult{}
	h.ok("exec", fmt.Sprintf(`{"sandbox_id":%q,"cmd":["cat"],"stdin":"aGkK","stdin_encoding":"base64"}`, sb.SandboxID), "exec.reply.json", &res)
	if res.Stdout != "hi\n" {
		t.Errorf("cat: %+v", res)
	}
	// A buffered exec past its timeout is an error reply.
	m := h.request("exec", []byte(fmt.Sprintf(`{"sandbox_id":%q,"cmd":["sleep","10000"],"timeout_ms":100}`, sb.SandboxID)))
	h.checkError(m, "SBX_E1302")

	var got sandboxRecord
	h.ok("get", fmt.Sprintf(`{"sandbox_id":%q}`, sb.SandboxID), "get.reply.json", &got)
	if got.SandboxID != sb.SandboxID || got.State != "running" || got.Backend != "fake" {
		t.Errorf("get: %+v", got)
	}
	var list listReply
	h.ok("list", `{"metadata":{"suite":"protocoltest"}}`, "list.reply.json", &list)
	if len(list.Sandboxes) != 1 || list.Sandboxes[0].SandboxID != sb.SandboxID {
		t.Errorf("list: %+v", list)
	}
	h.ok("list", `{"metadata":{"suite":"other"}}`, "list.reply.json", &list)
	if len(list.Sandboxes) != 0 {
		t.Errorf("list with a non-matching filter: %+v", list)
	}
	h.ok("backends", `{}`, "backends.reply.json", nil)

	var kill struct {
		SandboxID   string `json:"sandbox_id"`
		State       string `json:"state"`
		AlreadyGone bool   `json:"already_gone"`
	}
	h.ok("kill", fmt.Sprintf(`{"sandbox_id":%q}`, sb.SandboxID), "kill.reply.json", &kill)
	if kill.State != "gone" || kill.AlreadyGone {
		t.Errorf("kill: %+v", kill)
	}
	if live := h.env.Fake.Live(); len(live) != 0 {
		t.Errorf("the fake still holds %v after kill replied", live)
	}
	// kill is idempotent.
	h.ok("kill", fmt.Sprintf(`{"sandbox_id":%q}`, sb.SandboxID), "kill.reply.json", &kill)
	if !kill.AlreadyGone {
		t.Errorf("second kill: %+v", kill)
	}
	m = h.request("exec", []byte(fmt.Sprintf(`{"sandbox_id":%q,"cmd":["echo"]}`, sb.SandboxID)))
	h.checkError(m, "SBX_E1204")
	sbxtest.Eventually(t, 5*time.Second, func() bool {
		h.ok("list", `{}`, "list.reply.json", &list)
		return len(list.Sandboxes) == 0
	}, "a killed sandbox is still listed: %+v", list)
}

// chunk is one message read from SBX_OUT or its live copy.
type chunk struct {
	stream string
	seq    uint64
	data   []byte
	header nats.Header
}

// readOutput reads one process's output the way docs/protocol.md says: an
// ordered consumer on SBX_OUT filtered on subjects.filter, from the start,
// until the exit marker.
func (h *harness) readOutput(ctx context.Context, filter string) (chunks []chunk, exit chunk) {
	h.t.Helper()
	cons, err := h.js.OrderedConsumer(ctx, outStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		h.t.Fatal(err)
	}
	it, err := cons.Messages()
	if err != nil {
		h.t.Fatal(err)
	}
	defer it.Stop()
	for {
		m, err := it.Next()
		if err != nil {
			h.t.Fatalf("reading %s: %v", filter, err)
		}
		c := toChunk(m.Subject(), m.Headers(), m.Data())
		if c.stream == "exit" {
			return chunks, c
		}
		chunks = append(chunks, c)
	}
}

func toChunk(subject string, hdr nats.Header, data []byte) chunk {
	tokens := strings.Split(subject, ".")
	seq, _ := strconv.ParseUint(hdr.Get(hdrSeq), 10, 64)
	return chunk{stream: tokens[len(tokens)-1], seq: seq, data: data, header: hdr}
}

// assemble checks per-stream Sbx-Seq order (no gap, no duplicate) and the
// exit marker's last sequences, and returns stdout and stderr.
func (h *harness) assemble(chunks []chunk, exit chunk) (stdout, stderr []byte) {
	h.t.Helper()
	next := map[string]uint64{"stdout": 1, "stderr": 1}
	var out, errb bytes.Buffer
	for _, c := range chunks {
		if c.seq != next[c.stream] {
			h.t.Fatalf("%s: Sbx-Seq %d, want %d (a gap or a duplicate)", c.stream, c.seq, next[c.stream])
		}
		next[c.stream]++
		if c.stream == "stdout" {
			out.Write(c.data)
		} else {
			errb.Write(c.data)
		}
	}
	if got := exit.header.Get(hdrLastSeqOut); got != strconv.FormatUint(next["stdout"]-1, 10) {
		h.t.Errorf("%s = %s, but %d stdout chunks were read", hdrLastSeqOut, got, next["stdout"]-1)
	}
	if got := exit.header.Get(hdrLastSeqErr); got != strconv.FormatUint(next["stderr"]-1, 10) {
		h.t.Errorf("%s = %s, but %d stderr chunks were read", hdrLastSeqErr, got, next["stderr"]-1)
	}
	if err := h.v.Validate("exit-marker.json", exit.data); err != nil {
		h.t.Errorf("exit marker: %v\n%s", err, exit.data)
	}
	return out.Bytes(), errb.Bytes()
}

func TestStreamedExec(t *testing.T) {
	h := start(t)
	sb := h.create()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// A light client follows the live core-NATS copy; it subscribes before
	// the process starts by choosing the process id itself.
	const pid = "proc-1"
	var (
		mu       sync.Mutex
		live     []chunk
		liveDone = make(chan struct{})
	)
	// The tenant token of an open deployment is "_".
	sub, err := h.nc.Subscribe(fmt.Sprintf("sbx.live._.%s.%s.>", sb.SandboxID, pid), func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		c := toChunk(m.Subject, m.Header, m.Data)
		if c.stream == "exit" {
			close(liveDone)
			return
		}
		live = append(live, c)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := h.nc.Flush(); err != nil {
		t.Fatal(err)
	}

	const n = 300000
	var sr streamReply
	h.ok("exec", fmt.Sprintf(`{"sandbox_id":%q,"cmd":["write","%d","1000"],"stream":true,"process_id":%q}`, sb.SandboxID, n, pid), "exec.stream-reply.json", &sr)
	want := map[string]string{
		"Stdout": "sbx.out._." + sb.SandboxID + "." + pid + ".stdout",
		"Stderr": "sbx.out._." + sb.SandboxID + "." + pid + ".stderr",
		"Exit":   "sbx.out._." + sb.SandboxID + "." + pid + ".exit",
		"Filter": "sbx.out._." + sb.SandboxID + "." + pid + ".>",
		"Live":   "sbx.live._." + sb.SandboxID + "." + pid + ".>",
		"Stream": outStream,
	}
	got := map[string]string{"Stdout": sr.Subjects.Stdout, "Stderr": sr.Subjects.Stderr, "Exit": sr.Subjects.Exit,
		"Filter": sr.Subjects.Filter, "Live": sr.Subjects.Live, "Stream": sr.Subjects.Stream}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("subjects.%s = %q, want %q", k, got[k], w)
		}
	}
	if sr.ProcessID != pid || sr.SandboxID != sb.SandboxID {
		t.Errorf("stream reply %+v", sr)
	}

	chunks, exit := h.readOutput(ctx, sr.Subjects.Filter)
	stdout, stderr := h.assemble(chunks, exit)
	if !bytes.Equal(stdout, fake.Pattern(n)) || len(stderr) != 0 {
		t.Fatalf("stdout: %d bytes, not the pattern (stderr %q)", len(stdout), stderr)
	}
	if exit.header.Get(hdrExitCode) != "0" || exit.header.Get(hdrErrCode) != "" {
		t.Errorf("exit marker headers: %v", exit.header)
	}
	var res execResult
	if err := json.Unmarshal(exit.data, &res); err != nil {
		t.Fatal(err)
	}
	if !res.Streamed || res.ExitCode != 0 || res.Stdout != "" || res.StdoutBytes != n || res.ProcessID != pid {
		t.Errorf("exit marker body: %s", exit.data)
	}

	// A late reader replays the same output from the stream.
	chunks2, exit2 := h.readOutput(ctx, sr.Subjects.Filter)
	if stdout2, _ := h.assemble(chunks2, exit2); !bytes.Equal(stdout2, stdout) {
		t.Error("a late reader got different output")
	}

	// The live copy carried the same chunks, with the same headers.
	select {
	case <-liveDone:
	case <-ctx.Done():
		t.Fatal("no exit marker on the live subject")
	}
	mu.Lock()
	liveOut, _ := h.assemble(live, exit)
	// Republished copies name their place in SBX_OUT, for a reader that
	// saw a gap to replay from there.
	if len(live) > 0 {
		hdr := live[0].header
		if hdr.Get("Nats-Stream") != outStream || hdr.Get("Nats-Sequence") == "" || hdr.Get("Nats-Subject") != sr.Subjects.Stdout {
			t.Errorf("live copy headers: %v", hdr)
		}
	}
	mu.Unlock()
	if !bytes.Equal(liveOut, stdout) {
		t.Errorf("live copy: %d bytes, want %d", len(liveOut), len(stdout))
	}
}

func TestStreamedExecInterleavedStdinAndErrors(t *testing.T) {
	h := start(t)
	sb := h.create()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// stdout and stderr are ordered each on its own.
	var sr streamReply
	h.ok("exec", fmt.Sprintf(`{"sandbox_id":%q,"cmd":["interleave","50"],"stream":true}`, sb.SandboxID), "exec.stream-reply.json", &sr)
	chunks, exit := h.readOutput(ctx, sr.Subjects.Filter)
	stdout, stderr := h.assemble(chunks, exit)
	if !strings.HasPrefix(string(stdout), "out 1\nout 2\n") || !strings.HasPrefix(string(stderr), "err 1\nerr 2\n") ||
		strings.Count(string(stdout), "\n") != 50 || strings.Count(string(stderr), "\n") != 50 {
		t.Errorf("interleave: stdout %q stderr %q", stdout, stderr)
	}

	// stdin: keep it open, write, close.
	h.ok("exec", fmt.Sprintf(`{"sandbox_id":%q,"cmd":["cat"],"stream":true,"keep_stdin_open":true,"process_id":"cat-1"}`, sb.SandboxID), "exec.stream-reply.json", &sr)
	h.ok("stdin", fmt.Sprintf(`{"sandbox_id":%q,"process_id":"cat-1","data":"line one\n"}`, sb.SandboxID), "stdin.reply.json", nil)
	h.ok("stdin", fmt.Sprintf(`{"sandbox_id":%q,"process_id":"cat-1","data":"bGluZSB0d28K","encoding":"base64","close":true}`, sb.SandboxID), "stdin.reply.json", nil)
	chunks, exit = h.readOutput(ctx, sr.Subjects.Filter)
	if stdout, _ := h.assemble(chunks, exit); string(stdout) != "line one\nline two\n" {
		t.Errorf("cat via stdin: %q", stdout)
	}

	// A streamed process past its timeout: the exit marker carries the error.
	h.ok("exec", fmt.Sprintf(`{"sandbox_id":%q,"cmd":["sleep","10000"],"stream":true,"timeout_ms":100}`, sb.SandboxID), "exec.stream-reply.json", &sr)
	chunks, exit = h.readOutput(ctx, sr.Subjects.Filter)
	h.assemble(chunks, exit)
	var res execResult
	_ = json.Unmarshal(exit.data, &res)
	if exit.header.Get(hdrErrCode) != "1302" || res.SbxError == nil || res.SbxError.Code != "SBX_E1302" || !res.TimedOut {
		t.Errorf("timed-out exit marker: %v %s", exit.header, exit.data)
	}

	// signal KILL ends a streamed process.
	h.ok("exec", fmt.Sprintf(`{"sandbox_id":%q,"cmd":["sleep","30000"],"stream":true,"process_id":"sleeper"}`, sb.SandboxID), "exec.stream-reply.json", &sr)
	h.ok("signal", fmt.Sprintf(`{"sandbox_id":%q,"process_id":"sleeper","signal":"KILL"}`, sb.SandboxID), "signal.reply.json", nil)
	chunks, exit = h.readOutput(ctx, sr.Subjects.Filter)
	h.assemble(chunks, exit)
	if exit.header.Get(hdrExitCode) == "0" {
		t.Errorf("killed process exited 0: %v %s", exit.header, exit.data)
	}
}

func TestBadRequestsChangeNothing(t *testing.T) {
	h := start(t)
	sb := h.create()
	big := `{"timeout_s":60,"metadata":{"k":"` + strings.Repeat("x", 1<<20) + `"}}`
	hugeArg := strings.Repeat("x", 300<<10)
	id := sb.SandboxID
	tests := []struct {
		name, op, body, code string
	}{
		{"malformed JSON", "create", `{"timeout_s":`, "SBX_E1001"},
		{"not an object", "create", `[60]`, "SBX_E1001"},
		{"trailing data", "create", `{"timeout_s":60} {}`, "SBX_E1001"},
		{"unknown field", "create", `{"timeout_s":60,"lifetime":60}`, "SBX_E1002"},
		{"unknown field on exec", "exec", fmt.Sprintf(`{"sandbox_id":%q,"cmd":["echo"],"shell":true}`, id), "SBX_E1002"},
		{"missing cmd", "exec", fmt.Sprintf(`{"sandbox_id":%q}`, id), "SBX_E1003"},
		{"missing sandbox_id", "kill", `{}`, "SBX_E1003"},
		{"missing lifetime", "create", `{}`, "SBX_E1004"},
		{"missing lifetime with class", "create", `{"class":"fake"}`, "SBX_E1004"},
		{"id with dot", "exec", `{"sandbox_id":"a.b","cmd":["echo"]}`, "SBX_E1005"},
		{"id with star", "exec", `{"sandbox_id":"*","cmd":["echo"]}`, "SBX_E1005"},
		{"id with gt", "kill", `{"sandbox_id":">"}`, "SBX_E1005"},
		{"id with space", "get", `{"sandbox_id":"a b"}`, "SBX_E1005"},
		{"id upper case", "get", `{"sandbox_id":"ABC"}`, "SBX_E1005"},
		{"process id with dot", "exec", fmt.Sprintf(`{"sandbox_id":%q,"cmd":["echo"],"process_id":"p.1"}`, id), "SBX_E1005"},
		{"chosen sandbox id with wildcard", "create", `{"timeout_s":60,"sandbox_id":"x.*"}`, "SBX_E1005"},
		{"oversized payload", "create", big, "SBX_E1006"},
		{"oversized argv", "exec", fmt.Sprintf(`{"sandbox_id":%q,"cmd":["echo",%q]}`, id, hugeArg), "SBX_E1006"},
		{"wrong type", "create", `{"timeout_s":"60"}`, "SBX_E1007"},
		{"lifetime out of range", "create", `{"timeout_s":999999}`, "SBX_E1007"},
		{"unknown tier", "create", `{"timeout_s":60,"require_isolation":"vm"}`, "SBX_E1007"},
		{"bad signal", "signal", fmt.Sprintf(`{"sandbox_id":%q,"process_id":"p1","signal":"STOP"}`, id), "SBX_E1007"},
		{"unknown class", "create", `{"timeout_s":60,"class":"nope"}`, "SBX_E1101"},
		{"unknown backend dsn", "create", `{"timeout_s":60,"dsn":"nosuch://image"}`, "SBX_E1102"},
		{"isolation unavailable", "create", `{"timeout_s":60,"require_isolation":"microvm"}`, "SBX_E1104"},
		{"capability not supported", "create", `{"timeout_s":60,"requires":["pause"]}`, "SBX_E1105"},
		{"allowlist not supported", "create", `{"timeout_s":60,"network":{"egress":"allow","allow":["pypi.org"]}}`, "SBX_E1105"},
		{"invalid dsn", "create", `{"timeout_s":60,"dsn":"no-scheme"}`, "SBX_E1106"},
		{"sandbox does not exist: exec", "exec", `{"sandbox_id":"nosuch","cmd":["echo"]}`, "SBX_E1201"},
		{"sandbox does not exist: kill", "kill", `{"sandbox_id":"nosuch"}`, "SBX_E1201"},
		{"sandbox does not exist: get", "get", `{"sandbox_id":"nosuch"}`, "SBX_E1201"},
		{"sandbox id taken", "create", fmt.Sprintf(`{"timeout_s":60,"sandbox_id":%q}`, id), "SBX_E1202"},
	}

	ctx := context.Background()
	lastSeq := func(stream string) uint64 {
		s, err := h.js.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.LastSeq
	}
	listNow := func() string {
		return string(h.ok("list", `{}`, "list.reply.json", nil))
	}
	before := listNow()
	calls := len(h.env.Fake.Calls())
	opsSeq := lastSeq("SBX_OPS")
	// Commands are counted as they are published (SBX_CMD's last sequence
	// also moves with the router's ballast on sbx.cmd.ballast, ADR 22).
	nc := h.js.Conn()
	var dispatchedMu sync.Mutex
	var dispatched []string
	sub, err := nc.Subscribe("sbx.cmd.>", func(m *nats.Msg) {
		if m.Subject != "sbx.cmd.ballast" {
			dispatchedMu.Lock()
			dispatched = append(dispatched, m.Subject)
			dispatchedMu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := h.request(tt.op, []byte(tt.body))
			eb := h.checkError(m, tt.code)
			if tt.code == "SBX_E1002" && eb.Error.Details["field"] == nil {
				t.Errorf("unknown field not named in details: %s", m.Data)
			}
			if after := listNow(); after != before {
				t.Errorf("list changed:\nbefore %s\nafter  %s", before, after)
			}
			if c := h.env.Fake.Calls(); len(c) != calls {
				t.Errorf("the backend was called: %+v", c[calls:])
			}
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
			dispatchedMu.Lock()
			if len(dispatched) != 0 {
				t.Errorf("a command was dispatched: %v", dispatched)
			}
			dispatchedMu.Unlock()
			if got := lastSeq("SBX_OPS"); got != opsSeq {
				t.Errorf("an operation record was published (SBX_OPS last seq %d -> %d)", opsSeq, got)
			}
		})
	}
}
