package e2bapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"connectrpc.com/connect"

	"github.com/sandboxio/sandboxio/internal/envdpb/filesystem/filesystemconnect"
	"github.com/sandboxio/sandboxio/internal/envdpb/process/processconnect"
	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// proxyError is E2B's proxy error (field order as on the wire), HTTP 502:
// the SDKs read it as "the sandbox is not running".
type proxyError struct {
	SandboxID string `json:"sandboxId"`
	Message   string `json:"message"`
	Port      int    `json:"port,omitempty"`
	Code      int    `json:"code"`
}

func writeSandboxNotFound(w http.ResponseWriter, id string) {
	writeJSON(w, http.StatusBadGateway, proxyError{SandboxID: truncate(id, 64), Message: "The sandbox was not found", Code: http.StatusBadGateway})
}

// writeEnvdHTTPError is envd's HTTP-level error: an integer code, JSON with a
// trailing newline.
func writeEnvdHTTPError(w http.ResponseWriter, status int, msg string) {
	b, _ := json.Marshal(apiError{Code: status, Message: msg})
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

const unauthorizedMsg = "unauthorized access, please provide a valid access token or method signing if supported"

// target is the sandbox a sandbox-plane request addresses, once its token
// was checked.
type target struct {
	id     string
	tenant string
	cl     *client.Client
	user   string
}

type targetKey struct{}

func targetOf(ctx context.Context) *target { t, _ := ctx.Value(targetKey{}).(*target); return t }

// maxEnvdMessage bounds one Connect message the front door reads: the
// largest legal one is a request sandboxio accepts (at most
// events.MaxRequestBytes: a stdin chunk, a Start's argv and env), with 1 MiB
// of room for its codec's framing. A larger one is resource_exhausted
// before it is read whole.
const maxEnvdMessage = 1<<20 + events.MaxRequestBytes

// maxEnvdBody bounds a Connect request's whole body: every RPC served
// takes one message (an envelope prefix, or an end-stream, besides).
const maxEnvdBody = maxEnvdMessage + 1<<10

// envdHandlers are the Connect services, built once.
type envdHandlers struct {
	once sync.Once
	mux  http.Handler
}

func (a *API) envdMux() http.Handler {
	a.envd.once.Do(func() {
		mux := http.NewServeMux()
		opts := append(handlerOptions(), connect.WithReadMaxBytes(maxEnvdMessage))
		mux.Handle(processconnect.NewProcessHandler(&processService{a: a}, opts...))
		mux.Handle(filesystemconnect.NewFilesystemHandler(&filesystemService{a: a}, opts...))
		a.envd.mux = http.MaxBytesHandler(mux, maxEnvdBody)
	})
	return a.envd.mux
}

// serveSandbox is the sandbox plane: envd (49983) and the code
// interpreter (49999) of one sandbox.
func (a *API) serveSandbox(w http.ResponseWriter, r *http.Request, id string, port int) {
	if port != EnvdPort && port != InterpreterPort {
		writeJSON(w, http.StatusBadGateway, proxyError{SandboxID: truncate(id, 64),
			Message: "The sandbox is running but port is not open", Port: port, Code: http.StatusBadGateway})
		return
	}
	w.Header().Set("Vary", "Origin")
	tok := r.Header.Get("X-Access-Token")
	if tok == "" && port == InterpreterPort {
		tok = r.Header.Get("E2b-Traffic-Access-Token")
	}
	tenant, ok := a.checkToken(id, tok)
	if !ok && port == EnvdPort && r.URL.Path == "/files" {
		tenant, ok = a.checkSignature(r, id)
	}
	if !ok {
		if port == EnvdPort && r.URL.Path == "/health" {
			// envd's /health needs no token, but without one nothing says
			// whose sandbox this is: it answers as for an unknown sandbox.
			writeSandboxNotFound(w, id)
			return
		}
		writeEnvdHTTPError(w, http.StatusUnauthorized, unauthorizedMsg)
		return
	}
	cl, err := a.clientFor(tenant)
	if err != nil {
		writeEnvdHTTPError(w, http.StatusInternalServerError, "internal error")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.cfg.RequestTimeout)
	sb, err := lookup(ctx, cl, id)
	cancel()
	if err != nil || sb.Tenant != tenant {
		if err != nil && statusOf(err) != http.StatusNotFound {
			writeEnvdHTTPError(w, statusOf(err), messageOf(err))
			return
		}
		writeSandboxNotFound(w, id)
		return
	}
	t := &target{id: id, tenant: tenant, cl: cl}
	if port == InterpreterPort {
		a.serveInterpreter(w, r, t)
		return
	}
	switch r.URL.Path {
	case "/health":
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusNoContent)
		return
	case "/files":
		a.serveFiles(w, r, t)
		return
	case "/envs":
		writeJSON(w, http.StatusOK, map[string]string{})
		return
	}
	if r.Method == http.MethodPost && (strings.HasPrefix(r.URL.Path, "/process.Process/") ||
		strings.HasPrefix(r.URL.Path, "/filesystem.Filesystem/")) {
		user, ok := basicUser(r.Header.Get("Authorization"))
		if !ok {
			writeUnauthenticated(w, r, fmt.Sprintf("invalid username: '%s'", truncate(user, 64)))
			return
		}
		t.user = user
	}
	a.envdMux().ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), targetKey{}, t)))
}

