package envelope

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	tests := []struct {
		name  string
		envs  []Envelope
		extra []byte
		err   error
	}{
		{name: "empty"},
		{name: "start and end", envs: []Envelope{{0, []byte(`{"event":{"start":{"pid":1}}}`)}, {FlagEndStream, []byte(`{}`)}}},
		{name: "zero length", envs: []Envelope{{0, []byte{}}}},
		{name: "truncated header", extra: []byte{0, 0}, err: io.ErrUnexpectedEOF},
		{name: "truncated payload", extra: []byte{0, 0, 0, 0, 9, '{'}, err: io.ErrUnexpectedEOF},
		{name: "too large", extra: []byte{0, 0xff, 0xff, 0xff, 0xff}, err: ErrTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b []byte
			for _, e := range tc.envs {
				b = Append(b, e.Flags, e.Payload)
			}
			b = append(b, tc.extra...)
			got, err := ReadAll(b)
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if len(got) != len(tc.envs) {
				t.Fatalf("got %d envelopes, want %d", len(got), len(tc.envs))
			}
			for i := range got {
				if got[i].Flags != tc.envs[i].Flags || !bytes.Equal(got[i].Payload, tc.envs[i].Payload) {
					t.Errorf("envelope %d = %+v, want %+v", i, got[i], tc.envs[i])
				}
			}
		})
	}
}

func FuzzReadAll(f *testing.F) {
	f.Add(Append(nil, 0, []byte(`{"event":{"start":{"pid":639}}}`)))
	f.Add(Append(Append(nil, 1, []byte{0x1f, 0x8b}), 2, []byte(`{}`)))
	f.Add([]byte{0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		envs, err := ReadAll(b)
		if err != nil {
			return
		}
		var re []byte
		for _, e := range envs {
			re = Append(re, e.Flags, e.Payload)
			_, _ = e.Gunzip() // must not panic
		}
		if !bytes.Equal(re, b) {
			t.Fatalf("re-encoding differs: %x vs %x", re, b)
		}
	})
}
