package proto

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	frames := []Frame{
		{Type: THello, Payload: []byte(`{"version":1}`)},
		{Type: TStdout, Stream: 7, Seq: 1, Payload: bytes.Repeat([]byte("x"), MaxData)},
		{Type: TWindow, Stream: 7, Payload: WindowPayload(12345)},
		{Type: TEOF, Stream: 9},
	}
	var buf []byte
	for _, f := range frames {
		buf = AppendFrame(buf, f)
	}
	r := NewReader(bufio.NewReader(bytes.NewReader(buf)))
	for i, want := range frames {
		got, err := r.ReadFrame()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if got.Type != want.Type || got.Stream != want.Stream || got.Seq != want.Seq || !bytes.Equal(got.Payload, want.Payload) {
			t.Fatalf("frame %d: got %v/%d/%d/%d bytes", i, got.Type, got.Stream, got.Seq, len(got.Payload))
		}
	}
	if _, err := r.ReadFrame(); err != io.EOF {
		t.Fatalf("after the last frame: %v, want EOF", err)
	}
}

func TestFrameBounds(t *testing.T) {
	hdr := func(magic byte, typ Type, stream uint32, n uint32) []byte {
		b := AppendFrame(nil, Frame{Type: typ, Stream: stream})
		b[0] = magic
		b[14], b[15], b[16], b[17] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
		return b
	}
	tests := []struct {
		name string
		in   []byte
	}{
		{"bad magic", hdr(0x00, TStdout, 1, 0)},
		{"unknown type", hdr(Magic, 99, 1, 0)},
		{"type zero", hdr(Magic, 0, 1, 0)},
		{"data over bound", hdr(Magic, TStdout, 1, MaxData+1)},
		{"control over bound", hdr(Magic, TResult, 1, MaxControl+1)},
		{"4 GiB claimed", hdr(Magic, TResult, 1, 0xffffffff)},
		{"payload on cancel", hdr(Magic, TCancel, 1, 1)},
		{"short window", hdr(Magic, TWindow, 1, 2)},
		{"hello on a stream", hdr(Magic, THello, 3, 0)},
		{"request on stream 0", hdr(Magic, TRequest, 0, 0)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewReader(bufio.NewReader(bytes.NewReader(append(tc.in, make([]byte, 64)...)))).ReadFrame()
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("err %v, want ErrProtocol", err)
			}
		})
	}
}

func TestSkipToSync(t *testing.T) {
	in := append([]byte("garbage\x00SBX\x00"), Sync...)
	in = AppendFrame(in, Frame{Type: TPing})
	br := bufio.NewReader(bytes.NewReader(in))
	if err := SkipToSync(br, 1<<20); err != nil {
		t.Fatal(err)
	}
	f, err := NewReader(br).ReadFrame()
	if err != nil || f.Type != TPing {
		t.Fatalf("after sync: %v %v", f.Type, err)
	}
	if err := SkipToSync(bufio.NewReader(bytes.NewReader(make([]byte, 100))), 50); !errors.Is(err, ErrProtocol) {
		t.Fatalf("no sync: %v", err)
	}
}

func TestResultValidate(t *testing.T) {
	bad := []string{
		`{"exit":{"code":256}}`,
		`{"exit":{"code":-1}}`,
		`{"exit":{"code":0,"signal":99}}`,
		`{"files":[{"name":""}]}`,
		`{"files":[{"name":"a/b"}]}`,
		`{"error":{"kind":"","message":"x"}}`,
		`{"bytes":-5}`,
		`not json`,
	}
	for _, in := range bad {
		if _, err := DecodeResult([]byte(in)); !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: err %v, want ErrProtocol", in, err)
		}
	}
	if _, err := DecodeResult([]byte(`{"exit":{"code":137,"signal":9}}`)); err != nil {
		t.Errorf("good result: %v", err)
	}
}

func TestRequestValidate(t *testing.T) {
	bad := []Request{
		{Op: "nope"},
		{Op: OpExec},
		{Op: OpExec, Argv: []string{"x"}, Env: []string{"=x"}},
		{Op: OpRead, Path: "rel/path"},
		{Op: OpRead, Path: "/a/../b"},
		{Op: OpRead, Path: "/a\x00b"},
		{Op: OpKill},
	}
	for _, r := range bad {
		if err := r.Validate(); !errors.Is(err, ErrProtocol) {
			t.Errorf("%+v: err %v", r, err)
		}
	}
}

// A Sync where a frame was expected is found whole: the bad magic byte is
// not consumed.
func TestSyncWhereFrameExpected(t *testing.T) {
	in := AppendFrame(nil, Frame{Type: TPing})
	in = append(in, Sync...)
	in = AppendFrame(in, Frame{Type: TPong})
	br := bufio.NewReader(bytes.NewReader(in))
	r := NewReader(br)
	if f, err := r.ReadFrame(); err != nil || f.Type != TPing {
		t.Fatalf("first: %v %v", f.Type, err)
	}
	if _, err := r.ReadFrame(); !errors.Is(err, ErrProtocol) {
		t.Fatalf("sync as a frame: %v", err)
	}
	if err := SkipToSync(br, 100); err != nil {
		t.Fatal(err)
	}
	if f, err := r.ReadFrame(); err != nil || f.Type != TPong {
		t.Fatalf("after sync: %v %v", f.Type, err)
	}
}
