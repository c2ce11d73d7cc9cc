package proto

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Magic starts every frame; a reader that loses its place (a worker that
// died mid-frame and a new one that attached) finds the next frame by it
// and by Sync.
const Magic byte = 0xA7

// Sync is what a worker sends before its Hello on a byte stream that an
// earlier worker may have left mid-frame: the agent, lost, skips bytes
// until it has seen Sync.
var Sync = []byte("\x00SBX-AGENT-SYNC/1\x00")

// HeaderSize is the fixed frame header: magic, type, stream, seq, length.
const HeaderSize = 1 + 1 + 4 + 8 + 4

// Bounds on payloads. A frame over its type's bound is a protocol error.
const (
	// MaxData bounds one data frame (output, stdin, file content).
	MaxData = 64 << 10
	// MaxControl bounds one JSON message (a request with its argv and env,
	// a result with a directory listing).
	MaxControl = 1 << 20
)

// DefaultWindow is each stream's initial credit in each direction: how many
// data bytes a side may send before the other grants more.
const DefaultWindow = 1 << 20

// Type is a frame's type.
type Type uint8

// Frame types. W→A is worker to agent, A→W agent to worker.
const (
	THello   Type = 1  // both ways, stream 0: Hello (JSON)
	TRequest Type = 2  // W→A: Request (JSON), opens the stream
	TStdin   Type = 3  // W→A: process input
	TEOF     Type = 4  // W→A: end of input (stdin or file content)
	TStdout  Type = 5  // A→W: process output
	TStderr  Type = 6  // A→W: process error output
	TWindow  Type = 7  // both ways: 4-byte big-endian credit increment
	TResult  Type = 8  // A→W: Result (JSON), closes the stream
	TSignal  Type = 9  // W→A: Signal (JSON)
	TCancel  Type = 10 // W→A: kill the process tree, then send the Result
	TData    Type = 11 // both ways: file content
	TPing    Type = 12 // W→A, stream 0
	TPong    Type = 13 // A→W, stream 0
	TResize  Type = 14 // W→A: Resize (JSON), a PTY's window size
	// TConnected (A→W, empty) says a dial's connection is established:
	// data frames follow both ways, TEOF both ways half-closes, and the
	// Result ends the stream.
	TConnected Type = 15
	maxType         = TConnected
)

func (t Type) String() string {
	names := [...]string{"", "hello", "request", "stdin", "eof", "stdout", "stderr", "window", "result",
		"signal", "cancel", "data", "ping", "pong", "resize", "connected"}
	if t >= 1 && t <= maxType {
		return names[t]
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// limit is the payload bound of a type; 0 means the payload must be empty.
func (t Type) limit() int {
	switch t {
	case TStdin, TStdout, TStderr, TData:
		return MaxData
	case THello, TRequest, TResult, TSignal, TResize:
		return MaxControl
	case TWindow:
		return 4
	case TPing, TPong:
		return 8
	default:
		return 0
	}
}

// Frame is one frame. Payload is only valid until the next ReadFrame with
// the same buffer.
type Frame struct {
	Type    Type
	Stream  uint32
	Seq     uint64
	Payload []byte
}

// ErrProtocol is wrapped by every error that means the peer broke the
// protocol (as opposed to the stream ending).
var ErrProtocol = errors.New("agent protocol violation")

func protoErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrProtocol, fmt.Sprintf(format, a...))
}

// Reader reads frames from a byte stream into one reused buffer.
type Reader struct {
	r   *bufio.Reader
	hdr [HeaderSize]byte
	buf []byte
}

// NewReader reads frames from r.
func NewReader(r *bufio.Reader) *Reader { return &Reader{r: r} }

// ReadFrame reads one frame. The payload is valid until the next call. It
// checks magic, type and the type's payload bound before reading the payload;
// a violation returns an error wrapping ErrProtocol. A frame that does not
// start with Magic consumes nothing, so that SkipToSync can find a Sync that
// arrived where a frame was expected.
func (r *Reader) ReadFrame() (Frame, error) {
	c, err := r.r.ReadByte()
	if err != nil {
		return Frame{}, err
	}
	if c != Magic {
		_ = r.r.UnreadByte()
		return Frame{}, protoErr("bad frame magic 0x%02x", c)
	}
	r.hdr[0] = c
	if _, err := io.ReadFull(r.r, r.hdr[1:]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, err
	}
	f, n, err := parseHeader(r.hdr[:])
	if err != nil {
		return Frame{}, err
	}
	if cap(r.buf) < n {
		r.buf = make([]byte, n)
	}
	f.Payload = r.buf[:n]
	if _, err := io.ReadFull(r.r, f.Payload); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, err
	}
	return f, nil
}

func parseHeader(h []byte) (Frame, int, error) {
	if h[0] != Magic {
		return Frame{}, 0, protoErr("bad frame magic 0x%02x", h[0])
	}
	t := Type(h[1])
	if t < 1 || t > maxType {
		return Frame{}, 0, protoErr("unknown frame type %d", h[1])
	}
	f := Frame{Type: t, Stream: binary.BigEndian.Uint32(h[2:6]), Seq: binary.BigEndian.Uint64(h[6:14])}
	n := binary.BigEndian.Uint32(h[14:18])
	if int64(n) > int64(t.limit()) {
		return Frame{}, 0, protoErr("%s frame of %d bytes exceeds %d", t, n, t.limit())
	}
	if (t == THello || t == TPing || t == TPong) != (f.Stream == 0) {
		return Frame{}, 0, protoErr("%s frame on stream %d", t, f.Stream)
	}
	if t == TWindow && n != 4 {
		return Frame{}, 0, protoErr("window frame of %d bytes", n)
	}
	return f, int(n), nil
}

// AppendFrame appends the encoding of f to b. It does not check bounds:
// senders keep to them, receivers check.
func AppendFrame(b []byte, f Frame) []byte {
	var h [HeaderSize]byte
	h[0] = Magic
	h[1] = byte(f.Type)
	binary.BigEndian.PutUint32(h[2:6], f.Stream)
	binary.BigEndian.PutUint64(h[6:14], f.Seq)
	binary.BigEndian.PutUint32(h[14:18], uint32(len(f.Payload)))
	b = append(b, h[:]...)
	return append(b, f.Payload...)
}

// WindowPayload encodes a credit increment.
func WindowPayload(n uint32) []byte { return binary.BigEndian.AppendUint32(nil, n) }

// WindowCredit decodes a window frame's credit.
func WindowCredit(f Frame) uint32 { return binary.BigEndian.Uint32(f.Payload) }

// SkipToSync reads from r until it has consumed Sync (a lost reader's way
// back), at most max bytes.
func SkipToSync(r io.ByteReader, max int) error {
	matched := 0
	for i := 0; i < max; i++ {
		c, err := r.ReadByte()
		if err != nil {
			return err
		}
		switch {
		case c == Sync[matched]:
			matched++
		case c == Sync[0]:
			matched = 1
		default:
			matched = 0
		}
		if matched == len(Sync) {
			return nil
		}
	}
	return protoErr("no sync in %d bytes", max)
}
