package schemas

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/invopop/jsonschema"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// Kinds of message.
const (
	KindRequest = "request"
	KindReply   = "reply"
	KindOutput  = "output" // a message on SBX_OUT
	KindRecord  = "record" // a message on SBX_OPS
)

// Message is one client-facing message and the schema file it gets.
type Message struct {
	File    string // file name under docs/protocol
	Subject string // where the message travels
	Kind    string
	Title   string
	Type    reflect.Type
	// Golden names the samples in pkg/events/testdata/golden that must
	// conform to the schema.
	Golden []string
}

func typeOf[T any]() reflect.Type { return reflect.TypeFor[T]() }

// Messages lists every message that has a schema, in file order.
func Messages() []Message {
	req := func(op string, t reflect.Type, golden ...string) Message {
		return Message{File: op + ".request.json", Subject: events.APISubject(op), Kind: KindRequest,
			Title: "sandboxio v1 " + op + " request", Type: t, Golden: golden}
	}
	rep := func(op string, t reflect.Type, golden ...string) Message {
		return Message{File: op + ".reply.json", Subject: "reply to " + events.APISubject(op), Kind: KindReply,
			Title: "sandboxio v1 " + op + " reply", Type: t, Golden: golden}
	}
	return []Message{
		req(events.OpCreate, typeOf[events.CreateRequest](), "create_request", "create_request_minimal", "create_request_fork"),
		rep(events.OpCreate, typeOf[events.CreateReply](), "create_reply"),
		req(events.OpExec, typeOf[events.ExecRequest](), "exec_request", "exec_request_stream"),
		rep(events.OpExec, typeOf[events.ExecResult](), "exec_result", "exec_result_binary", "exec_result_timeout"),
		{File: "exec.stream-reply.json", Subject: "reply to sbx.api.v1.exec with stream:true", Kind: KindReply,
			Title: "sandboxio v1 streamed exec reply", Type: typeOf[events.ExecStreamReply](), Golden: []string{"exec_stream_reply"}},
		{File: "exit-marker.json", Subject: "sbx.out.<sandbox>.<process>.exit (stream SBX_OUT)", Kind: KindOutput,
			Title: "sandboxio v1 exit marker of a streamed process", Type: typeOf[events.ExecResult](), Golden: []string{"exit_marker", "exit_marker_error"}},
		req(events.OpRunCode, typeOf[events.RunCodeRequest](), "run_code_request"),
		rep(events.OpRunCode, typeOf[events.RunCodeReply](), "run_code_reply", "run_code_reply_error"),
		req(events.OpFilesWrite, typeOf[events.FilesWriteRequest](), "files_write_request", "files_write_request_ref"),
		rep(events.OpFilesWrite, typeOf[events.FilesWriteReply](), "files_write_reply"),
		req(events.OpFilesRead, typeOf[events.FilesReadRequest](), "files_read_request"),
		rep(events.OpFilesRead, typeOf[events.FilesReadReply](), "files_read_reply", "files_read_reply_ref"),
		req(events.OpFilesList, typeOf[events.FilesListRequest](), "files_list_request"),
		rep(events.OpFilesList, typeOf[events.FilesListReply](), "files_list_reply"),
		req(events.OpSignal, typeOf[events.SignalRequest](), "signal_request"),
		rep(events.OpSignal, typeOf[events.OKReply](), "ok_reply"),
		req(events.OpResize, typeOf[events.ResizeRequest](), "resize_request"),
		rep(events.OpResize, typeOf[events.OKReply](), "ok_reply"),
		req(events.OpCodeContext, typeOf[events.CodeContextRequest](), "code_context_request"),
		rep(events.OpCodeContext, typeOf[events.CodeContextReply](), "code_context_reply"),
		req(events.OpFilesWatch, typeOf[events.FilesWatchRequest](), "files_watch_request"),
		rep(events.OpFilesWatch, typeOf[events.FilesWatchReply](), "files_watch_reply"),
		req(events.OpStdin, typeOf[events.StdinRequest](), "stdin_request"),
		rep(events.OpStdin, typeOf[events.OKReply](), "ok_reply"),
		req(events.OpKill, typeOf[events.KillRequest](), "kill_request"),
		rep(events.OpKill, typeOf[events.KillReply](), "kill_reply"),
		req(events.OpGet, typeOf[events.GetRequest](), "get_request"),
		rep(events.OpGet, typeOf[events.Sandbox](), "sandbox", "sandbox_ended"),
		req(events.OpList, typeOf[events.ListRequest](), "list_request"),
		rep(events.OpList, typeOf[events.ListReply](), "list_reply"),
		req(events.OpSetTimeout, typeOf[events.SetTimeoutRequest](), "set_timeout_request"),
		rep(events.OpSetTimeout, typeOf[events.SetTimeoutReply](), "set_timeout_reply"),
		req(events.OpBackends, typeOf[events.BackendsRequest](), "backends_request"),
		rep(events.OpBackends, typeOf[events.BackendsReply](), "backends_reply"),
		req(events.OpAttach, typeOf[events.AttachRequest](), "attach_request"),
		rep(events.OpAttach, typeOf[events.AttachReply](), "attach_reply"),
		req(events.OpQuota, typeOf[events.QuotaRequest](), "quota_request"),
		rep(events.OpQuota, typeOf[events.QuotaReply](), "quota_reply"),
		req(events.OpFilesGet, typeOf[events.FilesGetRequest](), "files_get_request"),
		rep(events.OpFilesGet, typeOf[events.FilesGetReply](), "files_get_reply"),
		req(events.OpFilesPut, typeOf[events.FilesPutRequest](), "files_put_request"),
		rep(events.OpFilesPut, typeOf[events.FilesPutReply](), "files_put_reply"),
		req(events.OpPortsExpose, typeOf[events.PortsExposeRequest](), "ports_expose_request"),
		rep(events.OpPortsExpose, typeOf[events.PortInfo](), "ports_expose_reply"),
		req(events.OpPortsList, typeOf[events.PortsListRequest](), "ports_list_request"),
		rep(events.OpPortsList, typeOf[events.PortsListReply](), "ports_list_reply"),
		req(events.OpPortsUnexpose, typeOf[events.PortsUnexposeRequest](), "ports_unexpose_request"),
		rep(events.OpPortsUnexpose, typeOf[events.PortsUnexposeReply](), "ports_unexpose_reply"),
		req(events.OpPortsToken, typeOf[events.PortsTokenRequest](), "ports_token_request"),
		rep(events.OpPortsToken, typeOf[events.PortInfo](), "ports_token_reply"),
		req(events.OpPause, typeOf[events.PauseRequest](), "pause_request"),
		rep(events.OpPause, typeOf[events.PauseReply](), "pause_reply"),
		req(events.OpResume, typeOf[events.ResumeRequest](), "resume_request"),
		rep(events.OpResume, typeOf[events.ResumeReply](), "resume_reply"),
		req(events.OpSnapshot, typeOf[events.SnapshotRequest](), "snapshot_request"),
		rep(events.OpSnapshot, typeOf[events.SnapshotInfo](), "snapshot_info"),
		req(events.OpSnapshotsList, typeOf[events.SnapshotsListRequest](), "snapshots_list_request"),
		rep(events.OpSnapshotsList, typeOf[events.SnapshotsListReply](), "snapshots_list_reply"),
		req(events.OpSnapshotsDelete, typeOf[events.SnapshotsDeleteRequest](), "snapshots_delete_request"),
		rep(events.OpSnapshotsDelete, typeOf[events.SnapshotsDeleteReply](), "snapshots_delete_reply"),
		{File: "error.json", Subject: "the body of every failed reply (with the Nats-Service-Error headers)", Kind: KindReply,
			Title: "sandboxio v1 error reply", Type: typeOf[events.ErrorBody](), Golden: []string{"error_body", "error_body_unknown_field"}},
		{File: "op-record.json", Subject: "sbx.ops.<backend>.<sandbox>.<event> (stream SBX_OPS)", Kind: KindRecord,
			Title: "sandboxio v1 operation record", Type: typeOf[events.OpRecord](), Golden: []string{"op_record_opened", "op_record_closed"}},
	}
}

