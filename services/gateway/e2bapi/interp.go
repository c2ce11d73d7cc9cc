package e2bapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// interpKeepalive is how often /execute writes a keepalive line while the
// code runs, as E2B's code interpreter does.
const interpKeepalive = 5 * time.Second

// serveInterpreter is the code interpreter's HTTP API (port 49999) over
// sandboxio's run_code and code_context: /execute answers NDJSON lines,
// end_of_execution last.
func (a *API) serveInterpreter(w http.ResponseWriter, r *http.Request, t *target) {
	p := strings.TrimSuffix(r.URL.Path, "/")
	switch {
	case p == "/health" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, "OK")
	case p == "/execute" && r.Method == http.MethodPost:
		a.execute(w, r, t)
	case p == "/contexts" && r.Method == http.MethodPost:
		a.createContext(w, r, t)
	case p == "/contexts" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, []any{})
	case strings.HasPrefix(p, "/contexts/"):
		rest := strings.TrimPrefix(p, "/contexts/")
		id, action, _ := strings.Cut(rest, "/")
		switch {
		case action == "restart" && r.Method == http.MethodPost:
			a.contextOp(w, r, t, id, events.ContextRestart)
		case action == "" && r.Method == http.MethodDelete:
			a.contextOp(w, r, t, id, events.ContextDelete)
		default:
			http.Error(w, "Not Found", http.StatusNotFound)
		}
	default:
		http.Error(w, "Not Found", http.StatusNotFound)
	}
}

type executeRequest struct {
	Code      string            `json:"code"`
	ContextID string            `json:"context_id"`
	Language  string            `json:"language"`
	EnvVars   map[string]string `json:"env_vars"`
}

func (a *API) execute(w http.ResponseWriter, r *http.Request, t *target) {
	var req executeRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes)).Decode(&req); err != nil {
		http.Error(w, "invalid request body", http.StatusBadRequest)
		return
	}
	if req.ContextID != "" && req.Language != "" {
		http.Error(w, "You can only specify either context_id or language, not both.", http.StatusBadRequest)
		return
	}
	if len(req.EnvVars) > 0 {
		http.Error(w, "env_vars are not supported by this server", http.StatusBadRequest)
		return
	}
	lang := strings.ToLower(req.Language)
	switch lang {
	case "", "python":
		lang = "python"
	case "js", "javascript":
		lang = "javascript"
	case "bash", "sh":
		lang = "bash"
	default:
		http.Error(w, "language "+truncate(lang, 32)+" is not supported by this server", http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	enc := json.NewEncoder(w)
	line := func(v any) {
		_ = enc.Encode(v)
		if flusher != nil {
			flusher.Flush()
		}
	}
	type outcome struct {
		res *events.RunCodeReply
		err error
	}
	done := make(chan outcome, 1)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		res, err := t.cl.RunCode(ctx, events.RunCodeRequest{SandboxID: t.id, Language: lang, Code: req.Code, ContextID: req.ContextID})
		done <- outcome{res, err}
	}()
	defer wg.Wait()
	tick := time.NewTicker(interpKeepalive)
	defer tick.Stop()
	var o outcome
	for waiting := true; waiting; {
		select {
		case <-tick.C:
			line(map[string]string{"type": "keepalive"})
		case o = <-done:
			waiting = false
		}
	}
	now := time.Now().UTC().Format(time.RFC3339Nano)
	if o.err != nil {
		name := "UnexpectedEndOfExecution"
		if errors.Is(o.err, events.ErrContextNotFound) {
			name = "ContextNotFound"
		}
		line(map[string]string{"type": "error", "name": name, "value": messageOf(o.err), "traceback": ""})
		line(map[string]string{"type": "end_of_execution"})
		return
	}
	if len(o.res.Stdout) > 0 {
		line(map[string]string{"type": "stdout", "text": string(o.res.Stdout), "timestamp": now})
	}
	if len(o.res.Stderr) > 0 {
		line(map[string]string{"type": "stderr", "text": string(o.res.Stderr), "timestamp": now})
	}
	for _, rr := range o.res.Results {
		m := map[string]any{"type": "result", "is_main_result": rr.IsMainResult}
		for k, v := range map[string]string{"text": rr.Text, "html": rr.HTML, "markdown": rr.Markdown, "png": rr.PNG, "jpeg": rr.JPEG, "svg": rr.SVG} {
			if v != "" {
				m[k] = v
			}
		}
		if rr.JSON != nil {
			m["json"] = rr.JSON
		}
		line(m)
	}
	if o.res.Error != nil {
		line(map[string]string{"type": "error", "name": o.res.Error.Name, "value": o.res.Error.Value, "traceback": o.res.Error.Traceback})
	}
	line(map[string]string{"type": "end_of_execution"})
}

type contextReply struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

func (a *API) createContext(w http.ResponseWriter, r *http.Request, t *target) {
	var req struct {
		Language string `json:"language"`
		Cwd      string `json:"cwd"`
	}
	if r.ContentLength != 0 {
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes)).Decode(&req); err != nil {
			http.Error(w, "invalid request body", http.StatusBadRequest)
			return
		}
	}
	lang := strings.ToLower(req.Language)
	if lang == "" {
		lang = "python"
	}
	id := events.NewID()
	ctx, cancel := context.WithTimeout(r.Context(), a.cfg.RequestTimeout)
	defer cancel()
	if _, err := t.cl.CodeContext(ctx, events.CodeContextRequest{SandboxID: t.id, ContextID: id, Action: events.ContextCreate, Language: lang}); err != nil {
		http.Error(w, messageOf(err), statusOf(err))
		return
	}
	cwd := req.Cwd
	if cwd == "" {
		cwd = homeDir
	}
	writeJSON(w, http.StatusOK, contextReply{ID: id, Language: lang, Cwd: cwd})
}

func (a *API) contextOp(w http.ResponseWriter, r *http.Request, t *target, id, action string) {
	ctx, cancel := context.WithTimeout(r.Context(), a.cfg.RequestTimeout)
	defer cancel()
	if _, err := t.cl.CodeContext(ctx, events.CodeContextRequest{SandboxID: t.id, ContextID: id, Action: action}); err != nil {
		if errors.Is(err, events.ErrContextNotFound) || errors.Is(err, events.ErrInvalidID) {
			http.Error(w, "Context "+truncate(id, 64)+" not found", http.StatusNotFound)
			return
		}
		http.Error(w, messageOf(err), statusOf(err))
		return
	}
	w.WriteHeader(http.StatusOK)
}
