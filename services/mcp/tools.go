package mcpserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// handler is a tool's body: it returns a result, or an error that
// becomes a tool error (never a protocol error, so the model sees it).
type handler[In any] func(ctx context.Context, st *session, in In) (*mcp.CallToolResult, error)

// tool registers a tool whose calls are made on behalf of the calling
// session.
func tool[In any](s *Server, name, desc string, h handler[In]) {
	mcp.AddTool(s.srv, &mcp.Tool{Name: name, Description: desc},
		func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, any, error) {
			st := s.sessionOf(req.Session)
			res, err := h(ctx, st, in)
			if err != nil {
				s.log.Debug("tool failed", "tool", name, "session", st.id, "err", err)
				return toolError(err), nil, nil
			}
			return res, nil, nil
		})
}

func (s *Server) addTools() {
	tool(s, "create_sandbox", "Create an isolated sandbox (a container or VM) to run commands and code in. "+
		"Returns its sandbox_id. It is killed when this session ends or its lifetime passes.", s.createSandbox)
	tool(s, "run_command", "Run a command in a sandbox: a shell command line (command) or an argument vector (argv). "+
		"Returns the exit code, stdout and stderr (long output is cut in the middle). "+
		"With background=true it returns a process_id at once; read its output with command_status.", s.runCommand)
	tool(s, "command_status", "Output so far and state of a background command started by run_command; "+
		"wait up to a while for it to finish, or send it a signal (TERM, INT, KILL).", s.commandStatus)
	tool(s, "run_code", "Run code in the sandbox's interpreter (python by default). Returns output, rich results "+
		"(text, images) and the exception raised, if any.", s.runCode)
	tool(s, "write_file", "Write a file in a sandbox (text, or base64 for binary; any size up to the server's limit). "+
		"Creates or replaces it.", s.writeFile)
	tool(s, "read_file", "Read a file from a sandbox: text as text (offset and length page through long files), "+
		"images as images, other binary as base64.", s.readFile)
	tool(s, "list_files", "List a directory in a sandbox (name, size, mode, type).", s.listFiles)
	tool(s, "set_timeout", "Set a sandbox's remaining lifetime (from now).", s.setTimeout)
	tool(s, "list_sandboxes", "List the sandboxes of this session with their state and deadline.", s.listSandboxes)
	tool(s, "kill_sandbox", "Kill a sandbox now, with everything in it.", s.killSandbox)
	tool(s, "expose_port", "Publish a TCP port of a sandbox (a web server, notebook or API it runs) through the gateway, "+
		"even with network egress denied. Returns its URL and, for a private port (the default), its token (shown once) "+
		"and a signed link to open in a browser (where the deployment makes links; otherwise it says why).", s.exposePort)
	s.addDurableTools() // durable.go
}

// duration reads a duration argument given as seconds (a JSON number or a
// numeric string) or with a unit ("90s", "5m"); nil is def. It is capped.
func duration(field string, v any, def, limit time.Duration) (time.Duration, *mcp.CallToolResult) {
	var d time.Duration
	switch x := v.(type) {
	case nil:
		return def, nil
	case float64:
		if x < 0 || x > limit.Seconds() {
			return 0, invalid(field, "%s %v: want 0 to %v seconds", field, x, limit.Seconds())
		}
		d = time.Duration(x * float64(time.Second))
	case string:
		var err error
		if d, err = client.ParseDuration(x); err != nil {
			return 0, invalid(field, "%s: %v", field, err)
		}
	default:
		return 0, invalid(field, "%s: want seconds (a number) or a duration string such as 90s or 5m", field)
	}
	if d == 0 {
		return def, nil
	}
	if d > limit {
		return 0, invalid(field, "%s %v is more than this server allows (%v)", field, d, limit)
	}
	return d, nil
}

type createIn struct {
	Class    string            `json:"class,omitempty" jsonschema:"sandbox class from the deployment's routing file; empty for the default class"`
	Image    string            `json:"image,omitempty" jsonschema:"a Docker image to run instead of a class, e.g. sandboxio/python:3.11"`
	Lifetime any               `json:"lifetime,omitempty" jsonschema:"how long the sandbox lives: seconds (600) or a duration (10m, 1h); default 30m"`
	Network  string            `json:"network,omitempty" jsonschema:"network egress: deny (the default) or allow"`
	Allow    []string          `json:"allow,omitempty" jsonschema:"egress allowlist (hosts or CIDRs) where the backend supports one"`
	Env      map[string]string `json:"env,omitempty" jsonschema:"environment variables of every command"`
	// FromSnapshot forks from a snapshot_sandbox's snapshot (durable.go).
	FromSnapshot string `json:"from_snapshot,omitempty" jsonschema:"start with the files of this snapshot (from snapshot_sandbox)"`
}

