package client

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// ReadFile returns the content of a file in a sandbox. Files up to
// events.MaxInlineFileBytes come inline; larger ones come as a reference to
// parts that the router serves one request at a time (files.get), so that
// callers without JetStream (tenants) read them like anyone else.
func (c *Client) ReadFile(ctx context.Context, sandboxID, path string) ([]byte, error) {
	var r events.FilesReadReply
	if err := c.call(ctx, events.OpFilesRead, events.FilesReadRequest{SandboxID: sandboxID, Path: path}, &r); err != nil {
		return nil, err
	}
	if r.Ref == nil {
		data, err := base64.StdEncoding.DecodeString(r.Data)
		if err != nil {
			return nil, events.Errorf(events.CodeInternal, "files.read reply: data is not base64: %v", err)
		}
		return data, nil
	}
	ref := r.Ref
	if ref.Parts == 0 {
		return c.readObject(ctx, ref)
	}
	parts := make([][]byte, ref.Parts)
	err := eachPart(ctx, ref.Parts, func(ctx context.Context, part int) error {
		var g events.FilesGetReply
		if err := c.call(ctx, events.OpFilesGet, events.FilesGetRequest{SandboxID: sandboxID, Name: ref.Name, Part: part}, &g); err != nil {
			return err
		}
		b, err := base64.StdEncoding.DecodeString(g.Data)
		if err != nil {
			return events.Errorf(events.CodeInternal, "files.get reply: data is not base64: %v", err)
		}
		parts[part] = b
		return nil
	})
	if err != nil {
		return nil, err
	}
	data := make([]byte, 0, max(ref.Size, 0))
	for _, b := range parts {
		data = append(data, b...)
	}
	if int64(len(data)) != ref.Size {
		return nil, events.Errorf(events.CodeBackendError, "file %s: read %d bytes of %d", path, len(data), ref.Size)
	}
	return data, nil
}

// readObject reads a single-object reference (Parts 0, from a worker older
// than files.get) from the object store: only a caller with JetStream
// access to the services account can.
func (c *Client) readObject(ctx context.Context, ref *events.FileRef) ([]byte, error) {
	if c.session(ctx).api {
		return nil, events.Errorf(events.CodeCapabilityNotSupp,
			"the file came back as one object in %s (the worker predates multi-part files), which only callers with JetStream access can read; upgrade the workers", events.BucketFiles)
	}
	bucket := ref.Bucket
	if bucket == "" {
		bucket = events.BucketFiles
	}
	store, err := c.js.ObjectStore(ctx, bucket)
	if err != nil {
		return nil, events.Errorf(events.CodeBackendUnavailable, "object store %s: %v", bucket, err)
	}
	data, err := store.GetBytes(ctx, ref.Name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, events.Errorf(events.CodeBackendError, "object %s is gone from %s", ref.Name, bucket)
	}
	if err != nil {
		return nil, events.Errorf(events.CodeBackendUnavailable, "object %s: %v", ref.Name, err)
	}
	return data, nil
}

// WriteFile writes data to a file in a sandbox (mode 0 = 0644). Up to
// events.MaxInlineFileBytes goes inline; larger data is sent in parts
// (files.put, each part one request) and then written by reference.
func (c *Client) WriteFile(ctx context.Context, sandboxID, path string, data []byte, mode uint32) error {
	if len(data) <= events.MaxInlineFileBytes {
		return c.call(ctx, events.OpFilesWrite, events.FilesWriteRequest{SandboxID: sandboxID, Path: path,
			Data: base64.StdEncoding.EncodeToString(data), Mode: mode}, nil)
	}
	if !events.ValidID(sandboxID) {
		return events.Errorf(events.CodeInvalidID, "sandbox_id %q is not a valid id", sandboxID).With("field", "sandbox_id")
	}
	tenant := c.tenantToken(ctx)
	if tenant == events.TenantOpen {
		// An operator may write into a tenant's sandbox: the parts go under
		// the sandbox's own tenant, where its worker looks for them.
		sb, err := c.Get(ctx, sandboxID)
		if err != nil {
			return err
		}
		tenant = tenantOf(sb)
	}
	name := events.FileObjectPrefix(tenant, sandboxID) + events.NewID()
	parts := (len(data) + events.MaxInlineFileBytes - 1) / events.MaxInlineFileBytes
	err := eachPart(ctx, parts, func(ctx context.Context, i int) error {
		off := i * events.MaxInlineFileBytes
		part := data[off:min(off+events.MaxInlineFileBytes, len(data))]
		return c.call(ctx, events.OpFilesPut, events.FilesPutRequest{SandboxID: sandboxID, Name: name, Part: i,
			Data: base64.StdEncoding.EncodeToString(part)}, nil)
	})
	if err != nil {
		return err
	}
	ref := &events.FileRef{Bucket: events.BucketFiles, Name: name, Size: int64(len(data)), Parts: parts}
	return c.call(ctx, events.OpFilesWrite, events.FilesWriteRequest{SandboxID: sandboxID, Path: path, Ref: ref, Mode: mode}, nil)
}

// partsInFlight bounds the files.get or files.put requests of one file
// under way at once.
const partsInFlight = 4

// eachPart runs f for parts 0…n-1, partsInFlight at a time, and returns
// the first error (the others are cancelled); it returns when every f has.
func eachPart(ctx context.Context, n int, f func(ctx context.Context, part int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	slots := make(chan struct{}, partsInFlight)
	for part := 0; part < n; part++ {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			if err := f(ctx, part); err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
					cancel()
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}

// ListFiles lists a directory in a sandbox.
func (c *Client) ListFiles(ctx context.Context, sandboxID, path string) ([]events.FileInfo, error) {
	var r events.FilesListReply
	if err := c.call(ctx, events.OpFilesList, events.FilesListRequest{SandboxID: sandboxID, Path: path}, &r); err != nil {
		return nil, err
	}
	return r.Entries, nil
}

// WatchFiles waits for changes in the directory path of a sandbox (not its
// subdirectories), as the sandbox user: a long poll that answers once
// changes came and settled, once maxEvents came (Truncated), or after
// timeout with none. Zero timeout and maxEvents take the defaults (10 s,
// 256). Changes before the watch is set up or between two calls are not
// seen. Backends without the files_watch capability answer
// CapabilityNotSupported.
func (c *Client) WatchFiles(ctx context.Context, sandboxID, path string, timeout time.Duration, maxEvents int) (*events.FilesWatchReply, error) {
	req := events.FilesWatchRequest{SandboxID: sandboxID, Path: path, TimeoutMS: timeout.Milliseconds(), MaxEvents: maxEvents}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cmp.Or(timeout, events.DefaultWatchTimeoutMS*time.Millisecond)+c.timeout)
		defer cancel()
	}
	var r events.FilesWatchReply
	if err := c.call(ctx, events.OpFilesWatch, req, &r); err != nil {
		return nil, err
	}
	return &r, nil
}