// thisPackage is the import path of the directory go test runs in; comments
// are read relative to it.
const thisPackage = "github.com/sandboxio/sandboxio/internal/schemas"

// wireFields are the properties that ExecResult and RunCodeReply write in
// their MarshalJSON but that their Go fields hide (json:"-").
var wireFields = map[reflect.Type][]reflect.StructField{
	typeOf[events.ExecResult](): {
		{Name: "Stdout", Type: typeOf[string](), Tag: `json:"stdout"`},
		{Name: "Stderr", Type: typeOf[string](), Tag: `json:"stderr"`},
		{Name: "Encoding", Type: typeOf[string](), Tag: `json:"encoding,omitempty" jsonschema:"enum=base64"`},
	},
	typeOf[events.RunCodeReply](): {
		{Name: "Results", Type: typeOf[[]events.RichResult](), Tag: `json:"results"`},
		{Name: "Error", Type: typeOf[*events.CodeError](), Tag: `json:"error,omitempty"`},
	},
}

var wireComments = map[string]string{
	"ExecResult.Stdout": "The process's standard output: the bytes as a string when both stdout and stderr are valid UTF-8, " +
		"otherwise standard base64 of the bytes and encoding is \"base64\". Empty on a streamed exec's exit marker.",
	"ExecResult.Stderr":    "The process's standard error, encoded like stdout.",
	"ExecResult.Encoding":  "Absent when stdout and stderr are UTF-8 text; \"base64\" when they are base64 of binary output.",
	"RunCodeReply.Results": "Rich outputs of the code (text, html, png, ...), never null.",
	"RunCodeReply.Error":   "The exception the code raised, if it raised one.",
}

