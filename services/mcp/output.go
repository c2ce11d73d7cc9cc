package mcpserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// headTail keeps the first and the last limit/2 bytes written to it and
// counts the rest: a model sees how output began and how it ended.
type headTail struct {
	mu    sync.Mutex
	limit int
	head  []byte
	tail  []byte // the last bytes written, in order
	total int64
	// lost counts bytes the producer never delivered (a buffered exec's
	// cap): the tail shown is then not the output's end.
	lost int64
}

func newHeadTail(limit int) *headTail { return &headTail{limit: max(limit, 2)} }

func (h *headTail) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(p)
	h.total += int64(n)
	half := h.limit / 2
	if room := half - len(h.head); room > 0 {
		k := min(room, len(p))
		h.head = append(h.head, p[:k]...)
		p = p[k:]
	}
	if len(p) == 0 {
		return n, nil
	}
	h.tail = append(h.tail, p...)
	if over := len(h.tail) - (h.limit - half); over > 0 {
		h.tail = append(h.tail[:0], h.tail[over:]...)
	}
	return n, nil
}

// produced records that the producer wrote n bytes in all: those past
// what was written to h were dropped by the server (its cap).
func (h *headTail) produced(n int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lost = max(n-h.total, 0)
}

// String renders what was kept, with a note where bytes were cut and one
// at the end when the producer dropped the output's end.
func (h *headTail) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	kept := int64(len(h.head) + len(h.tail))
	var out string
	if kept == h.total {
		out = printable(append(append([]byte{}, h.head...), h.tail...))
	} else {
		out = printable(h.head) + fmt.Sprintf("\n[… %d bytes cut here (%d in all; the first %d and the last %d shown) …]\n",
			h.total-kept, h.total+h.lost, len(h.head), len(h.tail)) + printable(h.tail)
	}
	if h.lost > 0 {
		out += fmt.Sprintf("\n[… output capped by the server: it kept only the first %d of the %d bytes written; the last %d are not shown …]", h.total, h.total+h.lost, h.lost)
	}
	return out
}

// cut renders b whole, or its head and tail around a note when it is
// longer than limit; total above len(b) is output the producer dropped
// after b (a buffered cap), said as such.
func cut(b []byte, limit int, total int64) string {
	h := newHeadTail(limit)
	_, _ = h.Write(b)
	h.lost = max(total-int64(len(b)), 0)
	return h.String()
}

// printable is b as text: invalid UTF-8 (binary output, a multi-byte
// rune cut in two) becomes U+FFFD rather than garbage.
func printable(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// textResult is a successful result of one text.
func textResult(format string, args ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, args...)}}}
}

// errorInfo is the structured part of a tool error.
type errorInfo struct {
	Code      string `json:"code"`
	Name      string `json:"name"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
	Action    string `json:"action,omitempty"`
}

// toolError renders err as a tool error: its SBX code and name, its
// message, whether the same call may succeed later, and what to do. A
// cancelled or timed-out call is said as such.
func toolError(err error) *mcp.CallToolResult {
	var e *events.Error
	switch {
	case errors.As(err, &e):
	case errors.Is(err, context.DeadlineExceeded):
		e = events.Errorf(events.CodeWorkerTimeout, "the call did not finish in time: %v", err)
	case errors.Is(err, context.Canceled):
		e = events.Errorf(events.CodeBackendUnavailable, "the call was cancelled: %v", err)
	default:
		e = events.AsError(err)
	}
	info := errorInfo{Code: string(e.Code), Name: e.Name, Message: e.Message, Retryable: e.Retryable}
	if c, ok := events.Lookup(e.Code); ok {
		info.Action = c.Action
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "error %s %s: %s\n", info.Code, info.Name, info.Message)
	if info.Retryable {
		b.WriteString("retryable: yes — the same call may succeed later; retry with back-off\n")
	} else {
		b.WriteString("retryable: no — change the call\n")
	}
	if info.Action != "" {
		fmt.Fprintf(&b, "what to do: %s\n", info.Action)
	}
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: b.String()}},
		StructuredContent: map[string]any{"error": info}}
}

// invalid is a tool error for a bad argument.
func invalid(field, format string, args ...any) *mcp.CallToolResult {
	return toolError(events.Errorf(events.CodeInvalidValue, format, args...).With("field", field))
}
