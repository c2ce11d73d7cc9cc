package dockerworker

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"strings"
	"testing"
)

// The crash line is the first line of a Go crash report, one line, bounded,
// printable: the agent's stderr is untrusted text.
func TestCrashLine(t *testing.T) {
	tests := []struct {
		name, stderr, want string
	}{
		{"panic", "panic: crash hook: SIGUSR2\n\ngoroutine 7 [running]:\nmain.init\n", "panic: crash hook: SIGUSR2"},
		{"after other text", "a warning\nfatal error: runtime: out of memory\n\nruntime stack:\n", "fatal error: runtime: out of memory"},
		{"signal dump", "SIGQUIT: quit\nPC=0x46 m=0 sigcode=0\n\ngoroutine 0 [idle]:\n", "SIGQUIT: quit"},
		{"no report", "something\nelse\n", ""},
		{"not a signal", "SIGNAL-ish: x\nSIGquit: y\n", ""},
		{"control characters", "panic: a\x1b[2Jb\x00c\xffd\n", "panic: a?[2Jb?c?d"},
		{"long", "panic: " + strings.Repeat("x", 500) + "\n", "panic: " + strings.Repeat("x", maxCrashLine-len("panic: ")) + "…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := crashLine(tt.stderr); got != tt.want {
				t.Fatalf("crashLine = %q, want %q", got, tt.want)
			}
		})
	}
}

// The demux keeps the first stderrKeep bytes of stderr frames and still
// reads stdout in full.
func TestDemuxKeepsStderrHead(t *testing.T) {
	var stream bytes.Buffer
	frame := func(kind byte, p []byte) {
		h := [8]byte{kind}
		binary.BigEndian.PutUint32(h[4:], uint32(len(p)))
		stream.Write(h[:])
		stream.Write(p)
	}
	frame(1, []byte("out1"))
	frame(2, bytes.Repeat([]byte("e"), 3000))
	frame(2, bytes.Repeat([]byte("f"), 3000))
	frame(1, []byte("out2"))
	head := &stderrHead{}
	out, err := io.ReadAll(&demux{r: bufio.NewReader(&stream), stderr: head})
	if err != nil || string(out) != "out1out2" {
		t.Fatalf("stdout %q, %v", out, err)
	}
	want := strings.Repeat("e", 3000) + strings.Repeat("f", stderrKeep-3000)
	if got := head.text(); got != want {
		t.Fatalf("stderr head: %d bytes, want the first %d", len(got), stderrKeep)
	}
}
