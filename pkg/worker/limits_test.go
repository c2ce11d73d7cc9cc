package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
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

// TestOutputFloodsCannotEvict: eight sandboxes flooding SBX_OUT together
// leave an older sandbox's output in the stream. Each flood is cut at its
// share (the stream's budget over the live sandboxes, SBX_E1706) instead of
// pushing the stream past its byte limit, where DiscardOld would evict the
// oldest output, the victim's.
func TestOutputFloodsCannotEvict(t *testing.T) {
	const (
		streamBytes = 4 << 20
		floods      = 8
		victimBytes = 64 << 10
	)
	r := newFloodRig(t, streamBytes, victimBytes)
	ids := make([]string, floods)
	for i := range ids {
		ids[i] = r.create()
	}
	type flood struct {
		published int
		cut       bool
		err       error
	}
	results := make([]flood, floods)
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			_, got, res, err := r.stream(id, streamBytes)
			cut := errors.Is(err, events.ErrOutputShareExceeded) || (res != nil && res.Err != nil && res.Err.Code == events.CodeOutputShareExceeded)
			if cut {
				err = nil
			}
			results[i] = flood{got, cut, err}
		})
	}
	wg.Wait()
	total := 0
	for i, fr := range results {
		if fr.err != nil || !fr.cut {
			t.Errorf("flood %d: %d bytes published, cut %t, err %v; want cut at its share", i, fr.published, fr.cut, fr.err)
		}
		total += fr.published
	}
	r.victimKept(fmt.Sprintf("%d floods of %d bytes together", floods, streamBytes), total)
}

// streamedBytes is how many data bytes SBX_OUT holds on subject.
func streamedBytes(t *testing.T, ctx context.Context, js jetstream.JetStream, subject string) int {
	t.Helper()
	cons, err := js.OrderedConsumer(ctx, events.StreamOutput, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		batch, err := cons.FetchNoWait(256)
		if err != nil {
			t.Fatal(err)
		}
		msgs := 0
		for m := range batch.Messages() {
			msgs++
			n += len(m.Data())
		}
		if msgs == 0 {
			return n
		}
	}
}

// TestSharesSurviveRestart: a worker restarted under the same id goes on
// from the output and object-store shares its predecessor counted (kept in
// the sandbox's registry record), instead of granting them afresh.
func TestSharesSurviveRestart(t *testing.T) {
	const (
		objectCap = 1536 << 10
		shareCap  = 256 << 10
	)
	caps := func(c *worker.Config) { c.MaxSandboxObjectBytes, c.MaxSandboxOutputBytes = objectCap, shareCap }
	env := sbxtest.Start(t, sbxtest.Options{Worker: caps})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
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
	reg, err := js.KeyValue(ctx, events.BucketRegistry)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 300})
	if err != nil {
		t.Fatal(err)
	}
	id := sb.SandboxID
	flood := func(n int) (int, error) {
		p, err := env.Client.Stream(ctx, events.ExecRequest{SandboxID: id, Cmd: []string{"write", strconv.Itoa(n)}})
		if err != nil {
			return 0, err
		}
		got := 0
		for c, err := range p.Chunks() {
			if err != nil {
				break
			}
			got += len(c.Data)
		}
		res, err := p.Wait()
		if err == nil && res != nil && res.Err != nil {
			err = res.Err
		}
		return got, err
	}
	read := func(path string) *events.Error {
		var rr events.FilesReadReply
		return api(ctx, nc, events.OpFilesRead, events.FilesReadRequest{SandboxID: id, Path: path}, &rr)
	}
	// Before the restart: the output share is used up, and one 900 KiB
	// read takes most of the object share.
	// The share pays for the messages' subjects and headers too (a few
	// hundred bytes a chunk).
	if got, err := flood(1 << 20); got > shareCap || got < shareCap-4<<10 || !errors.Is(err, events.ErrOutputShareExceeded) {
		t.Fatalf("first flood: %d bytes, %v; want %d less the messages' overhead and OutputShareExceeded", got, err, shareCap)
	}
	prefix := events.FileObjectPrefix(env.Client.Tenant(), id)
	name := prefix + "up"
	parts := putParts(t, ctx, obs, name, pattern(900<<10))
	var wr events.FilesWriteReply
	if e := api(ctx, nc, events.OpFilesWrite, events.FilesWriteRequest{SandboxID: id, Path: "/mid",
		Ref: &events.FileRef{Bucket: events.BucketFiles, Name: name, Parts: parts, Size: 900 << 10}}, &wr); e != nil {
		t.Fatal(e)
	}
	if e := read("/mid"); e != nil {
		t.Fatal(e)
	}
	var saved events.SandboxUsage
	sbxtest.Eventually(t, 10*time.Second, func() bool {
		e, err := reg.Get(ctx, id)
		if err != nil {
			return false
		}
		var rec events.Sandbox
		if json.Unmarshal(e.Value(), &rec) != nil || rec.Usage == nil {
			return false
		}
		saved = *rec.Usage
		// The share, and the flood's exit marker (counted past it).
		return saved.OutputBytes >= shareCap && saved.OutputBytes < shareCap+4<<10 && len(saved.Objects) == 1
	}, "the usage never reached the registry record")
	t.Logf("usage in the record before the restart: %+v", saved)

	env.CrashWorkers()
	w, err := worker.New(func() worker.Config {
		c := worker.Config{WorkerID: env.WorkerID, Bus: env.Bus, KillOnShutdown: true}
		caps(&c)
		return c
	}(), env.Conn("worker-2"), env.Fake)
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
	sbxtest.Eventually(t, 15*time.Second, func() bool {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		defer ccancel()
		_, err := env.Client.Exec(cctx, events.ExecRequest{SandboxID: id, Cmd: []string{"echo", "hi"}})
		return err == nil
	}, "the re-adopted sandbox never answered")
	// After it: no new output share, and the second read does not fit.
	got, err := flood(64 << 10)
	t.Logf("after the restart: a 64 KiB flood published %d bytes (%v)", got, err)
	if got != 0 || !errors.Is(err, events.ErrOutputShareExceeded) {
		t.Errorf("after a same-id restart the output share was granted again: %d bytes, %v", got, err)
	}
	if e := read("/mid"); e == nil || e.Code != events.CodeObjectQuotaExceeded {
		t.Errorf("after a same-id restart the object share was granted again: %v, want %s", e, events.CodeObjectQuotaExceeded)
	}
}
