package dockerworker

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/docker/docker/api/types/container"

	"github.com/sandboxio/sandboxio/services/docker-worker/internal/agent"
)

// A sandbox whose agent dies says why. The agent writes
// nothing to its stderr but the Go runtime's report of a fatal crash (a
// panic no recover catches, a runtime fatal error); the worker follows that
// stderr (keepAgentStderr) and keeps its first stderrKeep bytes.
// Only the agent can write there: the sandbox's processes get their own
// pipes, and the agent is non-dumpable, so its /proc/1/fd/2 is closed to
// them (ADR 29). The text is still treated as untrusted: one line, bounded,
// non-printable characters replaced.

const (
	// stderrKeep bounds what is kept of an agent's stderr.
	stderrKeep = 4 << 10
	// maxCrashLine bounds the crash line in a death's reason.
	maxCrashLine = 160
	// crashReportWait bounds the wait, after the die event, for the attach
	// stream to end: what the agent wrote before it died is read by then.
	crashReportWait = time.Second
)

// stderrHead keeps the first stderrKeep bytes of an agent's stderr.
type stderrHead struct {
	mu sync.Mutex
	b  []byte
}

// readFrom reads up to n bytes of a stderr frame from r into the head while
// it has room; k is how many it read (the caller discards the rest).
func (h *stderrHead) readFrom(r io.Reader, n int) (k int, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	room := min(n, stderrKeep-len(h.b))
	if room <= 0 {
		return 0, nil
	}
	start := len(h.b)
	h.b = append(h.b, make([]byte, room)...)
	k, err = io.ReadFull(r, h.b[start:])
	h.b = h.b[:start+k]
	return k, err
}

func (h *stderrHead) text() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return string(h.b)
}

// agentStderr is where an agent's stderr is kept: head, complete once done
// is closed (the stream carrying it ended).
type agentStderr struct {
	head *stderrHead
	done <-chan struct{}
}

// keepAgentStderr keeps the stderr of sb's agent, adopted as cl: on the
// attach channel it comes with the agent's own stream; on the socket channel
// (ADR 24) the worker attaches to the container's stderr alone, a stream
// that carries nothing until a crash, read until the container ends or the
// backend stops. An attach that fails leaves the death without the crash's
// line, nothing else.
func (b *Backend) keepAgentStderr(sb *sandbox, cl *agent.Client) {
	if ac, ok := cl.Conn().(*attachConn); ok {
		sb.mu.Lock()
		sb.agentStderr = &agentStderr{head: ac.r.stderr, done: cl.Done()}
		sb.mu.Unlock()
		return
	}
	// Only the attach is bounded here; the stream lives until the container ends or the backend stops.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	hj, err := b.cli.ContainerAttach(ctx, sb.containerID, container.AttachOptions{Stream: true, Stderr: true})
	cancel()
	if err != nil {
		b.log.Warn("the agent's stderr is not followed: a crash will not say why", "sandbox", sb.id, slog.Any("err", err))
		return
	}
	done := make(chan struct{})
	es := &agentStderr{head: &stderrHead{}, done: done}
	sb.mu.Lock()
	sb.agentStderr = es
	sb.mu.Unlock()
	b.wg.Add(2)
	go func() {
		defer b.wg.Done()
		defer close(done)
		_, _ = io.Copy(io.Discard, &demux{r: hj.Reader, stderr: es.head})
	}()
	go func() {
		defer b.wg.Done()
		select {
		case <-done:
		case <-b.runDone:
		}
		hj.Close()
	}()
}

// agentCrash is the first line of the crash report the sandbox's agent
// wrote to its stderr, made safe; "" when there is none. It waits, at most
// crashReportWait, for the stream carrying the stderr to end.
func agentCrash(sb *sandbox) string {
	sb.mu.Lock()
	es := sb.agentStderr
	sb.mu.Unlock()
	if es == nil {
		return ""
	}
	t := time.NewTimer(crashReportWait)
	defer t.Stop()
	select {
	case <-es.done:
	case <-t.C:
	}
	return crashLine(es.head.text())
}

// crashLine finds the first line of a Go crash report in s: "panic: …",
// "fatal error: …" or a signal's ("SIGSEGV: segmentation violation").
func crashLine(s string) string {
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: ") || isSignalLine(line) {
			return safeLine(line, maxCrashLine)
		}
	}
	return ""
}

func isSignalLine(line string) bool {
	name, _, ok := strings.Cut(line, ": ")
	if !ok || len(name) < 4 || len(name) > 12 || !strings.HasPrefix(name, "SIG") {
		return false
	}
	return strings.IndexFunc(name, func(r rune) bool { return r < 'A' || r > 'Z' }) < 0
}

// safeLine is s with every non-printable rune (and invalid UTF-8) replaced
// by '?', cut to at most max bytes.
func safeLine(s string, max int) string {
	var b strings.Builder
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			r = '?'
		}
		if b.Len()+utf8.RuneLen(r) > max {
			b.WriteString("…")
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}
