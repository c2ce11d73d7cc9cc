package server

import (
	"slices"
	"testing"

	"github.com/sandboxio/sandboxio/internal/agent/proto"
)

// A resize that comes before the process has its terminal (the worker sends
// it as soon as the exec is sent) is applied when the terminal is there,
// not dropped.
func TestResizeBeforeTheTerminal(t *testing.T) {
	tests := []struct {
		name   string
		before []proto.Resize
		after  []proto.Resize
		want   []proto.Resize
	}{
		{"none", nil, []proto.Resize{{Rows: 31, Cols: 101}}, []proto.Resize{{Rows: 31, Cols: 101}}},
		{"one before", []proto.Resize{{Rows: 30, Cols: 100}}, nil, []proto.Resize{{Rows: 30, Cols: 100}}},
		{"the last before, then after", []proto.Resize{{Rows: 10, Cols: 10}, {Rows: 30, Cols: 100}}, []proto.Resize{{Rows: 31, Cols: 101}},
			[]proto.Resize{{Rows: 30, Cols: 100}, {Rows: 31, Cols: 101}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := newStream(nil, 1)
			for _, r := range tc.before {
				st.resize(r)
			}
			var got []proto.Resize
			st.mu.Lock()
			st.setResizer(func(r proto.Resize) { got = append(got, r) })
			st.mu.Unlock()
			for _, r := range tc.after {
				st.resize(r)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("sizes applied %v, want %v", got, tc.want)
			}
		})
	}
}
