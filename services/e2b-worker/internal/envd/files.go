package envd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxio/sandboxio/internal/envdpb/filesystem"
)

// FileType of an entry.
type FileType int

// File types.
const (
	FileTypeUnknown FileType = iota
	FileTypeFile
	FileTypeDirectory
	FileTypeSymlink
)

// EntryInfo describes a file or directory.
type EntryInfo struct {
	Name          string
	Path          string
	Type          FileType
	Size          int64
	Mode          fs.FileMode // permission bits as envd reports them
	Permissions   string      // e.g. "-rw-r--r--"
	Owner, Group  string
	ModifiedTime  time.Time
	SymlinkTarget string
	Metadata      map[string]string
}

func entryFromProto(e *filesystem.EntryInfo) EntryInfo {
	if e == nil {
		return EntryInfo{}
	}
	var mt time.Time
	if e.GetModifiedTime() != nil {
		mt = e.GetModifiedTime().AsTime()
	}
	return EntryInfo{
		Name: e.GetName(), Path: e.GetPath(), Type: FileType(e.GetType()), Size: e.GetSize(),
		Mode: fs.FileMode(e.GetMode()), Permissions: e.GetPermissions(), Owner: e.GetOwner(), Group: e.GetGroup(),
		ModifiedTime: mt, SymlinkTarget: e.GetSymlinkTarget(), Metadata: e.GetMetadata(),
	}
}

// Stat describes path. A missing path gives ErrNotFound.
func (c *Client) Stat(ctx context.Context, path string) (EntryInfo, error) {
	resp, err := c.fs.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: path}))
	if err != nil {
		return EntryInfo{}, c.classify(ctx, fromConnect("stat", err))
	}
	return entryFromProto(resp.Msg.GetEntry()), nil
}

// ListDir lists path down to depth levels (at least 1, as the SDKs require).
func (c *Client) ListDir(ctx context.Context, path string, depth uint32) ([]EntryInfo, error) {
	if depth < 1 {
		depth = 1
	}
	resp, err := c.fs.ListDir(ctx, connect.NewRequest(&filesystem.ListDirRequest{Path: path, Depth: depth}))
	if err != nil {
		return nil, c.classify(ctx, fromConnect("list_dir", err))
	}
	out := make([]EntryInfo, 0, len(resp.Msg.GetEntries()))
	for _, e := range resp.Msg.GetEntries() {
		out = append(out, entryFromProto(e))
	}
	return out, nil
}

// MakeDir creates path and its parents. created is false (and err nil) when
// the directory already existed, as in the SDKs.
func (c *Client) MakeDir(ctx context.Context, path string) (created bool, entry EntryInfo, err error) {
	resp, err := c.fs.MakeDir(ctx, connect.NewRequest(&filesystem.MakeDirRequest{Path: path}))
	if err != nil {
		err = fromConnect("make_dir", err)
		if isCode(err, connect.CodeAlreadyExists) {
			return false, EntryInfo{}, nil
		}
		return false, EntryInfo{}, c.classify(ctx, err)
	}
	return true, entryFromProto(resp.Msg.GetEntry()), nil
}

func isCode(err error, code connect.Code) bool {
	e, ok := err.(*Error)
	return ok && e.Code == code
}

// Remove deletes path recursively; a missing path is not an error (envd).
func (c *Client) Remove(ctx context.Context, path string) error {
	_, err := c.fs.Remove(ctx, connect.NewRequest(&filesystem.RemoveRequest{Path: path}))
	return c.classify(ctx, wrapUnary("remove", err))
}

// Move renames source to destination.
func (c *Client) Move(ctx context.Context, source, destination string) (EntryInfo, error) {
	resp, err := c.fs.Move(ctx, connect.NewRequest(&filesystem.MoveRequest{Source: source, Destination: destination}))
	if err != nil {
		return EntryInfo{}, c.classify(ctx, fromConnect("move", err))
	}
	return entryFromProto(resp.Msg.GetEntry()), nil
}

// WriteInfo is one element of the /files upload answer.
type WriteInfo struct {
	Name string `json:"name"`
	Path string `json:"path"`
	Type string `json:"type"`
}

func (c *Client) filesURL(path string) string {
	q := url.Values{}
	q.Set("path", path)
	if c.cfg.User != "" {
		q.Set("username", c.cfg.User)
	}
	return c.base + "/files?" + q.Encode()
}

