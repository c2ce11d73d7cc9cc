package mcpserver

import (
	"context"
	"encoding/base64"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxio/sandboxio/pkg/events"
)

type writeIn struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox, from create_sandbox"`
	Path      string `json:"path" jsonschema:"the file's path in the sandbox"`
	Content   string `json:"content" jsonschema:"the file's content: text, or base64 when encoding is base64"`
	Encoding  string `json:"encoding,omitempty" jsonschema:"text (default) or base64 (binary content)"`
	Mode      string `json:"mode,omitempty" jsonschema:"permission bits in octal, e.g. 0755 for a script; default 0644"`
}

func (s *Server) writeFile(ctx context.Context, st *session, in writeIn) (*mcp.CallToolResult, error) {
	sb, err := st.sandbox(in.SandboxID)
	if err != nil {
		return nil, err
	}
	if in.Path == "" {
		return toolError(events.Errorf(events.CodeMissingField, "path is empty").With("field", "path")), nil
	}
	var data []byte
	switch in.Encoding {
	case "", "text", "utf8", "utf-8":
		data = []byte(in.Content)
	case "base64":
		if data, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
			return invalid("content", "content is not standard base64: %v", err), nil
		}
	default:
		return invalid("encoding", "encoding %q: want text or base64", in.Encoding), nil
	}
	if len(data) > s.cfg.MaxFileBytes {
		return toolError(events.Errorf(events.CodePayloadTooLarge, "%d bytes is more than this server writes (%d)", len(data), s.cfg.MaxFileBytes).With("field", "content")), nil
	}
	mode := fs.FileMode(0o644)
	if in.Mode != "" {
		m, err := strconv.ParseUint(in.Mode, 8, 32)
		if err != nil || m > 0o777 {
			return invalid("mode", "mode %q: want octal permission bits such as 0644 or 0755", in.Mode), nil
		}
		mode = fs.FileMode(m)
	}
	if err := sb.Files().Write(ctx, in.Path, data, mode); err != nil {
		return nil, err
	}
	return textResult("wrote %d bytes to %s (mode %04o)", len(data), in.Path, uint32(mode)), nil
}

type readIn struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox, from create_sandbox"`
	Path      string `json:"path" jsonschema:"the file's path in the sandbox"`
	Encoding  string `json:"encoding,omitempty" jsonschema:"auto (default: text as text, images as images, other binary as base64), text or base64"`
	Offset    int64  `json:"offset,omitempty" jsonschema:"first byte to return, for paging through a long file"`
	Length    int64  `json:"length,omitempty" jsonschema:"how many bytes to return from offset; default the rest, cut in the middle when long"`
}