func (s *Server) createSandbox(ctx context.Context, st *session, in createIn) (*mcp.CallToolResult, error) {
	life, bad := duration("lifetime", in.Lifetime, s.cfg.Lifetime, s.cfg.MaxLifetime)
	if bad != nil {
		return bad, nil
	}
	if st.count() >= maxSandboxesPerSession {
		return nil, events.Errorf(events.CodeQuotaExceeded, "this session holds %d sandboxes, the most it may; kill_sandbox one first", maxSandboxesPerSession)
	}
	req := events.CreateRequest{Class: in.Class, Env: in.Env, Metadata: map[string]string{"mcp_session": sessionLabel(st.id)},
		FromSnapshot: in.FromSnapshot}
	if req.Class == "" && in.Image == "" && in.FromSnapshot == "" {
		req.Class = s.cfg.Class
	}
	if in.Image != "" {
		if strings.Contains(in.Image, "://") {
			req.DSN = in.Image
		} else {
			req.DSN = "docker://" + in.Image
		}
	}
	switch in.Network {
	case "", "deny":
		if len(in.Allow) > 0 {
			req.Network = &events.NetworkPolicy{Egress: "deny", Allow: in.Allow}
		}
	case "allow":
		req.Network = &events.NetworkPolicy{Egress: "allow", Allow: in.Allow}
	default:
		return invalid("network", "network %q: want deny or allow", in.Network), nil
	}
	sb, err := s.cfg.Client.Create(ctx, req, client.WithLifetime(life))
	if err != nil {
		return nil, err
	}
	if !st.add(sb) {
		// The sandbox must go even if the request was cancelled: the request's values, not its cancellation.
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.KillGrace)
		defer cancel()
		_ = sb.Kill(kctx)
		return nil, events.Errorf(events.CodeSandboxGone, "the session ended while the sandbox was created; it was killed")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "sandbox_id: %s\nbackend: %s\nclass: %s\nisolation: %s\ndeadline: %s (in %s)\ncapabilities: %s\n",
		sb.ID(), sb.Backend, sb.Class, sb.Isolation, sb.Deadline.UTC().Format(time.RFC3339), time.Until(sb.Deadline).Round(time.Second), caps(sb.Capabilities))
	for _, w := range sb.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", w)
	}
	res := textResult("%s", b.String())
	res.StructuredContent = map[string]any{"sandbox_id": sb.ID(), "backend": sb.Backend, "class": sb.Class,
		"isolation": sb.Isolation, "deadline": sb.Deadline}
	return res, nil
}

// sessionLabel is a session id as a metadata value (bounded; stdio
// sessions have none).
func sessionLabel(id string) string {
	if id == "" {
		return "stdio"
	}
	return id[:min(len(id), 128)]
}

func caps(c events.Capabilities) string {
	var out []string
	for _, x := range c {
		out = append(out, string(x))
	}
	return strings.Join(out, ", ")
}

type runIn struct {
	SandboxID  string            `json:"sandbox_id" jsonschema:"the sandbox, from create_sandbox"`
	Command    string            `json:"command,omitempty" jsonschema:"a shell command line, run with sh -c (give command or argv)"`
	Argv       []string          `json:"argv,omitempty" jsonschema:"the program and its arguments, run without a shell"`
	Cwd        string            `json:"cwd,omitempty" jsonschema:"working directory"`
	Env        map[string]string `json:"env,omitempty" jsonschema:"extra environment variables"`
	Stdin      string            `json:"stdin,omitempty" jsonschema:"text given to the command on its standard input"`
	Timeout    any               `json:"timeout,omitempty" jsonschema:"kill the command after this long: seconds (30) or a duration (2m); default 2m"`
	Background bool              `json:"background,omitempty" jsonschema:"start it and return a process_id at once; read it with command_status"`
}

func (s *Server) runCommand(ctx context.Context, st *session, in runIn) (*mcp.CallToolResult, error) {
	sb, err := st.sandbox(in.SandboxID)
	if err != nil {
		return nil, err
	}
	argv := in.Argv
	switch {
	case in.Command != "" && len(argv) > 0:
		return invalid("command", "give command (a shell line) or argv, not both"), nil
	case in.Command != "":
		argv = []string{"sh", "-c", in.Command}
	case len(argv) == 0:
		return toolError(events.Errorf(events.CodeMissingField, "give command (a shell line) or argv").With("field", "command")), nil
	}
	timeout, bad := duration("timeout", in.Timeout, s.cfg.ExecTimeout, s.cfg.MaxExecTimeout)
	if bad != nil {
		return bad, nil
	}
	opts := []client.ExecOption{client.Timeout(timeout), client.Cwd(in.Cwd), client.Env(in.Env)}
	if in.Stdin != "" {
		opts = append(opts, client.Stdin([]byte(in.Stdin)))
	}
	if in.Background {
		return s.startBackground(ctx, st, sb, argv, opts)
	}
	res, stdout, stderr, err := s.runKept(ctx, sb, argv, opts)
	if err != nil {
		if res != nil { // a timeout, with what it wrote
			r := toolError(err)
			r.Content = append(r.Content, &mcp.TextContent{Text: renderExec(res, stdout, stderr)})
			return r, nil
		}
		return nil, err
	}
	return textResult("%s", renderExec(res, stdout, stderr)), nil
}