func enumMapper(t reflect.Type) *jsonschema.Schema {
	str := func(vals ...string) *jsonschema.Schema {
		s := &jsonschema.Schema{Type: "string"}
		for _, v := range vals {
			s.Enum = append(s.Enum, v)
		}
		return s
	}
	switch t {
	case typeOf[events.IsolationTier]():
		return str(string(events.TierUnknown), string(events.TierContainer), string(events.TierGVisor), string(events.TierMicroVM))
	case typeOf[events.State]():
		return str(string(events.StateCreating), string(events.StateRunning), string(events.StateGone), string(events.StateLost), string(events.StatePaused))
	case typeOf[events.Capability]():
		var vals []string
		for _, c := range events.AllCapabilities {
			vals = append(vals, string(c))
		}
		return str(vals...)
	case typeOf[events.Code]():
		return &jsonschema.Schema{Type: "string", Pattern: `^SBX_[A-Z0-9_]+$`}
	}
	return nil
}

// Generate returns every schema file by name. eventsDir, relative to this
// package's directory, is where the Go comments of pkg/events are read for
// descriptions; empty means no descriptions.
func Generate(eventsDir string) (map[string][]byte, error) {
	var comments map[string]string
	if eventsDir != "" {
		r := &jsonschema.Reflector{}
		if err := r.AddGoComments(thisPackage, eventsDir); err != nil {
			return nil, fmt.Errorf("schemas: read comments: %w", err)
		}
		comments = r.CommentMap
	}
	out := map[string][]byte{}
	for _, m := range Messages() {
		r := &jsonschema.Reflector{
			Anonymous:                 true,
			ExpandedStruct:            true,
			AllowAdditionalProperties: m.Kind != KindRequest,
			Mapper:                    enumMapper,
			CommentMap:                comments,
			AdditionalFields:          func(t reflect.Type) []reflect.StructField { return wireFields[t] },
			LookupComment: func(t reflect.Type, field string) string {
				return wireComments[t.Name()+"."+field]
			},
		}
		s := r.ReflectFromType(m.Type)
		if m.Kind == KindRequest {
			constrainRequest(s)
		}
		s.Title = m.Title
		desc := "Travels on: " + m.Subject + "."
		if s.Description != "" {
			desc = s.Description + "\n\n" + desc
		}
		s.Description = desc
		b, err := json.MarshalIndent(s, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("schemas: %s: %w", m.File, err)
		}
		if _, dup := out[m.File]; dup {
			return nil, fmt.Errorf("schemas: %s generated twice", m.File)
		}
		out[m.File] = append(b, '\n')
	}
	return out, nil
}

// constrainRequest adds what the server's validation checks and the Go
// types cannot say: the id alphabet and the lifetime range.
func constrainRequest(s *jsonschema.Schema) {
	for pair := s.Properties.Oldest(); pair != nil; pair = pair.Next() {
		name, p := pair.Key, pair.Value
		switch {
		case strings.HasSuffix(name, "_id") || name == "backend":
			p.Pattern = idPattern
			if p.Description == "" {
				p.Description = "An id: 1 to 64 characters from [a-z0-9_-]; never '.', '*', '>' or whitespace."
			}
		case name == "timeout_s":
			p.Minimum = json.Number("1")
			p.Maximum = json.Number(strconv.Itoa(events.MaxLifetimeSeconds))
			if p.Description == "" {
				p.Description = "The lifetime in seconds (mandatory): the sandbox is killed at this deadline whatever else happens."
			}
		}
	}
}

// idPattern is events.ValidID as a regular expression.
var idPattern = fmt.Sprintf("^[a-z0-9_-]{1,%d}$", events.MaxIDLength)