func (s *Server) readFile(ctx context.Context, st *session, in readIn) (*mcp.CallToolResult, error) {
	sb, err := st.sandbox(in.SandboxID)
	if err != nil {
		return nil, err
	}
	if in.Path == "" {
		return toolError(events.Errorf(events.CodeMissingField, "path is empty").With("field", "path")), nil
	}
	if in.Offset < 0 || in.Length < 0 {
		return invalid("offset", "offset and length must not be negative"), nil
	}
	// Stat first where the backend lists a file as itself: a file larger
	// than the limit is refused before it moves.
	if entries, err := sb.Files().List(ctx, in.Path); err == nil && len(entries) == 1 {
		if e := entries[0]; !e.IsDir && e.Name == path.Base(in.Path) && e.Size > int64(s.cfg.MaxFileBytes) {
			return toolError(events.Errorf(events.CodePayloadTooLarge, "%s is %d bytes, more than this server reads (%d); use run_command (head, tail, grep) to look into it",
				in.Path, e.Size, s.cfg.MaxFileBytes).With("field", "path")), nil
		}
	}
	data, err := sb.Files().Read(ctx, in.Path)
	if err != nil {
		return nil, err
	}
	total := int64(len(data))
	if in.Offset > total {
		return invalid("offset", "offset %d is past the end of the file (%d bytes)", in.Offset, total), nil
	}
	data = data[in.Offset:]
	if in.Length > 0 && in.Length < int64(len(data)) {
		data = data[:in.Length]
	}
	mime := http.DetectContentType(data)
	enc := in.Encoding
	if enc == "" || enc == "auto" {
		switch {
		case strings.HasPrefix(mime, "image/") && mime != "image/svg+xml" && in.Offset == 0 && int64(len(data)) == total:
			return &mcp.CallToolResult{Content: []mcp.Content{
				&mcp.TextContent{Text: fmt.Sprintf("%s: %s, %d bytes", in.Path, mime, total)},
				&mcp.ImageContent{Data: data, MIMEType: mime},
			}}, nil
		case utf8.Valid(data):
			enc = "text"
		default:
			enc = "base64"
		}
	}
	head := fmt.Sprintf("%s: %d bytes", in.Path, total)
	if in.Offset > 0 || int64(len(data)) < total {
		head += fmt.Sprintf(", bytes %d to %d", in.Offset, in.Offset+int64(len(data)))
	}
	switch enc {
	case "text":
		return textResult("%s\n%s", head, cut(data, s.cfg.MaxOutputBytes, 0)), nil
	case "base64":
		b64 := base64.StdEncoding.EncodeToString(data)
		if len(b64) > 4*s.cfg.MaxOutputBytes {
			return invalid("length", "%s is binary (%s): %d bytes is too much to show as base64 here; read it in parts with offset and length (up to %d bytes each)",
				in.Path, mime, len(data), 3*s.cfg.MaxOutputBytes), nil
		}
		return textResult("%s, %s, base64:\n%s", head, mime, b64), nil
	}
	return invalid("encoding", "encoding %q: want auto, text or base64", in.Encoding), nil
}

func (s *Server) listFiles(ctx context.Context, st *session, in pathIn) (*mcp.CallToolResult, error) {
	sb, err := st.sandbox(in.SandboxID)
	if err != nil {
		return nil, err
	}
	p := in.Path
	if p == "" {
		p = "."
	}
	entries, err := sb.Files().List(ctx, p)
	if err != nil {
		return nil, err
	}
	if len(entries) == 0 {
		return textResult("%s is empty", p), nil
	}
	var b strings.Builder
	const most = 500
	for i, e := range entries {
		if i == most {
			fmt.Fprintf(&b, "[… %d more entries not shown …]\n", len(entries)-most)
			break
		}
		kind := "-"
		switch m := e.FileMode(); {
		case e.IsDir || m.IsDir():
			kind = "d"
		case m&fs.ModeSymlink != 0:
			kind = "l"
		}
		fmt.Fprintf(&b, "%s %s %10d %s  %s\n", kind, e.FileMode().Perm(), e.Size, e.ModTime.UTC().Format("2006-01-02 15:04"), e.Name)
	}
	return textResult("%s", b.String()), nil
}

// richContent renders run_code's rich results: images as image content,
// the rest as text.
func (s *Server) richContent(results []events.RichResult) []mcp.Content {
	var out []mcp.Content
	for _, r := range results {
		for _, img := range []struct{ data, mime string }{{r.PNG, "image/png"}, {r.JPEG, "image/jpeg"}} {
			if img.data == "" {
				continue
			}
			if b, err := base64.StdEncoding.DecodeString(img.data); err == nil {
				out = append(out, &mcp.ImageContent{Data: b, MIMEType: img.mime})
			}
		}
		switch {
		case r.Markdown != "":
			out = append(out, &mcp.TextContent{Text: cut([]byte(r.Markdown), s.cfg.MaxOutputBytes, 0)})
		case r.Text != "":
			out = append(out, &mcp.TextContent{Text: "result: " + cut([]byte(r.Text), s.cfg.MaxOutputBytes, 0)})
		case r.HTML != "":
			out = append(out, &mcp.TextContent{Text: "html result:\n" + cut([]byte(r.HTML), s.cfg.MaxOutputBytes, 0)})
		case r.SVG != "":
			out = append(out, &mcp.TextContent{Text: "svg result:\n" + cut([]byte(r.SVG), s.cfg.MaxOutputBytes, 0)})
		}
	}
	return out
}
