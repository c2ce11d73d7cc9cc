package server

import (
	"fmt"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"

	"github.com/sandboxio/sandboxio/internal/agent/proto"
)

// No request may end the agent: in a sandbox with the agent it is the
// container's main process, and its death ends the sandbox. Every goroutine
// that serves a request defers recovered; a panic there is answered as an
// ErrInternal error naming the operation and where it happened (never a
// value from the request: a panic's value may carry a path or content), and
// the agent goes on serving (ADR 29).

// panics counts the panics the agent recovered from.
var panics atomic.Int64

// Panics is how many panics the agent recovered from so far.
func Panics() int64 { return panics.Load() }

// recovered, deferred, turns a panic of the goroutine serving op into an
// ErrInternal error given to answer (nil: nothing to answer) and a log
// record with the stack.
func (s *Server) recovered(op string, answer func(*proto.Error)) {
	v := recover()
	if v == nil {
		return
	}
	panics.Add(1)
	site := panicSite()
	s.cfg.Log.Error("agent: recovered from a panic serving a request", "op", op, "site", site,
		"panic", panicKind(v), "stack", string(debug.Stack()))
	if answer != nil {
		answer(&proto.Error{Kind: proto.ErrInternal,
			Message: fmt.Sprintf("the agent failed serving %s (a bug, at %s); it goes on serving", op, site)})
	}
}

// panicKind describes a panic's value without its content: a runtime
// error's text (an index, a nil map: no payload) or the value's type.
func panicKind(v any) string {
	if re, ok := v.(runtime.Error); ok {
		return re.Error()
	}
	return fmt.Sprintf("%T", v)
}

// panicSite is the file and line of the agent's code that panicked: the
// first frame below the runtime's panic machinery outside this file.
func panicSite() string {
	pcs := make([]uintptr, 32)
	n := runtime.Callers(3, pcs)
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		if !strings.HasPrefix(f.Function, "runtime.") && !strings.HasSuffix(f.File, "/recover.go") && f.File != "" {
			return fmt.Sprintf("%s:%d", filepath.Base(f.File), f.Line)
		}
		if !more {
			return "unknown"
		}
	}
}
