package worker_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

// api calls one op through the router.
func api(ctx context.Context, nc *nats.Conn, op string, req, out any) *events.Error {
	data, _ := json.Marshal(req)
	resp, err := nc.RequestWithContext(ctx, events.APISubject(op), data)
	if err != nil {
		return events.Errorf(events.CodeBackendUnavailable, "%v", err)
	}
	if resp.Header.Get(events.HeaderServiceErrorCode) != "" {
		return events.DecodeError(resp.Data)
	}
	if err := json.Unmarshal(resp.Data, out); err != nil {
		return events.Errorf(events.CodeInternal, "%v", err)
	}
	return nil
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/4096)
	}
	return b
}

// putParts uploads data as parts of name, as files.put does.
func putParts(t *testing.T, ctx context.Context, obs jetstream.ObjectStore, name string, data []byte) int {
	t.Helper()
	parts := 0
	for off := 0; off < len(data); off += events.MaxInlineFileBytes {
		end := min(off+events.MaxInlineFileBytes, len(data))
		if _, err := obs.PutBytes(ctx, events.FilePartName(name, parts), data[off:end]); err != nil {
			t.Fatal(err)
		}
		parts++
	}
	return parts
}

// readRef reads a multi-part reference back and checks every part.
func readRef(t *testing.T, ctx context.Context, obs jetstream.ObjectStore, ref *events.FileRef) []byte {
	t.Helper()
	var all []byte
	for i := 0; i < ref.Parts; i++ {
		part := events.FilePartName(ref.Name, i)
		info, err := obs.GetInfo(ctx, part)
		if err != nil {
			t.Fatal(err)
		}
		if info.Size > events.MaxInlineFileBytes || info.Metadata["parts"] != itoa(ref.Parts) {
			t.Fatalf("part %s: size %d, metadata %v", part, info.Size, info.Metadata)
		}
		b, err := obs.GetBytes(ctx, part)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	sum := sha256.Sum256(all)
	if want := jetstream.GetObjectDigestValue(fixedHash(sum)); ref.Digest != want {
		t.Fatalf("digest %s, want %s", ref.Digest, want)
	}
	return all
}

type fixedHash [32]byte

func (f fixedHash) Sum(b []byte) []byte       { return append(b, f[:]...) }
func (fixedHash) Write(p []byte) (int, error) { return len(p), nil }
func (fixedHash) Reset()                      {}
func (fixedHash) Size() int                   { return 32 }
func (fixedHash) BlockSize() int              { return 64 }

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// TestLargeFilesAsParts: files larger than one message move as parts under
// the sandbox's prefix; a tenant's sandbox takes in only objects under its
// own prefix, so no tenant makes a worker copy another's object in.
func TestLargeFilesAsParts(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nc := env.Conn("t")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	obs, err := js.ObjectStore(ctx, events.BucketFiles)
	if err != nil {
		t.Fatal(err)
	}
	data := pattern(events.MaxInlineFileBytes*2 + 1234)

	// The client's tenant (the open tenant without authentication, tenant
	// A with it): parts, and a single object as before.
	open, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 300})
	if err != nil {
		t.Fatal(err)
	}
	clientTenant := env.Client.Tenant()
	upName := events.FileObjectPrefix(clientTenant, open.SandboxID) + "up1"
	parts := putParts(t, ctx, obs, upName, data)
	var wr events.FilesWriteReply
	if e := api(ctx, nc, events.OpFilesWrite, events.FilesWriteRequest{SandboxID: open.SandboxID, Path: "/big",
		Ref: &events.FileRef{Bucket: events.BucketFiles, Name: upName, Parts: parts, Size: int64(len(data))}}, &wr); e != nil {
		t.Fatal(e)
	}
	if wr.Size != int64(len(data)) {
		t.Fatalf("wrote %d bytes, want %d", wr.Size, len(data))
	}
	var rr events.FilesReadReply
	if e := api(ctx, nc, events.OpFilesRead, events.FilesReadRequest{SandboxID: open.SandboxID, Path: "/big"}, &rr); e != nil {
		t.Fatal(e)
	}
	if rr.Ref == nil || rr.Ref.Parts != 3 || rr.Ref.Size != int64(len(data)) ||
		!strings.HasPrefix(rr.Ref.Name, events.FileObjectPrefix(clientTenant, open.SandboxID)) {
		t.Fatalf("read reply %+v", rr.Ref)
	}
	if got := readRef(t, ctx, obs, rr.Ref); !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes that differ", len(got))
	}
	if _, err := obs.PutBytes(ctx, "legacy-object", data[:700<<10]); err != nil {
		t.Fatal(err)
	}
	// A single object: any name for the open tenant's sandbox, as before; a
	// tenant's sandbox takes one only under its own prefix.
	single := "legacy-object"
	if clientTenant != events.TenantOpen {
		single = events.FileObjectPrefix(clientTenant, open.SandboxID) + "single"
		if _, err := obs.PutBytes(ctx, single, data[:700<<10]); err != nil {
			t.Fatal(err)
		}
	}
	if e := api(ctx, nc, events.OpFilesWrite, events.FilesWriteRequest{SandboxID: open.SandboxID, Path: "/legacy",
		Ref: &events.FileRef{Name: single}}, &wr); e != nil || wr.Size != 700<<10 {
		t.Fatalf("single-object ref: %v, %+v", e, wr)
	}

	// A tenant's sandbox (created as the router does for an authenticated caller).
	const tenant = "ACCTENANTA"
	cmd := events.CreateCommand{SandboxID: "tenant-sb", Spec: events.ClassSpec{Name: "fake", Backend: "fake"},
		Request: events.CreateRequest{TimeoutS: 300}, Deadline: time.Now().Add(300 * time.Second), Tenant: tenant}
	b, _ := json.Marshal(cmd)
	if _, e := publishCreate(t, ctx, env, nc, js, events.NewID(), b); e != nil {
		t.Fatal(e)
	}
	mine := events.FileObjectPrefix(tenant, "tenant-sb") + "up2"
	minePart := putParts(t, ctx, obs, mine, data)
	otherTenant := events.FileObjectPrefix("ACCTENANTB", "tenant-sb") + "up3"
	putParts(t, ctx, obs, otherTenant, data)
	for name, tc := range map[string]struct {
		ref  events.FileRef
		code events.Code
	}{
		"client tenant's object":    {events.FileRef{Name: upName, Parts: parts}, events.CodeForbidden},
		"another tenant's object":   {events.FileRef{Name: otherTenant, Parts: parts}, events.CodeForbidden},
		"single object outside":     {events.FileRef{Name: "legacy-object"}, events.CodeForbidden},
		"prefix with a deeper path": {events.FileRef{Name: mine + "/0"}, events.CodeForbidden},
		"another sandbox's prefix":  {events.FileRef{Name: events.FileObjectPrefix(tenant, open.SandboxID) + "x", Parts: 1}, events.CodeForbidden},
		"other bucket":              {events.FileRef{Bucket: "elsewhere", Name: mine, Parts: minePart}, events.CodeInvalidValue},
		"size does not match parts": {events.FileRef{Name: mine, Parts: minePart, Size: 5}, events.CodeInvalidValue},
		"more parts than exist":     {events.FileRef{Name: mine, Parts: minePart + 1}, events.CodeInvalidValue},
		"absurd number of parts":    {events.FileRef{Name: mine, Parts: 1 << 30}, events.CodeInvalidValue},
	} {
		ref := tc.ref
		var r events.FilesWriteReply
		e := api(ctx, nc, events.OpFilesWrite, events.FilesWriteRequest{SandboxID: "tenant-sb", Path: "/x", Ref: &ref}, &r)
		if e == nil || e.Code != tc.code {
			t.Errorf("%s: %v, want %s", name, e, tc.code)
		}
	}
	if e := api(ctx, nc, events.OpFilesWrite, events.FilesWriteRequest{SandboxID: "tenant-sb", Path: "/mine",
		Ref: &events.FileRef{Name: mine, Parts: minePart}}, &wr); e != nil {
		t.Fatal(e)
	}
	if e := api(ctx, nc, events.OpFilesRead, events.FilesReadRequest{SandboxID: "tenant-sb", Path: "/mine"}, &rr); e != nil {
		t.Fatal(e)
	}
	if rr.Ref == nil || !strings.HasPrefix(rr.Ref.Name, events.FileObjectPrefix(tenant, "tenant-sb")) {
		t.Fatalf("tenant's read reply %+v", rr.Ref)
	}
	if got := readRef(t, ctx, obs, rr.Ref); !bytes.Equal(got, data) {
		t.Fatalf("tenant read back %d bytes that differ", len(got))
	}
	// Small files stay inline.
	var small events.FilesWriteReply
	if e := api(ctx, nc, events.OpFilesWrite, events.FilesWriteRequest{SandboxID: "tenant-sb", Path: "/s", Data: "aGk="}, &small); e != nil {
		t.Fatal(e)
	}
	rr = events.FilesReadReply{}
	if e := api(ctx, nc, events.OpFilesRead, events.FilesReadRequest{SandboxID: "tenant-sb", Path: "/s"}, &rr); e != nil || rr.Ref != nil || rr.Data != "aGk=" {
		t.Fatalf("small read: %v %+v", e, rr)
	}
}

