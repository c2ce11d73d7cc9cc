package mcpserver

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxio/sandboxio/pkg/events"
)

func TestHeadTail(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes []string
		limit  int
		want   string
	}{
		{"short", []string{"hello"}, 16, "hello"},
		{"exactly the limit", []string{"0123456789"}, 10, "0123456789"},
		{"cut in the middle", []string{"0123456789abcdefghij"}, 10, "01234\n[… 10 bytes cut here (20 in all; the first 5 and the last 5 shown) …]\nfghij"},
		{"many small writes", []string{"012", "345", "678", "9ab", "cde", "fgh", "ij"}, 10, "01234\n[… 10 bytes cut here (20 in all; the first 5 and the last 5 shown) …]\nfghij"},
	} {
		h := newHeadTail(tc.limit)
		for _, w := range tc.writes {
			_, _ = h.Write([]byte(w))
		}
		if got := h.String(); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// FuzzHeadTail: whatever a sandbox writes, in whatever pieces, the
// rendering is valid UTF-8, keeps at most the limit of it, and is the
// output itself when it fits.
func FuzzHeadTail(f *testing.F) {
	f.Add([]byte("hello world"), 8, 3)
	f.Add([]byte{0xff, 0xfe, 'a', 0xe2, 0x82}, 4, 1)
	f.Fuzz(func(t *testing.T, data []byte, limit, piece int) {
		limit = 2 + int(uint(limit)%4096)
		piece = 1 + int(uint(piece)%512)
		h := newHeadTail(limit)
		for rest := data; len(rest) > 0; {
			n := min(piece, len(rest))
			if w, err := h.Write(rest[:n]); w != n || err != nil {
				t.Fatalf("Write of %d bytes = %d, %v", n, w, err)
			}
			rest = rest[n:]
		}
		out := h.String()
		if !utf8.ValidString(out) {
			t.Fatalf("invalid UTF-8: %q", out)
		}
		if len(data) <= limit {
			if utf8.Valid(data) && out != string(data) {
				t.Fatalf("output that fits was changed: %q -> %q", data, out)
			}
			return
		}
		if !strings.Contains(out, "bytes cut here") {
			t.Fatalf("a cut without a note: %q", out)
		}
		kept := len(h.head) + len(h.tail)
		if kept > limit || !bytes.HasPrefix(data, h.head) || !bytes.HasSuffix(data, h.tail) {
			t.Fatalf("kept %d of limit %d, head %q tail %q", kept, limit, h.head, h.tail)
		}
	})
}

// TestRichContent: run_code's images become image content (the bytes,
// decoded), its text and markdown text content.
func TestRichContent(t *testing.T) {
	s := &Server{cfg: Config{MaxOutputBytes: 64}}
	png := []byte("\x89PNG\r\n\x1a\nrest")
	out := s.richContent([]events.RichResult{{PNG: base64.StdEncoding.EncodeToString(png), Text: "<Figure>"}, {Markdown: "# title"}})
	if len(out) != 3 {
		t.Fatalf("%d contents, want 3: %+v", len(out), out)
	}
	if img, ok := out[0].(*mcp.ImageContent); !ok || img.MIMEType != "image/png" || !bytes.Equal(img.Data, png) {
		t.Errorf("first content: %+v", out[0])
	}
	if txt, ok := out[1].(*mcp.TextContent); !ok || txt.Text != "result: <Figure>" {
		t.Errorf("second content: %+v", out[1])
	}
	if txt, ok := out[2].(*mcp.TextContent); !ok || txt.Text != "# title" {
		t.Errorf("third content: %+v", out[2])
	}
}
