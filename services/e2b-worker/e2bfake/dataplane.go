package e2bfake

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/sandboxio/sandboxio/internal/envdpb/connectjson"
	"github.com/sandboxio/sandboxio/internal/envdpb/filesystem"
	"github.com/sandboxio/sandboxio/internal/envdpb/filesystem/filesystemconnect"
	"github.com/sandboxio/sandboxio/internal/envdpb/process"
	"github.com/sandboxio/sandboxio/internal/envdpb/process/processconnect"
	"github.com/sandboxio/sandboxio/services/e2b-worker/internal/envelope"
)

const (
	envdPort   = 49983
	interpPort = 49999
)

// proxyError is the E2B proxy's JSON error (field order as on the wire).
type proxyError struct {
	SandboxID string `json:"sandboxId"`
	Message   string `json:"message"`
	Port      int    `json:"port,omitempty"`
	Code      int    `json:"code"`
}

func writeProxyError(w http.ResponseWriter, e proxyError) {
	writeJSON(w, http.StatusBadGateway, e)
}

// serveData is the data-plane proxy: it routes by E2b-Sandbox-Id and
// E2b-Sandbox-Port to the sandbox's envd or code interpreter.
func (s *Server) serveData(w http.ResponseWriter, r *http.Request) {
	id, port := r.Header.Get("E2b-Sandbox-Id"), r.Header.Get("E2b-Sandbox-Port")
	switch {
	case id == "" && port == "":
		s.deviate(r, "missing routing headers E2b-Sandbox-Id and E2b-Sandbox-Port")
		http.Error(w, "Missing headers: E2b-Sandbox-Id, E2b-Sandbox-Port", http.StatusBadRequest)
		return
	case id == "":
		s.deviate(r, "missing routing header E2b-Sandbox-Id")
		http.Error(w, "Missing header: E2b-Sandbox-Id", http.StatusBadRequest)
		return
	case port == "":
		s.deviate(r, "missing routing header E2b-Sandbox-Port")
		http.Error(w, "Missing header: E2b-Sandbox-Port", http.StatusBadRequest)
		return
	}
	sb := s.lookup(id)
	f := s.dataFaults(sb)
	if f.Delay > 0 {
		t := time.NewTimer(f.Delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	running := false
	if sb != nil {
		s.mu.Lock()
		running = sb.state == "running" && s.sandboxes[id] == sb
		s.mu.Unlock()
	}
	if !running || f.BadGateway {
		writeProxyError(w, proxyError{SandboxID: id, Message: "The sandbox was not found", Code: http.StatusBadGateway})
		return
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		s.deviate(r, "E2b-Sandbox-Port %q is not a number", port)
	}
	switch p {
	case envdPort:
		sb.serveEnvd(w, r)
	case interpPort:
		sb.interp.serve(w, r)
	default:
		writeProxyError(w, proxyError{SandboxID: id, Message: "The sandbox is running but port is not open", Port: p, Code: http.StatusBadGateway})
	}
}

// rpcInfo describes a Connect procedure for request validation.
type rpcInfo struct {
	stream bool
	newReq func() proto.Message
}

var rpcs = map[string]rpcInfo{
	processconnect.ProcessListProcedure:           {false, func() proto.Message { return &process.ListRequest{} }},
	processconnect.ProcessStartProcedure:          {true, func() proto.Message { return &process.StartRequest{} }},
	processconnect.ProcessConnectProcedure:        {true, func() proto.Message { return &process.ConnectRequest{} }},
	processconnect.ProcessSendInputProcedure:      {false, func() proto.Message { return &process.SendInputRequest{} }},
	processconnect.ProcessSendSignalProcedure:     {false, func() proto.Message { return &process.SendSignalRequest{} }},
	processconnect.ProcessCloseStdinProcedure:     {false, func() proto.Message { return &process.CloseStdinRequest{} }},
	processconnect.ProcessUpdateProcedure:         {false, func() proto.Message { return &process.UpdateRequest{} }},
	filesystemconnect.FilesystemStatProcedure:     {false, func() proto.Message { return &filesystem.StatRequest{} }},
	filesystemconnect.FilesystemMakeDirProcedure:  {false, func() proto.Message { return &filesystem.MakeDirRequest{} }},
	filesystemconnect.FilesystemMoveProcedure:     {false, func() proto.Message { return &filesystem.MoveRequest{} }},
	filesystemconnect.FilesystemListDirProcedure:  {false, func() proto.Message { return &filesystem.ListDirRequest{} }},
	filesystemconnect.FilesystemRemoveProcedure:   {false, func() proto.Message { return &filesystem.RemoveRequest{} }},
	filesystemconnect.FilesystemWatchDirProcedure: {true, func() proto.Message { return &filesystem.WatchDirRequest{} }},
}

type ctxKey int

const userKey ctxKey = 1

// serveEnvd is the fake envd: envd's middleware chain (CORS Vary, access
// token, user authentication) in front of the Connect services and the HTTP
// endpoints.
func (sb *sandbox) serveEnvd(w http.ResponseWriter, r *http.Request) {
	s := sb.srv
	w.Header().Set("Vary", "Origin")
	switch r.URL.Path {
	case "/health":
		if r.Method != http.MethodGet {
			s.deviate(r, "/health must be GET")
		}
		w.Header().Set("Cache-Control", "no-store")
		w.Header()["Content-Type"] = []string{""}
		w.WriteHeader(http.StatusNoContent)
		return
	case "/files":
		sb.serveFiles(w, r)
		return
	}
	if sb.token != "" && r.Header.Get("X-Access-Token") != sb.token {
		if r.Header.Get("X-Access-Token") == "" {
			s.deviate(r, "missing X-Access-Token for a secure sandbox")
		}
		writeEnvdHTTPError(w, http.StatusUnauthorized, "unauthorized access, please provide a valid access token or method signing if supported")
		return
	}
	if r.URL.Path == "/envs" {
		b, _ := json.Marshal(sb.envVars)
		if sb.envVars == nil {
			b = []byte("{}")
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
		return
	}
	info, isRPC := rpcs[r.URL.Path]
	if !isRPC {
		s.deviate(r, "unknown envd endpoint")
	} else if r.Method != http.MethodPost {
		s.deviate(r, "Connect RPCs must be POST")
	}
	if isRPC && r.Method == http.MethodPost {
		sb.validateRPC(r, info)
		user, ok := sb.authUser(w, r, info.stream)
		if !ok {
			return
		}
		r = r.WithContext(withUser(r.Context(), user))
	}
	mux := http.NewServeMux()
	opts := connectjson.HandlerOptions()
	mux.Handle(processconnect.NewProcessHandler(&processService{sb: sb}, opts...))
	mux.Handle(filesystemconnect.NewFilesystemHandler(&filesystemService{sb: sb}, opts...))
	mux.ServeHTTP(w, r)
}

// writeEnvdHTTPError writes envd's HTTP-API error: an integer code, JSON with
// a trailing newline, nosniff.
func writeEnvdHTTPError(w http.ResponseWriter, status int, msg string) {
	b, _ := json.Marshal(struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{status, msg})
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// authUser resolves the Basic-auth user as envd's authn middleware does.
func (sb *sandbox) authUser(w http.ResponseWriter, r *http.Request, stream bool) (string, bool) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return defaultUser, true
	}
	user := ""
	if raw, ok := strings.CutPrefix(h, "Basic "); ok {
		if dec, err := base64.StdEncoding.DecodeString(raw); err == nil {
			name, pass, found := strings.Cut(string(dec), ":")
			if !found || pass != "" {
				sb.srv.deviate(r, "Authorization must be Basic base64(\"<user>:\") with an empty password")
			}
			user = name
		} else {
			sb.srv.deviate(r, "Authorization Basic value is not base64")
		}
	} else {
		sb.srv.deviate(r, "Authorization must use the Basic scheme")
	}
	if _, ok := users[user]; ok {
		return user, true
	}
	msg := fmt.Sprintf("invalid username: '%s'", user)
	if stream {
		body, _ := json.Marshal(map[string]any{"error": map[string]string{"code": "unauthenticated", "message": msg}})
		out := envelope.Append(nil, envelope.FlagEndStream, body)
		w.Header().Set("Content-Type", "application/connect+json")
		w.Header().Set("Content-Length", strconv.Itoa(len(out)))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(out)
		return "", false
	}
	body, _ := json.Marshal(struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}{"unauthenticated", msg})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnauthorized)
	_, _ = w.Write(body)
	return "", false
}

