package client

import (
	"context"
	"encoding/base64"
	"errors"

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
	data := make([]byte, 0, max(ref.Size, 0))
	for part := 0; part < ref.Parts; part++ {
		var g events.FilesGetReply
		if err := c.call(ctx, events.OpFilesGet, events.FilesGetRequest{SandboxID: sandboxID, Name: ref.Name, Part: part}, &g); err != nil {
			return nil, err
		}
		b, err := base64.StdEncoding.DecodeString(g.Data)
		if err != nil {
			return nil, events.Errorf(events.CodeInternal, "files.get reply: data is not base64: %v", err)
		}
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
	name := events.FileObjectPrefix(c.tenantToken(ctx), sandboxID) + events.NewID()
	parts := 0
	for off := 0; off < len(data); off += events.MaxInlineFileBytes {
		part := data[off:min(off+events.MaxInlineFileBytes, len(data))]
		err := c.call(ctx, events.OpFilesPut, events.FilesPutRequest{SandboxID: sandboxID, Name: name, Part: parts,
			Data: base64.StdEncoding.EncodeToString(part)}, nil)
		if err != nil {
			return err
		}
		parts++
	}
	ref := &events.FileRef{Bucket: events.BucketFiles, Name: name, Size: int64(len(data)), Parts: parts}
	return c.call(ctx, events.OpFilesWrite, events.FilesWriteRequest{SandboxID: sandboxID, Path: path, Ref: ref, Mode: mode}, nil)
}

// ListFiles lists a directory in a sandbox.
func (c *Client) ListFiles(ctx context.Context, sandboxID, path string) ([]events.FileInfo, error) {
	var r events.FilesListReply
	if err := c.call(ctx, events.OpFilesList, events.FilesListRequest{SandboxID: sandboxID, Path: path}, &r); err != nil {
		return nil, err
	}
	return r.Entries, nil
}
