package proto

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"
)

// FuzzReadFrame: any byte stream decodes to frames within their bounds or to
// an error, never a panic or an allocation past the bound.
func FuzzReadFrame(f *testing.F) {
	f.Add(AppendFrame(nil, Frame{Type: TStdout, Stream: 1, Seq: 1, Payload: []byte("hi")}))
	f.Add(AppendFrame(nil, Frame{Type: TWindow, Stream: 1, Payload: WindowPayload(1)}))
	f.Add([]byte{Magic, byte(TResult), 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := NewReader(bufio.NewReader(bytes.NewReader(in)))
		for {
			fr, err := r.ReadFrame()
			if err != nil {
				if err != io.EOF && err != io.ErrUnexpectedEOF && !errors.Is(err, ErrProtocol) {
					t.Fatalf("unexpected error class: %v", err)
				}
				return
			}
			if len(fr.Payload) > fr.Type.limit() {
				t.Fatalf("%s payload %d over bound", fr.Type, len(fr.Payload))
			}
			if cap(r.buf) > MaxControl {
				t.Fatalf("buffer grew to %d", cap(r.buf))
			}
		}
	})
}

// FuzzResult: any payload is a valid result or a protocol error.
func FuzzResult(f *testing.F) {
	f.Add([]byte(`{"exit":{"code":0}}`))
	f.Add([]byte(`{"files":[{"name":"a","size":1}]}`))
	f.Add([]byte(`{"error":{"kind":"not_found","message":"x"}}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		r, err := DecodeResult(in)
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("error not ErrProtocol: %v", err)
			}
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("decoded result does not validate: %v", err)
		}
		if _, err := DecodeRequest(in); err != nil && !errors.Is(err, ErrProtocol) {
			t.Fatalf("request error not ErrProtocol: %v", err)
		}
	})
}
