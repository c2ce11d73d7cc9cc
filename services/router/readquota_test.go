package router_test

import (
	"bytes"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/services/router"
)

// TestReadsChargedToStorageQuota: a files.read of a file larger than
// MaxInlineFileBytes stores it in sbx_files under the sandbox's prefix,
// and those objects were bounded only per sandbox by the worker, never
// against the tenant's max_storage_bytes: a few sandboxes of one tenant
// filled the bucket. A read that would take the tenant past its quota is
// refused with SBX_E1406 and stores nothing; reads running at once share
// the tenant's room; the bucket never holds more than the quota.
func TestReadsChargedToStorageQuota(t *testing.T) {
	const part = events.MaxInlineFileBytes
	const fileSize = 2*part + 1 // three parts
	const quota = 5 * part
	env := sbxtest.Start(t, sbxtest.Options{Router: func(c *router.Config) {
		c.DefaultLimits = events.TenantLimits{MaxSandboxStorageBytes: 8 * part, MaxStorageBytes: quota}
	}})
	js, err := jetstream.New(env.Conn("storage-check"))
	if err != nil {
		t.Fatal(err)
	}
	files, err := js.ObjectStore(ctx(t), events.BucketFiles)
	if err != nil {
		t.Fatal(err)
	}
	stored := func(tenant string) int64 {
		t.Helper()
		infos, err := files.List(ctx(t))
		if err != nil && err != jetstream.ErrNoObjectsFound {
			t.Fatal(err)
		}
		var n int64
		for _, info := range infos {
			if strings.HasPrefix(info.Name, tenant+"/") {
				n += int64(info.Size)
			}
		}
		return n
	}
	big := bytes.Repeat([]byte("x"), fileSize)
	sandboxWithFile := func(tn tenant) string {
		t.Helper()
		id := tn.create(events.CreateRequest{TimeoutS: 300}).SandboxID
		if err := env.Fake.WriteFile(ctx(t), id, "/work/big", 0o644, bytes.NewReader(big), int64(len(big))); err != nil {
			t.Fatal(err)
		}
		if err := env.Fake.WriteFile(ctx(t), id, "/work/small", 0o644, strings.NewReader("small"), 5); err != nil {
			t.Fatal(err)
		}
		return id
	}
	read := func(tn tenant, id, path string) (events.FilesReadReply, *events.Error) {
		var r events.FilesReadReply
		e := tn.do(events.OpFilesRead, events.FilesReadRequest{SandboxID: id, Path: path}, &r)
		return r, e
	}

	t.Run("one after another", func(t *testing.T) {
		a := newTenant(t, env)
		ids := []string{sandboxWithFile(a), sandboxWithFile(a), sandboxWithFile(a)}
		for i, id := range ids[:2] {
			r, e := read(a, id, "/work/big")
			if e != nil || r.Ref == nil || r.Size != fileSize {
				t.Fatalf("read %d within the quota: %v, %+v", i, e, r)
			}
		}
		_, e := read(a, ids[2], "/work/big")
		wantCode(t, "a read past the tenant's storage quota", e, events.CodeStorageQuota)
		if e.Retryable || e.Details["quota"] != "max_storage_bytes" {
			t.Fatalf("past the tenant's storage quota: %+v", e)
		}
		if r, e := read(a, ids[2], "/work/small"); e != nil || r.Data == "" {
			t.Fatalf("a small file (inline, nothing stored) at the quota: %v, %+v", e, r)
		}
		if n := stored(a.id); n != 2*fileSize {
			t.Fatalf("the tenant stores %d bytes, want %d (two reads; the refused one kept nothing)", n, 2*fileSize)
		}
		var q events.QuotaReply
		if e := a.do(events.OpQuota, events.QuotaRequest{}, &q); e != nil || q.Usage.StorageBytes != 2*fileSize {
			t.Fatalf("quota: %v, usage %+v, want %d storage bytes", e, q.Usage, 2*fileSize)
		}
	})

	t.Run("at once", func(t *testing.T) {
		b := newTenant(t, env)
		ids := make([]string, 4)
		for i := range ids {
			ids[i] = sandboxWithFile(b)
		}
		var wg sync.WaitGroup
		errs := make([]*events.Error, len(ids))
		for i, id := range ids {
			wg.Go(func() { _, errs[i] = read(b, id, "/work/big") })
		}
		wg.Wait()
		ok := 0
		for i, e := range errs {
			switch {
			case e == nil:
				ok++
			case e.Code != events.CodeStorageQuota:
				t.Errorf("read %d: %v, want success or SBX_E1406", i, e)
			}
		}
		n := stored(b.id)
		t.Logf("%d of %d reads at once stored; the tenant stores %d bytes of its %d", ok, len(ids), n, quota)
		if ok == 0 || n > quota || n != int64(ok)*fileSize {
			t.Fatalf("%d reads stored, the tenant stores %d bytes: want at least one, %d bytes each, at most %d in all", ok, n, fileSize, quota)
		}
	})
}
