package worker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/cemsg"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// Large files travel through the object store sbx_files as parts of at
// most events.MaxInlineFileBytes, named events.FilePartName(name, i), each
// with metadata "parts" = N, so that a tenant without JetStream can move
// them one request at a time (files.get, files.put through the router).
// Every object of a sandbox is under events.FileObjectPrefix(tenant,
// sandbox); a worker writes into a tenant's sandbox only objects under that
// sandbox's prefix, so no tenant can make a worker copy another's file in.

// maxFileParts bounds a large file: 16384 parts of 512 KiB, 8 GiB.
const maxFileParts = 16384

// maxFileBytes is the largest file moved through the object store.
const maxFileBytes = int64(maxFileParts) * events.MaxInlineFileBytes

var errAborted = errors.New("file transfer aborted")

// metaParts is the object metadata key holding a multi-part file's part count.
const metaParts = "parts"

// readFile returns a file inline when it is small, and through the object
// store as parts when it is larger than events.MaxInlineFileBytes,
// streaming it without holding it in memory.
//
// It reads at most the worker's MaxFileReadBytes (backends refuse a larger
// file by its size first: ReadLimit), and stores at most what is left of
// the sandbox's MaxSandboxObjectBytes and the storage room the router
// granted (nil: none given), what is left of the tenant's and the
// sandbox's storage quotas.
func (w *Worker) readFile(ctx context.Context, fs FileSystem, sb *sandbox, path string, granted *int64, quota string) (events.FilesReadReply, *events.Error) {
	lim := w.cfg.limits()
	ctx, cancel := context.WithCancel(WithReadLimit(ctx, lim.fileRead))
	defer cancel()
	pr, pw := io.Pipe()
	var readErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		cw := &capWriter{w: pw, limit: lim.fileRead, err: FileTooLarge(path, lim.fileRead+1, lim.fileRead)}
		_, readErr = fs.ReadFile(ctx, sb.id, path, cw)
		pw.CloseWithError(readErr)
	}()
	defer wg.Wait() // after cancel and the pipe's close: the reader returns
	defer pr.Close()
	head := make([]byte, events.MaxInlineFileBytes+1)
	n, err := io.ReadFull(pr, head)
	switch {
	case err == nil: // larger than inline: the rest goes to the object store
		name := events.FileObjectPrefix(sb.tenantToken(), sb.id) + events.NewID()
		room := sb.usage.objectRoom(lim.objects, time.Now())
		over := events.Errorf(events.CodeObjectQuotaExceeded, "sandbox %s may store %d more bytes in %s (limit %d within its TTL)",
			sb.id, room, events.BucketFiles, lim.objects).With("limit", lim.objects)
		if granted != nil && *granted < room {
			room = *granted
			over = storageRoomExceeded(sb.id, room, quota)
		}
		src := &capReader{r: io.MultiReader(bytes.NewReader(head), pr), limit: room, err: over}
		ref, e := w.putParts(ctx, name, src)
		if e != nil {
			// A read error reaches putParts through the pipe, so e is the
			// cause either way; stop the reader and wait for it.
			pr.CloseWithError(errAborted)
			cancel()
			wg.Wait()
			return events.FilesReadReply{}, e
		}
		wg.Wait()
		if readErr != nil {
			w.deleteParts(name, ref.Parts)
			return events.FilesReadReply{}, classify(readErr)
		}
		sb.usage.addObject(ref.Size, time.Now())
		w.goTracked(func() { w.saveUsage(context.WithoutCancel(ctx), sb) })
		return events.FilesReadReply{Path: path, Size: ref.Size, Ref: ref}, nil
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		wg.Wait()
		if readErr != nil {
			return events.FilesReadReply{}, classify(readErr)
		}
		return events.FilesReadReply{Path: path, Size: int64(n), Data: base64.StdEncoding.EncodeToString(head[:n])}, nil
	default:
		wg.Wait()
		if readErr != nil {
			return events.FilesReadReply{}, classify(readErr)
		}
		return events.FilesReadReply{}, classify(err)
	}
}

// storageRoomExceeded is the refusal of a read larger than the storage
// room its router granted.
func storageRoomExceeded(id string, room int64, quota string) *events.Error {
	if quota == "" {
		quota = "max_storage_bytes"
	}
	return events.Errorf(events.CodeStorageQuota, "sandbox %s: storage quota %s leaves %d bytes in %s for this files.read; the file is larger",
		id, quota, room, events.BucketFiles).With("quota", quota).With("room", room)
}