// runKept runs argv as a buffered exec that keeps, of each stream, its
// first and its last MaxOutputBytes/2 bytes (output_tail): what the reply
// shows, its real end included (how a build or a test run ended). The
// worker keeps them in memory and answers with them, so nothing of the
// output is stored in SBX_OUT, which every tenant shares: a streamed exec
// would store all of it there (up to 1 GiB per stream) only for this
// server to drop all but its ends.
func (s *Server) runKept(ctx context.Context, sb *client.Sandbox, argv []string, opts []client.ExecOption) (*events.ExecResult, *headTail, *headTail, error) {
	opts = append(opts, client.OutputLimit(int64(s.cfg.MaxOutputBytes)), client.OutputTail())
	res, err := sb.Exec(ctx, argv, opts...)
	if res == nil {
		return nil, nil, nil, err
	}
	return res, s.kept(res.Stdout, res.StdoutCut, res.StdoutBytes), s.kept(res.Stderr, res.StderrCut, res.StderrBytes), err
}

// kept is a stream of an output_tail reply as a headTail: data is its
// first cut bytes and its last ones, of total; without a cut, what the
// worker kept (a worker without output_tail keeps the head only).
func (s *Server) kept(data []byte, cut, total int64) *headTail {
	if cut <= 0 || cut > int64(len(data)) {
		return s.buffered(data, total)
	}
	h := newHeadTail(max(s.cfg.MaxOutputBytes, len(data)))
	h.head = append(h.head, data[:cut]...)
	h.tail = append(h.tail, data[cut:]...)
	h.total = max(total, int64(len(data)))
	return h
}

// buffered is a buffered reply's stream as a headTail: data is what the
// server kept of total bytes.
func (s *Server) buffered(data []byte, total int64) *headTail {
	h := newHeadTail(s.cfg.MaxOutputBytes)
	_, _ = h.Write(data)
	h.lost = max(total-int64(len(data)), 0)
	return h
}

// renderExec renders a finished command for a model.
func renderExec(res *events.ExecResult, stdout, stderr *headTail) string {
	var b strings.Builder
	fmt.Fprintf(&b, "exit_code: %d", res.ExitCode)
	if res.Signal != "" {
		fmt.Fprintf(&b, " (signal %s)", res.Signal)
	}
	if res.OOMKilled {
		b.WriteString(" (killed: out of memory)")
	}
	if res.TimedOut {
		b.WriteString(" (killed: timeout)")
	}
	fmt.Fprintf(&b, "\nduration: %s\n", (time.Duration(res.DurationMS) * time.Millisecond).Round(time.Millisecond))
	stream := func(name string, h *headTail) {
		text := h.String()
		if text == "" {
			fmt.Fprintf(&b, "%s: (empty)\n", name)
			return
		}
		fmt.Fprintf(&b, "%s:\n%s", name, text)
		if !strings.HasSuffix(text, "\n") {
			b.WriteString("\n")
		}
	}
	stream("stdout", stdout)
	stream("stderr", stderr)
	return b.String()
}

type codeIn struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox, from create_sandbox"`
	Code      string `json:"code" jsonschema:"the code to run"`
	Language  string `json:"language,omitempty" jsonschema:"the interpreter: python (default), or another the sandbox has"`
	Context   string `json:"context,omitempty" jsonschema:"a name: runs with the same context share variables and imports, where the backend keeps state"`
	Timeout   any    `json:"timeout,omitempty" jsonschema:"kill the run after this long: seconds or a duration; default 2m"`
}

func (s *Server) runCode(ctx context.Context, st *session, in codeIn) (*mcp.CallToolResult, error) {
	sb, err := st.sandbox(in.SandboxID)
	if err != nil {
		return nil, err
	}
	if in.Code == "" {
		return toolError(events.Errorf(events.CodeMissingField, "code is empty").With("field", "code")), nil
	}
	timeout, bad := duration("timeout", in.Timeout, s.cfg.ExecTimeout, s.cfg.MaxExecTimeout)
	if bad != nil {
		return bad, nil
	}
	code := client.Code{Language: in.Language, Code: in.Code, Context: in.Context, Timeout: timeout}
	var r *events.RunCodeReply
	if in.Context == "" && oneOffContext(sb, in.Language) {
		r, err = s.runOnce(ctx, sb, code)
		if errors.Is(err, events.ErrCapabilityNotSupported) { // a sandbox without the agent
			r, err = sb.RunCode(ctx, code)
		}
	} else {
		r, err = sb.RunCode(ctx, code)
	}
	if err != nil {
		return nil, err
	}
	res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: renderExec(&r.ExecResult,
		s.buffered(r.Stdout, r.StdoutBytes), s.buffered(r.Stderr, r.StderrBytes))}}}
	if r.Error != nil {
		res.Content = append(res.Content, &mcp.TextContent{Text: fmt.Sprintf("exception %s: %s\n%s",
			r.Error.Name, r.Error.Value, cut([]byte(r.Error.Traceback), s.cfg.MaxOutputBytes, 0))})
	}
	res.Content = append(res.Content, s.richContent(r.Results)...)
	return res, nil
}