// validateRPC records deviations of a Connect request from what the SDKs
// send. It reads the (small) body and puts it back.
func (sb *sandbox) validateRPC(r *http.Request, info rpcInfo) {
	s := sb.srv
	ct := r.Header.Get("Content-Type")
	want := "application/json"
	if info.stream {
		want = "application/connect+json"
	}
	if ct != want {
		s.deviate(r, "Content-Type is %q, want %q", ct, want)
	}
	if r.Header.Get("Connect-Protocol-Version") != "1" {
		s.deviate(r, "missing Connect-Protocol-Version: 1")
	}
	if r.Header.Get("Connect-Accept-Encoding") != "" || strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
		s.deviate(r, "client asks for compressed answers; the SDKs disable compression")
	}
	if r.Header.Get("Connect-Content-Encoding") != "" || r.Header.Get("Content-Encoding") != "" {
		s.deviate(r, "client compresses its request; the SDKs disable compression")
	}
	if t := r.Header.Get("Connect-Timeout-Ms"); t != "" {
		if n, err := strconv.ParseInt(t, 10, 64); err != nil || n <= 0 {
			s.deviate(r, "bad Connect-Timeout-Ms %q", t)
		}
	}
	if info.stream {
		k := r.Header.Get("Keepalive-Ping-Interval")
		if n, err := strconv.Atoi(k); k == "" {
			s.deviate(r, "missing Keepalive-Ping-Interval (the SDKs send 50)")
		} else if err != nil || n <= 0 {
			s.deviate(r, "Keepalive-Ping-Interval %q must be a positive number of seconds (0 crashes envd)", k)
		}
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	r.Body = io.NopCloser(bytes.NewReader(raw))
	if err != nil {
		return
	}
	payload := raw
	if info.stream {
		envs, err := envelope.ReadAll(raw)
		if err != nil || len(envs) != 1 || envs[0].Flags != 0 {
			s.deviate(r, "request body must be exactly one uncompressed envelope")
			return
		}
		payload = envs[0].Payload
	}
	msg := info.newReq()
	if err := (protojson.UnmarshalOptions{}).Unmarshal(payload, msg); err != nil {
		s.deviate(r, "request message does not match %T: %s", msg, connectjson.Normalize(err.Error()))
		return
	}
	sb.checkSemantics(r, msg)
}

