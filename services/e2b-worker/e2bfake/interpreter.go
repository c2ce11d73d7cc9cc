package e2bfake

import (
	"bufio"
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxio/sandboxio/internal/timerslack"
)

//go:embed interp_helper.py
var interpHelper []byte

// interpreter is the fake code-interpreter server (port 49999). Python
// contexts are persistent python3 processes running interp_helper.py, so
// state survives between executions of one context. Other languages are
// rejected.
type interpreter struct {
	sb       *sandbox
	mu       sync.Mutex
	contexts map[string]*kernel
	defaults map[string]string // language -> default context id
}

type kernel struct {
	id, language, cwd string
	mu                sync.Mutex // one execution at a time
	cmd               *exec.Cmd
	stdin             io.WriteCloser
	out               *bufio.Reader
}

func newInterpreter(sb *sandbox) *interpreter {
	return &interpreter{sb: sb, contexts: map[string]*kernel{}, defaults: map[string]string{}}
}

func (in *interpreter) close() {
	in.mu.Lock()
	defer in.mu.Unlock()
	for id, k := range in.contexts {
		k.mu.Lock()
		k.kill()
		k.mu.Unlock()
		delete(in.contexts, id)
	}
}

func (k *kernel) kill() {
	if k.cmd != nil && k.cmd.Process != nil {
		_ = syscall.Kill(-k.cmd.Process.Pid, syscall.SIGKILL)
		_ = k.cmd.Wait()
		k.cmd = nil
	}
}

// boot starts the helper process of a kernel.
func (in *interpreter) boot(k *kernel) error {
	py := in.sb.srv.python
	if py == "" {
		return errors.New("python3 not available")
	}
	script := in.sb.root + "/.e2bfake_kernel.py"
	if err := os.WriteFile(script, interpHelper, 0o644); err != nil {
		return err
	}
	_, dir := in.sb.hostPath(k.cwd, "user")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd := exec.Command(py, "-u", script)
	cmd.Dir = dir
	cmd.Env = in.sb.childEnv("user", nil)
	cmd.ExtraFiles = []*os.File{pw}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		pr.Close()
		pw.Close()
		return err
	}
	if err := timerslack.Start(cmd.Start); err != nil {
		pr.Close()
		pw.Close()
		return err
	}
	pw.Close()
	k.cmd, k.stdin, k.out = cmd, stdin, bufio.NewReaderSize(pr, 1<<20)
	return nil
}

func normLang(l string) string {
	l = strings.ToLower(strings.TrimSpace(l))
	switch l {
	case "", "python3":
		return "python"
	case "js":
		return "javascript"
	case "ts":
		return "typescript"
	}
	return l
}

func (in *interpreter) newContext(language, cwd string) (*kernel, error) {
	language = normLang(language)
	if language != "python" {
		return nil, fmt.Errorf("language %q is not supported by the fake (python only)", language)
	}
	if cwd == "" {
		cwd = "/home/user"
	}
	k := &kernel{id: randID("", 32), language: language, cwd: cwd}
	if err := in.boot(k); err != nil {
		return nil, err
	}
	in.mu.Lock()
	in.contexts[k.id] = k
	in.mu.Unlock()
	return k, nil
}

type contextJSON struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

func plain(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, msg)
}

func (in *interpreter) serve(w http.ResponseWriter, r *http.Request) {
	s := in.sb.srv
	if in.sb.trafficTokenMissing(r) {
		return
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case r.URL.Path == "/health" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, "OK")
	case r.URL.Path == "/execute" && r.Method == http.MethodPost:
		in.execute(w, r)
	case r.URL.Path == "/contexts" && r.Method == http.MethodPost:
		var body struct {
			Language string `json:"language"`
			Cwd      string `json:"cwd"`
		}
		if !in.decode(w, r, &body, map[string]bool{"language": true, "cwd": true}) {
			return
		}
		k, err := in.newContext(body.Language, body.Cwd)
		if err != nil {
			plain(w, http.StatusBadRequest, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, contextJSON{k.id, k.language, k.cwd})
	case r.URL.Path == "/contexts" && r.Method == http.MethodGet:
		in.mu.Lock()
		out := []contextJSON{}
		for _, k := range in.contexts {
			out = append(out, contextJSON{k.id, k.language, k.cwd})
		}
		in.mu.Unlock()
		writeJSON(w, http.StatusOK, out)
	case len(parts) == 3 && parts[0] == "contexts" && parts[2] == "restart" && r.Method == http.MethodPost:
		k := in.get(parts[1])
		if k == nil {
			plain(w, http.StatusNotFound, fmt.Sprintf("Context %s not found", parts[1]))
			return
		}
		k.mu.Lock()
		k.kill()
		err := in.boot(k)
		k.mu.Unlock()
		if err != nil {
			plain(w, http.StatusInternalServerError, err.Error())
			return
		}
		w.WriteHeader(http.StatusOK)
	case len(parts) == 2 && parts[0] == "contexts" && r.Method == http.MethodDelete:
		in.mu.Lock()
		k := in.contexts[parts[1]]
		delete(in.contexts, parts[1])
		for l, id := range in.defaults {
			if id == parts[1] {
				delete(in.defaults, l)
			}
		}
		in.mu.Unlock()
		if k == nil {
			plain(w, http.StatusNotFound, fmt.Sprintf("Context %s not found", parts[1]))
			return
		}
		k.mu.Lock()
		k.kill()
		k.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	default:
		s.deviate(r, "unknown code-interpreter endpoint")
		plain(w, http.StatusNotFound, "Not Found")
	}
}

