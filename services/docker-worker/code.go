package dockerworker

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"strings"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

// maxArgCode is the largest code passed as an argument; longer code goes to
// the interpreter's stdin (one argument may not exceed 128 KiB on Linux).
const maxArgCode = 64 << 10

// RunCode runs code statelessly in a fresh interpreter process: python
// (python3) or sh. A context id asks for stateful code, which this backend
// does not offer.
func (b *Backend) RunCode(ctx context.Context, sandboxID string, req worker.CodeRequest) (worker.CodeResult, error) {
	if req.ContextID != "" {
		sb, err := b.lookup(ctx, sandboxID)
		if err != nil {
			return worker.CodeResult{}, err
		}
		if b.agentBin() == "" {
			return worker.CodeResult{}, events.Errorf(events.CodeCapabilityNotSupp,
				"this docker worker runs without the agent; context_id needs stateful_code").With("capability", string(events.CapStatefulCode))
		}
		return b.runInContext(ctx, sb, req)
	}
	var cmd []string
	var stdin io.Reader
	lang := strings.ToLower(req.Language)
	switch lang {
	case "", "python", "python3", "py":
		lang = "python"
		if len(req.Code) <= maxArgCode {
			cmd = []string{"python3", "-c", req.Code}
		} else {
			cmd, stdin = []string{"python3", "-"}, strings.NewReader(req.Code)
		}
	case "sh", "shell", "bash":
		lang = "sh"
		cmd, stdin = []string{"sh", "-s"}, strings.NewReader(req.Code)
	default:
		return worker.CodeResult{}, events.Errorf(events.CodeInvalidValue, "language %q is not supported (python, sh)", req.Language).With("field", "language")
	}
	tail := &tailBuffer{max: 64 << 10}
	st, err := b.Exec(ctx, sandboxID, worker.Process{ID: req.ProcessID, Cmd: cmd, Stdin: stdin,
		Stdout: req.Stdout, Stderr: io.MultiWriter(discardIfNil(req.Stderr), tail)})
	if err != nil {
		return worker.CodeResult{ExitStatus: st}, err
	}
	res := worker.CodeResult{ExitStatus: st}
	if lang == "python" && st.Code != 0 {
		res.Error = pythonError(tail.Bytes())
	}
	return res, nil
}

var pyExcLine = regexp.MustCompile(`^([A-Za-z_][\w.]*)(?::\s?(.*))?$`)

// pythonError extracts the exception from a traceback on stderr.
func pythonError(stderr []byte) *events.CodeError {
	s := string(stderr)
	i := strings.LastIndex(s, "Traceback (most recent call last):")
	if i < 0 {
		return nil
	}
	tb := strings.TrimRight(s[i:], "\n")
	lines := strings.Split(tb, "\n")
	m := pyExcLine.FindStringSubmatch(lines[len(lines)-1])
	if m == nil {
		return &events.CodeError{Name: "Error", Value: lines[len(lines)-1], Traceback: tb}
	}
	return &events.CodeError{Name: m[1], Value: m[2], Traceback: tb}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	buf bytes.Buffer
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf.Write(p)
	if over := t.buf.Len() - t.max; over > 0 {
		t.buf.Next(over)
	}
	return len(p), nil
}

func (t *tailBuffer) Bytes() []byte { return t.buf.Bytes() }