// putParts stores r as parts of name and returns its reference. On failure
// the parts already stored are removed.
func (w *Worker) putParts(ctx context.Context, name string, r io.Reader) (*events.FileRef, *events.Error) {
	buf := make([]byte, events.MaxInlineFileBytes)
	sum := sha256.New()
	var size int64
	parts := 0
	fail := func(e *events.Error) (*events.FileRef, *events.Error) {
		w.deleteParts(name, parts)
		return nil, e
	}
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			if parts == maxFileParts {
				return fail(events.Errorf(events.CodePayloadTooLarge, "the file is larger than %d bytes", maxFileBytes).With("limit", maxFileBytes))
			}
			if _, perr := w.files.PutBytes(ctx, events.FilePartName(name, parts), buf[:n]); perr != nil {
				return fail(events.Errorf(events.CodeBackendUnavailable, "object store: %v", perr))
			}
			sum.Write(buf[:n])
			size += int64(n)
			parts++
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return fail(classify(err))
		}
	}
	// The count is known only now: every part says how many there are.
	for i := 0; i < parts; i++ {
		part := events.FilePartName(name, i)
		if err := w.files.UpdateMeta(ctx, part, jetstream.ObjectMeta{Name: part,
			Metadata: map[string]string{metaParts: strconv.Itoa(parts)}}); err != nil {
			return fail(events.Errorf(events.CodeBackendUnavailable, "object store: %v", err))
		}
	}
	return &events.FileRef{Bucket: events.BucketFiles, Name: name, Size: size, Parts: parts,
		Digest: jetstream.GetObjectDigestValue(sum)}, nil
}

// deleteParts removes stored parts, best effort (the bucket's TTL is the backstop).
func (w *Worker) deleteParts(name string, parts int) {
	ctx, cancel := context.WithTimeout(detached(), 30*time.Second)
	defer cancel()
	for i := 0; i < parts; i++ {
		_ = w.files.Delete(ctx, events.FilePartName(name, i))
	}
}

// openRef opens the object(s) a files.write names, after checking that the
// sandbox may read them. The returned close must be called.
func (w *Worker) openRef(ctx context.Context, sb *sandbox, ref *events.FileRef) (io.Reader, int64, func(), *events.Error) {
	nothing := func() {}
	if ref.Bucket != "" && ref.Bucket != events.BucketFiles {
		return nil, 0, nothing, events.Errorf(events.CodeInvalidValue, "ref.bucket must be %s", events.BucketFiles).With("field", "ref")
	}
	if tenant := sb.tenantToken(); tenant != events.TenantOpen {
		prefix := events.FileObjectPrefix(tenant, sb.id)
		if rest, ok := strings.CutPrefix(ref.Name, prefix); !ok || !events.ValidID(rest) {
			return nil, 0, nothing, events.Errorf(events.CodeForbidden, "object %s does not exist or belongs to another sandbox", truncate(ref.Name)).With("field", "ref")
		}
	}
	if ref.Name == "" {
		return nil, 0, nothing, events.Errorf(events.CodeMissingField, "ref.name is required").With("field", "ref")
	}
	if ref.Parts < 0 || ref.Parts > maxFileParts {
		return nil, 0, nothing, events.Errorf(events.CodeInvalidValue, "ref.parts must be 0..%d", maxFileParts).With("field", "ref")
	}
	if ref.Parts == 0 {
		obj, err := w.files.Get(ctx, ref.Name)
		if err != nil {
			return nil, 0, nothing, events.Errorf(events.CodeInvalidValue, "object %s: %v", truncate(ref.Name), err).With("field", "ref")
		}
		info, err := obj.Info()
		if err != nil {
			obj.Close()
			return nil, 0, nothing, events.Errorf(events.CodeBackendUnavailable, "object %s: %v", truncate(ref.Name), err)
		}
		if int64(info.Size) > maxFileBytes {
			obj.Close()
			return nil, 0, nothing, events.Errorf(events.CodePayloadTooLarge, "object %s is larger than %d bytes", truncate(ref.Name), maxFileBytes).With("limit", maxFileBytes)
		}
		return obj, int64(info.Size), func() { obj.Close() }, nil
	}
	var size int64
	for i := 0; i < ref.Parts; i++ {
		part := events.FilePartName(ref.Name, i)
		info, err := w.files.GetInfo(ctx, part)
		if err != nil {
			return nil, 0, nothing, events.Errorf(events.CodeInvalidValue, "part %d of %s: %v", i, truncate(ref.Name), err).With("field", "ref")
		}
		if info.Size > events.MaxInlineFileBytes {
			return nil, 0, nothing, events.Errorf(events.CodeInvalidValue, "part %d of %s is larger than %d bytes", i, truncate(ref.Name), events.MaxInlineFileBytes).With("field", "ref")
		}
		size += int64(info.Size)
	}
	if ref.Size > 0 && ref.Size != size {
		return nil, 0, nothing, events.Errorf(events.CodeInvalidValue, "ref.size %d does not match its parts (%d bytes)", ref.Size, size).With("field", "ref")
	}
	pr := &partsReader{ctx: ctx, files: w.files, name: ref.Name, parts: ref.Parts}
	return pr, size, pr.close, nil
}

// partsReader reads the parts of a file in order, one object at a time.
type partsReader struct {
	ctx   context.Context
	files jetstream.ObjectStore
	name  string
	parts int
	next  int
	cur   jetstream.ObjectResult
}