// TestReadoptionKeepsTenant: a worker restarted under the same id re-adopts
// a tenant's sandbox and keeps publishing its output on that tenant's
// subjects.
func TestReadoptionKeepsTenant(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nc := env.Conn("t")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	const tenant = "ACCTENANTA"
	cmd := events.CreateCommand{SandboxID: "adopted", Spec: events.ClassSpec{Name: "fake", Backend: "fake"},
		Request: events.CreateRequest{TimeoutS: 300}, Deadline: time.Now().Add(300 * time.Second), Tenant: tenant}
	b, _ := json.Marshal(cmd)
	if _, e := publishCreate(t, ctx, env, nc, js, events.NewID(), b); e != nil {
		t.Fatal(e)
	}
	env.CrashWorkers()
	w, err := worker.New(worker.Config{WorkerID: env.WorkerID, Bus: env.Bus}, env.Conn("worker-2"), env.Fake)
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() {
		wcancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("restarted worker did not stop")
		}
	}()
	var reply events.ExecStreamReply
	sbxtest.Eventually(t, 15*time.Second, func() bool {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		defer ccancel()
		return api(cctx, nc, events.OpExec, events.ExecRequest{SandboxID: "adopted", Cmd: []string{"echo", "hi"}, Stream: true}, &reply) == nil
	}, "the re-adopted sandbox never answered")
	want := events.StreamSubjectsFor(tenant, "adopted", reply.ProcessID)
	if reply.Subjects != want {
		t.Fatalf("subjects %+v, want %+v", reply.Subjects, want)
	}
	s, err := js.Stream(ctx, events.StreamOutput)
	if err != nil {
		t.Fatal(err)
	}
	sbxtest.Eventually(t, 10*time.Second, func() bool {
		_, err := s.GetLastMsgForSubject(ctx, want.Exit)
		return err == nil
	}, "no exit marker on %s", want.Exit)
}