// checkSemantics flags valid-but-unlike-the-SDK requests.
func (sb *sandbox) checkSemantics(r *http.Request, msg proto.Message) {
	s := sb.srv
	switch m := msg.(type) {
	case *process.StartRequest:
		if m.GetProcess().GetCmd() == "" {
			s.deviate(r, "process.cmd is empty")
		}
		if m.Stdin == nil && m.Pty == nil {
			s.deviate(r, "the SDKs always send \"stdin\" (envd defaults it to true)")
		}
	case *process.ConnectRequest:
		if m.GetProcess().GetSelector() == nil {
			s.deviate(r, "process selector is empty")
		}
	case *process.SendInputRequest:
		if m.GetProcess().GetSelector() == nil || m.GetInput().GetInput() == nil {
			s.deviate(r, "process selector or input is empty")
		}
	case *process.SendSignalRequest:
		if m.GetSignal() == process.Signal_SIGNAL_UNSPECIFIED {
			s.deviate(r, "signal is SIGNAL_UNSPECIFIED")
		}
	case *filesystem.ListDirRequest:
		if m.GetDepth() < 1 {
			s.deviate(r, "ListDir depth must be >= 1 (the SDKs send 1 by default)")
		}
	}
}

// connectErr makes a Connect error with a fixed message.
func connectErr(code connect.Code, format string, args ...any) *connect.Error {
	return connect.NewError(code, fmt.Errorf(format, args...))
}
