package router

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// Large files travel through the sbx_files object store, one part
// (≤ MaxInlineFileBytes) per request, as objects FilePartName(name, i)
// named under FileObjectPrefix(tenant, sandbox). Tenants have no JetStream
// API of their own: the router serves them the parts under their own
// prefix only, after the same ownership check as every sandbox op.

// objectAllowed reports whether a caller may touch an object name.
func objectAllowed(c caller, name, sandbox string) bool {
	return !c.authed || strings.HasPrefix(name, events.FileObjectPrefix(c.tenant, sandbox))
}

func objectForbidden(name string) *events.Error {
	return events.Errorf(events.CodeForbidden, "object %s does not exist or belongs to another tenant", name).With("field", "name")
}

func (s *Service) filesGet(ctx context.Context, c caller, r *events.FilesGetRequest) (any, *events.Error) {
	if _, e := s.authorize(ctx, c, r.SandboxID); e != nil {
		return nil, e
	}
	if !objectAllowed(c, r.Name, r.SandboxID) {
		return nil, objectForbidden(r.Name)
	}
	res, err := s.files.Get(ctx, events.FilePartName(r.Name, r.Part))
	if errors.Is(err, jetstream.ErrObjectNotFound) && r.Part == 0 {
		res, err = s.files.Get(ctx, r.Name) // a file stored as one object
	}
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, events.Errorf(events.CodeInvalidValue, "%s has no part %d", r.Name, r.Part).With("field", "part")
	}
	if err != nil {
		return nil, events.Errorf(events.CodeBackendUnavailable, "object store: %v", err)
	}
	defer func() { _ = res.Close() }()
	info, err := res.Info()
	if err != nil {
		return nil, events.Errorf(events.CodeBackendUnavailable, "object store: %v", err)
	}
	if info.Size > events.MaxInlineFileBytes {
		return nil, events.Errorf(events.CodePayloadTooLarge, "%s part %d is %d bytes; a part holds at most %d", r.Name, r.Part, info.Size, events.MaxInlineFileBytes).
			With("limit", events.MaxInlineFileBytes)
	}
	data, err := io.ReadAll(io.LimitReader(res, events.MaxInlineFileBytes+1))
	if err != nil {
		return nil, events.Errorf(events.CodeBackendUnavailable, "object store: %v", err)
	}
	parts := 0
	if v := info.Metadata["parts"]; v != "" {
		parts, _ = strconv.Atoi(v)
	} else if v := info.Headers.Get("parts"); v != "" {
		parts, _ = strconv.Atoi(v)
	}
	return events.FilesGetReply{Name: r.Name, Part: r.Part, Parts: parts, Data: base64.StdEncoding.EncodeToString(data)}, nil
}

func (s *Service) filesPut(ctx context.Context, c caller, r *events.FilesPutRequest) (any, *events.Error) {
	sb, e := s.authorize(ctx, c, r.SandboxID)
	if e != nil {
		return nil, e
	}
	if sb.State.Ended() {
		return nil, events.Errorf(events.CodeSandboxGone, "sandbox %s is %s", sb.SandboxID, sb.State).With("sandbox_id", sb.SandboxID)
	}
	if !objectAllowed(c, r.Name, r.SandboxID) {
		return nil, objectForbidden(r.Name)
	}
	data, err := base64.StdEncoding.DecodeString(r.Data)
	if err != nil {
		return nil, events.Errorf(events.CodeInvalidValue, "data: not standard base64").With("field", "data")
	}
	if len(data) > events.MaxInlineFileBytes {
		return nil, events.Errorf(events.CodePayloadTooLarge, "a part holds at most %d bytes; this one has %d", events.MaxInlineFileBytes, len(data)).
			With("limit", events.MaxInlineFileBytes)
	}
	part := events.FilePartName(r.Name, r.Part)
	tenant, _, _ := objectOwner(r.Name)
	lim, _ := s.limitsFor(tenantOf(sb))
	n := int64(len(data))
	if e := s.awaitFilesLoaded(ctx); e != nil {
		return nil, e.With("sandbox_id", r.SandboxID)
	}
	if e := s.store.reserve(tenant, r.SandboxID, part, n, lim); e != nil {
		return nil, e.With("sandbox_id", r.SandboxID)
	}
	info, err := s.files.PutBytes(ctx, part, data)
	s.store.release(tenant, r.SandboxID, n)
	if err != nil {
		return nil, events.Errorf(events.CodeBackendUnavailable, "object store: %v", err)
	}
	s.store.set(part, int64(info.Size), time.Now())
	return events.FilesPutReply{Name: r.Name, Part: r.Part, Size: int64(info.Size)}, nil
}

// checkFileRef refuses a tenant's files.write whose ref points at an
// object outside its own prefix (the worker checks it again).
func checkFileRef(c caller, r *events.FilesWriteRequest) *events.Error {
	if r.Ref == nil || !c.authed {
		return nil
	}
	if r.Ref.Bucket != "" && r.Ref.Bucket != events.BucketFiles || !objectAllowed(c, r.Ref.Name, r.SandboxID) {
		return objectForbidden(r.Ref.Name)
	}
	return nil
}
