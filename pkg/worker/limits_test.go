package worker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

// TestContainmentLimits: files.write, files.read, the object store, the
// output_limit and a sandbox's share of SBX_OUT are each capped with their
// own code, and a refusal leaves nothing behind.
func TestContainmentLimits(t *testing.T) {
	const (
		readCap   = 1 << 20
		writeCap  = 2 << 20
		objectCap = 1536 << 10
		shareCap  = 256 << 10
	)
	env := sbxtest.Start(t, sbxtest.Options{Worker: func(c *worker.Config) {
		c.MaxFileReadBytes, c.MaxFileWriteBytes, c.MaxSandboxObjectBytes = readCap, writeCap, objectCap
		c.MaxOutputLimit, c.MaxSandboxOutputBytes = 64<<20, shareCap
	}})
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
	sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 300})
	if err != nil {
		t.Fatal(err)
	}
	prefix := events.FileObjectPrefix(env.Client.Tenant(), sb.SandboxID)
	upload := func(name string, n int) *events.FileRef {
		parts := putParts(t, ctx, obs, prefix+name, pattern(n))
		return &events.FileRef{Bucket: events.BucketFiles, Name: prefix + name, Parts: parts, Size: int64(n)}
	}
	write := func(path string, ref *events.FileRef) *events.Error {
		var wr events.FilesWriteReply
		return api(ctx, nc, events.OpFilesWrite, events.FilesWriteRequest{SandboxID: sb.SandboxID, Path: path, Ref: ref}, &wr)
	}
	read := func(path string) (events.FilesReadReply, *events.Error) {
		var rr events.FilesReadReply
		return rr, api(ctx, nc, events.OpFilesRead, events.FilesReadRequest{SandboxID: sb.SandboxID, Path: path}, &rr)
	}
	objects := func() int {
		n := 0
		lister, err := obs.List(ctx)
		if errors.Is(err, jetstream.ErrNoObjectsFound) {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range lister {
			if strings.HasPrefix(o.Name, prefix) && !strings.HasPrefix(o.Name, prefix+"up") {
				n++
			}
		}
		return n
	}

	// files.write above the cap: refused, nothing written.
	if e := write("/too-big", upload("up1", writeCap+1)); e == nil || e.Code != events.CodeFileWriteTooLarge {
		t.Errorf("files.write of %d bytes: %v, want %s", writeCap+1, e, events.CodeFileWriteTooLarge)
	}
	if _, e := read("/too-big"); e == nil || e.Code == events.CodeFileReadTooLarge {
		t.Errorf("a refused write left a file: %v", e)
	}
	// files.read above the cap: refused, nothing stored.
	if e := write("/big", upload("up2", readCap+4096)); e != nil {
		t.Fatal(e)
	}
	if _, e := read("/big"); e == nil || e.Code != events.CodeFileReadTooLarge {
		t.Errorf("files.read of %d bytes: %v, want %s", readCap+4096, e, events.CodeFileReadTooLarge)
	}
	if n := objects(); n != 0 {
		t.Errorf("%d objects left by a refused read", n)
	}
	// The object store: two reads of 900 KiB fit the read cap, not the
	// sandbox's 1.5 MiB share.
	if e := write("/mid", upload("up3", 900<<10)); e != nil {
		t.Fatal(e)
	}
	if rr, e := read("/mid"); e != nil || rr.Ref == nil {
		t.Fatalf("first read: %v %+v", e, rr)
	}
	stored := objects()
	if _, e := read("/mid"); e == nil || e.Code != events.CodeObjectQuotaExceeded {
		t.Errorf("second read past the object share: %v, want %s", e, events.CodeObjectQuotaExceeded)
	}
	if n := objects(); n != stored {
		t.Errorf("objects %d after a refused read, %d before", n, stored)
	}
	// Small files still come back inline.
	if e := write("/small", &events.FileRef{Name: upload("up4", 100).Name, Parts: 1}); e != nil {
		t.Fatal(e)
	}
	if rr, e := read("/small"); e != nil || rr.Ref != nil {
		t.Errorf("inline read: %v %+v", e, rr)
	}

	// output_limit of 1 TiB is refused, buffered or streamed.
	for _, stream := range []bool{false, true} {
		req := events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"echo", "hi"}, OutputLimit: 1 << 40, Stream: stream}
		if stream {
			_, err = env.Client.Stream(ctx, req)
		} else {
			_, err = env.Client.Exec(ctx, req)
		}
		if !errors.Is(err, events.ErrOutputLimitTooLarge) {
			t.Errorf("output_limit 1 TiB (stream %t): %v, want OutputLimitTooLarge", stream, err)
		}
	}
	// A sandbox's share of SBX_OUT: a 1 MiB flood keeps 256 KiB.
	p, err := env.Client.Stream(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"write", "1048576"}})
	if err != nil {
		t.Fatal(err)
	}
	var got int
	for c, err := range p.Chunks() {
		if err != nil {
			break
		}
		got += len(c.Data)
	}
	res, err := p.Wait()
	t.Logf("flood of 1048576 bytes: %d published, result %+v, err %v", got, res, err)
	if got > shareCap {
		t.Errorf("%d bytes published, share %d", got, shareCap)
	}
	if res == nil || !res.Truncated || res.StdoutBytes != 1<<20 {
		t.Errorf("result %+v, want truncated with 1048576 bytes counted", res)
	}
	if !errors.Is(err, events.ErrOutputShareExceeded) && (res == nil || res.Err == nil || res.Err.Code != events.CodeOutputShareExceeded) {
		t.Errorf("flood past the share: %v / %+v, want OutputShareExceeded", err, res)
	}
	// A second sandbox's output is untouched by the first's flood.
	sb2, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 300})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb2.SandboxID, Cmd: []string{"echo", "mine"}})
	if err != nil || strings.TrimSpace(string(r2.Stdout)) != "mine" {
		t.Errorf("second sandbox: %v %+v", err, r2)
	}
}