// oneOffContext reports whether run_code without a context runs in a
// context of its own: python on a backend with stateful_code, whose
// contexts return the last expression's value and images where a plain
// interpreter run returns output only (ADR 39).
func oneOffContext(sb *client.Sandbox, language string) bool {
	switch strings.ToLower(language) {
	case "", "python", "python3", "py":
		return slices.Contains(sb.Capabilities, events.CapStatefulCode)
	}
	return false
}

// runOnce runs code in a new context and deletes the context after, within
// the kill grace (its interpreter ends with the sandbox at the latest).
func (s *Server) runOnce(ctx context.Context, sb *client.Sandbox, code client.Code) (*events.RunCodeReply, error) {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	code.Context = "mcp-once-" + hex.EncodeToString(rnd[:])
	r, err := sb.RunCode(ctx, code)
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.KillGrace)
	defer cancel()
	if _, derr := s.cfg.Client.CodeContext(dctx, events.CodeContextRequest{SandboxID: sb.ID(), ContextID: code.Context, Action: events.ContextDelete}); derr != nil && err == nil {
		s.log.Debug("one-off context not deleted", "sandbox_id", sb.ID(), "context", code.Context, "err", derr)
	}
	return r, err
}

type pathIn struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox, from create_sandbox"`
	Path      string `json:"path" jsonschema:"the path in the sandbox; relative paths are from the sandbox's working directory"`
}

type sandboxIn struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox, from create_sandbox"`
}

type timeoutIn struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox, from create_sandbox"`
	Lifetime  any    `json:"lifetime" jsonschema:"the new remaining lifetime from now: seconds (600) or a duration (10m, 1h)"`
}

func (s *Server) setTimeout(ctx context.Context, st *session, in timeoutIn) (*mcp.CallToolResult, error) {
	sb, err := st.sandbox(in.SandboxID)
	if err != nil {
		return nil, err
	}
	if in.Lifetime == nil {
		return toolError(events.Errorf(events.CodeMissingField, "lifetime is missing").With("field", "lifetime")), nil
	}
	d, bad := duration("lifetime", in.Lifetime, 0, s.cfg.MaxLifetime)
	if bad != nil {
		return bad, nil
	}
	if d <= 0 {
		return invalid("lifetime", "lifetime must be more than 0 (kill_sandbox ends a sandbox now)"), nil
	}
	dl, err := sb.SetTimeout(ctx, d)
	if err != nil {
		return nil, err
	}
	return textResult("sandbox %s now ends at %s (in %s)", sb.ID(), dl.UTC().Format(time.RFC3339), time.Until(dl).Round(time.Second)), nil
}

type listIn struct{}

func (s *Server) listSandboxes(ctx context.Context, st *session, _ listIn) (*mcp.CallToolResult, error) {
	sbs := st.list()
	if len(sbs) == 0 {
		return textResult("no sandboxes in this session (create_sandbox makes one)"), nil
	}
	var b strings.Builder
	for _, sb := range sbs {
		info, err := sb.Info(ctx)
		if err != nil {
			fmt.Fprintf(&b, "%s  %s  (state unknown: %v)\n", sb.ID(), sb.Backend, err)
			continue
		}
		fmt.Fprintf(&b, "%s  backend=%s class=%s state=%s deadline=%s\n", sb.ID(), info.Backend, info.Class, info.State,
			info.Deadline.UTC().Format(time.RFC3339))
	}
	return textResult("%s", b.String()), nil
}

func (s *Server) killSandbox(ctx context.Context, st *session, in sandboxIn) (*mcp.CallToolResult, error) {
	if st.wasKilled(in.SandboxID) { // kill is idempotent, as the API's
		return textResult("sandbox %s already gone (killed before)", in.SandboxID), nil
	}
	sb, err := st.sandbox(in.SandboxID)
	if err != nil {
		return nil, err
	}
	if err := sb.Kill(ctx); err != nil {
		return nil, err
	}
	st.remove(sb.ID())
	return textResult("sandbox %s killed", sb.ID()), nil
}