// ErrorsMarkdown renders docs/errors.md from events.Catalog.
func ErrorsMarkdown() []byte {
	var b bytes.Buffer
	b.WriteString("# sandboxio error codes\n\n")
	b.WriteString("<!-- Generated from events.Catalog (pkg/events/errors.go) by internal/schemas. Do not edit: run `make schemas`. -->\n\n")
	b.WriteString("Every failed request gets a reply with the NATS micro error headers and a JSON body:\n\n")
	b.WriteString("```\nNats-Service-Error-Code: 1302\nNats-Service-Error: ExecutionTimeout: process p1 ran past its timeout and was killed\n\n")
	b.WriteString(`{"error":{"code":"SBX_E1302","name":"ExecutionTimeout","message":"process p1 ran past its timeout and was killed","retryable":false,"details":{"sandbox_id":"…"}}}` + "\n```\n\n")
	b.WriteString("`Nats-Service-Error-Code` is the numeric part of the code. Classify errors by `code` (Go: `errors.Is(err, events.ErrSandboxGone)`), never by message text. ")
	b.WriteString("`retryable` says whether the same request may succeed later unchanged. `details` is optional and may name the offending `field`.\n\n")
	b.WriteString("What a reply lets a client do: `retryable` is the reply's own word, not only the code's. An operation that may have run (the router answered after it sent the command, without the worker's result: its timer, a lost or restarted worker, the router stopping, a publication never confirmed; or the Go client's SBX_E1623) says `\"retryable\": false` and `details.outcome: \"unknown\"` unless its op is safe to send again (get, list, kill, set_timeout, files.read, files.list, files.watch, files.get, create). So a client may resend exactly the replies that say retryable. The Go client (and the CLI) itself resends get, list and kill on no responders or an attempt without answer (within the caller's deadline, backing off from 50 ms to at most 1 s; no responders for at most 10 s in a row, which covers a router's restart), and idempotent requests whose reply a router or connection loss dropped. A request refused at decode (10xx) was never sent anywhere.\n\n")
	b.WriteString("A create that names its sandbox (`sandbox_id`) may be sent again whatever became of the first (ADR 37): a create of an existing id by the same tenant with the same spec (everything but the secrets' values) answers that sandbox once it runs, waits for it while it is being created, and creates it when the first never started (SBX_E1607, SBX_E1622, a create that failed or that a stopping router abandoned); only one sandbox is ever made. So after SBX_E1607, SBX_E1622, a timeout or a lost reply, send the same create again (but the Go client kills the sandbox of a create it gives up on, at its deadline or with SBX_E1623: a retry then gets SBX_E1204 if it had run). SBX_E1202 means the id is taken by a create of another spec: it never becomes a success by retrying. SBX_E1204 to a create means the sandbox that create made has ended (it ran; it is not made again). The Go client sends a create again itself on no responders and when the router holding it is lost (it always names the sandbox).\n\n")
	b.WriteString("`SandboxTimeout` is the family of both timeouts: in Go, `errors.Is(err, events.ErrSandboxTimeout)` holds for SBX_E1203 and SBX_E1302. ")
	b.WriteString("A cancelled Go context is never an SBX code: it comes back as `context.Canceled`.\n\n")
	ranges := []struct{ prefix, title string }{
		{"SBX_E10", "10xx: request"}, {"SBX_E11", "11xx: routing and placement"}, {"SBX_E12", "12xx: sandbox lifecycle"},
		{"SBX_E13", "13xx: execution"}, {"SBX_E14", "14xx: auth, tenancy and quota"}, {"SBX_E15", "15xx: audit"}, {"SBX_E16", "16xx: backend"},
		{"SBX_E17", "17xx: containment, isolation and egress"},
	}
	entries := append([]events.CatalogEntry(nil), events.Catalog...)
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].Code < entries[j].Code })
	for _, rg := range ranges {
		fmt.Fprintf(&b, "## %s\n\n", rg.title)
		b.WriteString("| code | header | name | retryable | meaning | what to do |\n|---|---|---|---|---|---|\n")
		for _, e := range entries {
			if !strings.HasPrefix(string(e.Code), rg.prefix) {
				continue
			}
			retry := "no"
			if e.Retryable {
				retry = "yes"
			}
			fmt.Fprintf(&b, "| `%s` | %d | %s | %s | %s | %s |\n", e.Code, e.Code.Number(), e.Name, retry, mdCell(e.Meaning), mdCell(e.Action))
		}
		b.WriteString("\n")
	}
	return b.Bytes()
}

func mdCell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