// knownUsers are the envd users the front door accepts; every process
// runs as the sandbox image's user whichever is named.
var knownUsers = map[string]bool{"": true, "user": true, "root": true}

// basicUser reads envd's user choice: Basic base64("<user>:").
func basicUser(h string) (string, bool) {
	if h == "" {
		return "", true
	}
	raw, ok := strings.CutPrefix(h, "Basic ")
	if !ok {
		return "", false
	}
	dec, err := base64.StdEncoding.DecodeString(raw)
	if err != nil {
		return "", false
	}
	name, _, _ := strings.Cut(string(dec), ":")
	return name, knownUsers[name]
}

// writeUnauthenticated is envd's refusal of a user: a Connect error,
// in an end-stream envelope for a streaming call.
func writeUnauthenticated(w http.ResponseWriter, r *http.Request, msg string) {
	body, _ := json.Marshal(map[string]any{"error": map[string]string{"code": "unauthenticated", "message": msg}})
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/connect+") {
		out := append([]byte{2, 0, 0, 0, 0}, body...)
		n := len(body)
		out[1], out[2], out[3], out[4] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
		w.Header().Set("Content-Type", "application/connect+json")
		w.Header().Set("Content-Length", strconv.Itoa(len(out)))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(out)
		return
	}
	b, _ := json.Marshal(map[string]string{"code": "unauthenticated", "message": msg})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnauthorized)
	_, _ = w.Write(b)
}

// connectErrOf maps a sandboxio error to the Connect error envd gives.
func connectErrOf(err error) error {
	var ce *connect.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ce):
		return err
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, err)
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, errors.New("context deadline exceeded"))
	case errors.Is(err, events.ErrFileNotFound):
		return connect.NewError(connect.CodeNotFound, errors.New(messageOf(err)))
	case errors.Is(err, events.ErrProcessNotFound), errors.Is(err, events.ErrProcessExited):
		return connect.NewError(connect.CodeNotFound, errors.New(messageOf(err)))
	}
	switch statusOf(err) {
	case http.StatusNotFound:
		return connect.NewError(connect.CodeUnavailable, errors.New("sandbox not found"))
	case http.StatusBadRequest:
		return connect.NewError(connect.CodeInvalidArgument, errors.New(messageOf(err)))
	case http.StatusTooManyRequests:
		return connect.NewError(connect.CodeResourceExhausted, errors.New(messageOf(err)))
	case http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return connect.NewError(connect.CodeUnavailable, errors.New(messageOf(err)))
	}
	return connect.NewError(connect.CodeInternal, errors.New(messageOf(err)))
}