// Upload writes r to path (POST /files, application/octet-stream; parents are
// created, an existing file is overwritten).
func (c *Client) Upload(ctx context.Context, path string, r io.Reader) ([]WriteInfo, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.filesURL(path), r)
	if err != nil {
		return nil, fmt.Errorf("envd upload: %w", err)
	}
	c.setCommon(req.Header, false)
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, c.classify(ctx, fmt.Errorf("envd upload: %w", err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, c.classify(ctx, readHTTPError("upload", resp))
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, c.classify(ctx, fmt.Errorf("envd upload: read answer: %w", err))
	}
	var out []WriteInfo
	if err := json.Unmarshal(bytes.TrimSpace(raw), &out); err != nil {
		return nil, fmt.Errorf("envd upload: decode answer: %w", err)
	}
	return out, nil
}

// Download copies the file at path to w and returns the number of bytes. A
// missing file gives ErrNotFound, a directory ErrInvalidArgument.
func (c *Client) Download(ctx context.Context, path string, w io.Writer) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.filesURL(path), nil)
	if err != nil {
		return 0, fmt.Errorf("envd download: %w", err)
	}
	c.setCommon(req.Header, false)
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, c.classify(ctx, fmt.Errorf("envd download: %w", err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, c.classify(ctx, readHTTPError("download", resp))
	}
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, c.classify(ctx, fmt.Errorf("envd download: %w", err))
	}
	return n, nil
}

// WatchEvent is one change WatchDir reported, with the name joined to the
// watched directory.
type WatchEvent struct {
	Type  string // create, write, remove, rename (chmod is not reported)
	Path  string
	IsDir bool
}

// Watch watches the directory dir (WatchDir, not recursive) until timeout,
// or until events came and settle passed without more; at most max events
// (truncated: more came).
func (c *Client) Watch(ctx context.Context, dir string, timeout time.Duration, max int, settle time.Duration) (out []WatchEvent, truncated bool, err error) {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req := connect.NewRequest(&filesystem.WatchDirRequest{Path: dir, IncludeEntry: true})
	req.Header().Set(HeaderKeepalive, c.keepaliveHeader())
	stream, err := c.fs.WatchDir(wctx, req)
	if err != nil {
		return nil, false, c.classify(ctx, fromConnect("watch_dir", err))
	}
	defer stream.Close()
	type msg struct {
		ev  *filesystem.FilesystemEvent
		end error
	}
	msgs := make(chan msg, 64)
	go func() {
		defer close(msgs)
		for stream.Receive() {
			if ev := stream.Msg().GetFilesystem(); ev != nil {
				select {
				case msgs <- msg{ev: ev}:
				case <-wctx.Done():
					return
				}
			}
		}
		select {
		case msgs <- msg{end: stream.Err()}:
		case <-wctx.Done():
		}
	}()
	var settled <-chan time.Time
	for {
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return out, truncated, ctx.Err()
			}
			return out, truncated, nil
		case <-settled:
			return out, truncated, nil
		case m, ok := <-msgs:
			if !ok {
				return out, truncated, nil
			}
			if m.ev == nil {
				if m.end != nil && wctx.Err() == nil {
					return out, truncated, c.classify(ctx, fromConnect("watch_dir", m.end))
				}
				return out, truncated, nil
			}
			var typ string
			switch m.ev.GetType() {
			case filesystem.EventType_EVENT_TYPE_CREATE:
				typ = "create"
			case filesystem.EventType_EVENT_TYPE_WRITE:
				typ = "write"
			case filesystem.EventType_EVENT_TYPE_REMOVE:
				typ = "remove"
			case filesystem.EventType_EVENT_TYPE_RENAME:
				typ = "rename"
			default:
				continue
			}
			if len(out) >= max {
				truncated = true
				continue
			}
			p := m.ev.GetName()
			if !path.IsAbs(p) {
				p = path.Join(dir, p)
			}
			out = append(out, WatchEvent{Type: typ, Path: p, IsDir: m.ev.GetEntry().GetType() == filesystem.FileType_FILE_TYPE_DIRECTORY})
			if settled == nil {
				settled = time.After(settle)
			}
		}
	}
}
