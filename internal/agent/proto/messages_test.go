package proto

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// A watch event whose path is over MaxPath and otherwise valid is dropped
// and counted by the decode (legal input in the sandbox, issue 22 A.2); a
// malformed one is still a protocol violation.
func TestDecodeResultDropsAnOverlongEventPath(t *testing.T) {
	long := "/" + strings.Repeat("d/", 2000) + strings.Repeat("n", 250)
	tests := []struct {
		name        string
		paths       []string
		wantPaths   int
		wantDropped int64
		wantErr     bool
	}{
		{"within the bound", []string{"/work/a"}, 1, 0, false},
		{"over the bound", []string{"/work/a", long}, 1, 1, false},
		{"only over the bound", []string{long, long}, 0, 2, false},
		{"relative", []string{"work/a"}, 0, 0, true},
		{"relative and over the bound", []string{long[1:]}, 0, 0, true},
		{"with a NUL", []string{long + "\x00"}, 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Result{}
			for _, p := range tt.paths {
				r.Events = append(r.Events, WatchEvent{Type: WatchCreate, Path: p})
			}
			b, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			got, err := DecodeResult(b)
			if tt.wantErr {
				if !errors.Is(err, ErrProtocol) {
					t.Fatalf("decode: %v, want a protocol violation", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if len(got.Events) != tt.wantPaths || got.Dropped != tt.wantDropped {
				t.Fatalf("decode: %d events, %d dropped; want %d, %d", len(got.Events), got.Dropped, tt.wantPaths, tt.wantDropped)
			}
			if tt.wantDropped > 0 && got.Count&(WatchTruncated|WatchDropped) != WatchTruncated|WatchDropped {
				t.Fatalf("count %d: want truncated and dropped", got.Count)
			}
		})
	}
}