func (p *partsReader) Read(b []byte) (int, error) {
	for {
		if p.cur == nil {
			if p.next == p.parts {
				return 0, io.EOF
			}
			obj, err := p.files.Get(p.ctx, events.FilePartName(p.name, p.next))
			if err != nil {
				return 0, err
			}
			p.cur = obj
			p.next++
		}
		n, err := p.cur.Read(b)
		if errors.Is(err, io.EOF) {
			p.cur.Close()
			p.cur = nil
			if n > 0 {
				return n, nil
			}
			continue
		}
		return n, err
	}
}

func (p *partsReader) close() {
	if p.cur != nil {
		p.cur.Close()
		p.cur = nil
	}
}

func (w *Worker) fileSystem() (FileSystem, *events.Error) {
	fs, ok := w.backend.(FileSystem)
	if !ok {
		return nil, events.Errorf(events.CodeCapabilityNotSupp, "backend %s has no file operations", w.info.Name)
	}
	return fs, nil
}

func (w *Worker) handleFilesWrite(sb *sandbox, env cemsg.Envelope, r *events.FilesWriteRequest) (any, *events.Error) {
	fs, e := w.fileSystem()
	if e != nil {
		return nil, e
	}
	return w.recorded(sb, env, events.OpFilesWrite, map[string]string{"path": r.Path}, func(op *opRecord) (any, *events.Error) {
		ctx, cancel := context.WithTimeout(detached(), 5*time.Minute)
		defer cancel()
		var src io.Reader
		var size int64
		if r.Ref != nil {
			rd, n, closeRef, e := w.openRef(ctx, sb, r.Ref)
			if e != nil {
				return nil, e
			}
			defer closeRef()
			src, size = rd, n
		} else {
			data, err := base64.StdEncoding.DecodeString(r.Data)
			if err != nil {
				return nil, events.Errorf(events.CodeInvalidValue, "data is not base64: %v", err).With("field", "data")
			}
			src, size = bytes.NewReader(data), int64(len(data))
		}
		if lim := w.cfg.limits().fileWrite; size > lim {
			return nil, events.Errorf(events.CodeFileWriteTooLarge, "files.write of %d bytes, more than this worker accepts (%d)", size, lim).
				With("size", size).With("limit", lim)
		}
		mode := r.Mode
		if mode == 0 {
			mode = 0o644
		}
		if err := fs.WriteFile(ctx, sb.id, r.Path, mode, src, size); err != nil {
			return nil, classify(err)
		}
		op.rec.BytesIn = size
		return events.FilesWriteReply{Path: r.Path, Size: size}, nil
	})
}

func (w *Worker) handleFilesRead(sb *sandbox, env cemsg.Envelope, r *events.FilesReadCommand) (any, *events.Error) {
	fs, e := w.fileSystem()
	if e != nil {
		return nil, e
	}
	return w.recorded(sb, env, events.OpFilesRead, map[string]string{"path": r.Path}, func(op *opRecord) (any, *events.Error) {
		ctx, cancel := context.WithTimeout(detached(), 5*time.Minute)
		defer cancel()
		reply, e := w.readFile(ctx, fs, sb, r.Path, r.StorageRoom, r.StorageQuota)
		if e == nil {
			op.rec.BytesOut = reply.Size
		}
		return reply, e
	})
}

func (w *Worker) handleFilesList(sb *sandbox, env cemsg.Envelope, r *events.FilesListRequest) (any, *events.Error) {
	fs, e := w.fileSystem()
	if e != nil {
		return nil, e
	}
	return w.recorded(sb, env, events.OpFilesList, map[string]string{"path": r.Path}, func(*opRecord) (any, *events.Error) {
		ctx, cancel := context.WithTimeout(detached(), time.Minute)
		defer cancel()
		entries, err := fs.ListFiles(ctx, sb.id, r.Path)
		if err != nil {
			return nil, classify(err)
		}
		if entries == nil {
			entries = []events.FileInfo{}
		}
		return events.FilesListReply{Entries: entries}, nil
	})
}

func (w *Worker) handleFilesWatch(sb *sandbox, env cemsg.Envelope, r *events.FilesWatchRequest) (any, *events.Error) {
	fw, ok := w.backend.(FileWatcher)
	if !ok || !w.info.Capabilities.Has(events.CapFilesWatch) {
		return nil, events.Errorf(events.CodeCapabilityNotSupp, "backend %s cannot watch files", w.info.Name).With("capability", string(events.CapFilesWatch))
	}
	req := r.WithDefaults()
	return w.recorded(sb, env, events.OpFilesWatch, map[string]string{"path": r.Path}, func(*opRecord) (any, *events.Error) {
		ctx, cancel := context.WithTimeout(detached(), time.Duration(req.TimeoutMS)*time.Millisecond+10*time.Second)
		defer cancel()
		reply, err := fw.WatchFiles(ctx, sb.id, req)
		if err != nil {
			return nil, classify(err)
		}
		if reply.Events == nil {
			reply.Events = []events.FileEvent{}
		}
		return reply, nil
	})
}