// trafficTokenMissing is a no-op hook: the fake issues no traffic tokens.
func (sb *sandbox) trafficTokenMissing(*http.Request) bool { return false }

func (in *interpreter) get(id string) *kernel {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.contexts[id]
}

// decode reads a JSON body and records unknown fields or a wrong content type.
func (in *interpreter) decode(w http.ResponseWriter, r *http.Request, v any, known map[string]bool) bool {
	s := in.sb.srv
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		s.deviate(r, "Content-Type is %q, want application/json", ct)
	}
	raw, _ := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		s.deviate(r, "body is not a JSON object: %v", err)
		plain(w, http.StatusUnprocessableEntity, "invalid JSON body")
		return false
	}
	for k := range obj {
		if !known[k] {
			s.deviate(r, "unknown field %q", k)
		}
	}
	if err := json.Unmarshal(raw, v); err != nil {
		s.deviate(r, "field has the wrong type: %v", err)
		plain(w, http.StatusUnprocessableEntity, err.Error())
		return false
	}
	return true
}

func (in *interpreter) execute(w http.ResponseWriter, r *http.Request) {
	s := in.sb.srv
	var req struct {
		Code      *string           `json:"code"`
		ContextID string            `json:"context_id"`
		Language  string            `json:"language"`
		EnvVars   map[string]string `json:"env_vars"`
	}
	if !in.decode(w, r, &req, map[string]bool{"code": true, "context_id": true, "language": true, "env_vars": true}) {
		return
	}
	if req.Code == nil {
		s.deviate(r, "code is required")
		plain(w, http.StatusUnprocessableEntity, "code is required")
		return
	}
	if req.ContextID != "" && req.Language != "" {
		plain(w, http.StatusBadRequest, "Only one of context_id or language can be provided")
		return
	}
	var k *kernel
	if req.ContextID != "" {
		if k = in.get(req.ContextID); k == nil {
			plain(w, http.StatusNotFound, fmt.Sprintf("Context %s not found", req.ContextID))
			return
		}
	} else {
		lang := normLang(req.Language)
		in.mu.Lock()
		id := in.defaults[lang]
		in.mu.Unlock()
		if k = in.get(id); k == nil {
			var err error
			if k, err = in.newContext(lang, ""); err != nil {
				status := http.StatusBadRequest
				if lang == "python" {
					status = http.StatusServiceUnavailable
				}
				plain(w, status, err.Error())
				return
			}
			in.mu.Lock()
			in.defaults[lang] = k.id
			in.mu.Unlock()
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cmd == nil {
		if err := in.boot(k); err != nil {
			plain(w, http.StatusInternalServerError, err.Error())
			return
		}
	}
	line, _ := json.Marshal(map[string]any{"code": *req.Code, "env_vars": req.EnvVars})
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	sf := &streamFaults{sb: in.sb, f: s.dataFaults(in.sb)}
	send := func(b []byte) {
		_, _ = w.Write(append(b, '\n'))
		if flusher != nil {
			flusher.Flush()
		}
		sf.after()
	}
	if _, err := k.stdin.Write(append(line, '\n')); err != nil {
		k.kill()
		send(unexpectedEnd())
		send([]byte(`{"type":"end_of_execution"}`))
		return
	}
	lines := make(chan []byte)
	readErr := make(chan error, 1)
	go func() {
		for {
			b, err := k.out.ReadBytes('\n')
			if err != nil {
				readErr <- err
				return
			}
			if bytes.Contains(b, []byte(`"type": "__done__"`)) {
				readErr <- nil
				return
			}
			select {
			case lines <- bytes.TrimRight(b, "\n"):
			case <-r.Context().Done():
				// keep draining until __done__ so the kernel stays in sync
			}
		}
	}()
	// drain waits for the reader to end, taking the lines it may still be
	// trying to hand over (else both wait on each other forever).
	drain := func() {
		for {
			select {
			case <-lines:
			case <-readErr:
				return
			}
		}
	}
	gone := in.sb.goneCh()
	ka := time.NewTicker(s.opts.InterpreterKeepalive)
	defer ka.Stop()
	stalled := false
	for {
		select {
		case <-r.Context().Done():
			k.kill() // interrupt the cell; the reader sees EOF
			drain()
			return
		case <-gone:
			k.kill()
			drain()
			panicAbort()
		case <-ka.C:
			if !stalled {
				send([]byte(`{"type":"keepalive"}`))
			}
		case b := <-lines:
			if stalled {
				continue
			}
			send(compactJSON(b))
			ka.Reset(s.opts.InterpreterKeepalive)
			if sf.f.Stall {
				stalled = true
			}
		case err := <-readErr:
			if stalled {
				<-r.Context().Done()
				k.kill()
				return
			}
			if err != nil {
				k.kill()
				send(unexpectedEnd())
			}
			if !sf.f.OmitEnd {
				send([]byte(`{"type":"end_of_execution"}`))
			}
			return
		}
	}
}

func compactJSON(b []byte) []byte {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return b
	}
	return buf.Bytes()
}

func unexpectedEnd() []byte {
	b, _ := json.Marshal(map[string]string{"type": "error", "name": "UnexpectedEndOfExecution", "value": "Kernel died unexpectedly", "traceback": ""})
	return b
}
