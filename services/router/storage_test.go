package router_test

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/services/router"
)

// TestStorageQuota: files.put once stored without limit (60 MiB in 1.3 s
// from one tenant, nothing charged, parts kept 24 h). What a sandbox and a
// tenant store in sbx_files is counted against max_sandbox_storage_bytes
// and max_storage_bytes (SBX_E1406, not retryable, nothing stored), and a
// sandbox's parts are deleted when it ends, which frees its tenant's quota.
func TestStorageQuota(t *testing.T) {
	const part = events.MaxInlineFileBytes
	env := sbxtest.Start(t, sbxtest.Options{Router: func(c *router.Config) {
		c.DefaultLimits = events.TenantLimits{MaxSandboxStorageBytes: 4 * part, MaxStorageBytes: 6 * part}
	}})
	a := newTenant(t, env)
	sb1 := a.create(events.CreateRequest{TimeoutS: 300}).SandboxID
	sb2 := a.create(events.CreateRequest{TimeoutS: 300}).SandboxID
	data := base64.StdEncoding.EncodeToString(make([]byte, part))
	put := func(sb string, i int) *events.Error {
		name := events.FileObjectPrefix(a.id, sb) + "f1"
		return a.do(events.OpFilesPut, events.FilesPutRequest{SandboxID: sb, Name: name, Part: i, Data: data}, nil)
	}
	for i := range 4 {
		if e := put(sb1, i); e != nil {
			t.Fatalf("part %d of sandbox 1: %v", i, e)
		}
	}
	if e := put(sb1, 0); e != nil {
		t.Fatalf("part 0 of sandbox 1 again (replaces, stores nothing more): %v", e)
	}
	e := put(sb1, 4)
	wantCode(t, "a part past the sandbox's storage quota", e, events.CodeStorageQuota)
	if e.Retryable || e.Details["quota"] != "max_sandbox_storage_bytes" {
		t.Fatalf("over the sandbox's storage quota: %+v", e)
	}
	for i := range 2 {
		if e := put(sb2, i); e != nil {
			t.Fatalf("part %d of sandbox 2: %v", i, e)
		}
	}
	e = put(sb2, 2)
	wantCode(t, "a part past the tenant's storage quota", e, events.CodeStorageQuota)
	if e.Details["quota"] != "max_storage_bytes" {
		t.Fatalf("over the tenant's storage quota: %+v", e)
	}
	var q events.QuotaReply
	if e := a.do(events.OpQuota, events.QuotaRequest{}, &q); e != nil || q.Usage.StorageBytes != 6*part {
		t.Fatalf("quota: %v, usage %+v, want %d storage bytes", e, q.Usage, 6*part)
	}

	// The end of sandbox 1 deletes its parts and frees the tenant's quota.
	if e := a.do(events.OpKill, events.KillRequest{SandboxID: sb1}, nil); e != nil {
		t.Fatal(e)
	}
	js, err := jetstream.New(env.Conn("storage-check"))
	if err != nil {
		t.Fatal(err)
	}
	files, err := js.ObjectStore(ctx(t), events.BucketFiles)
	if err != nil {
		t.Fatal(err)
	}
	sbxtest.Eventually(t, 20*time.Second, func() bool {
		_, err := files.GetInfo(ctx(t), events.FilePartName(events.FileObjectPrefix(a.id, sb1)+"f1", 0))
		return err != nil && strings.Contains(err.Error(), "not found")
	}, "the parts of an ended sandbox were not deleted")
	sbxtest.Eventually(t, 20*time.Second, func() bool { return put(sb2, 2) == nil }, "the tenant's quota was not freed by the end of a sandbox")
	e = put(sb1, 0)
	wantCode(t, "a part of an ended sandbox", e, events.CodeSandboxGone)
}

// TestSweepWaitsForRegistry: a router (re)started while the registry
// takes long to load once swept every 2 s from its first tick and deleted
// the objects of live sandboxes its cache did not hold yet (issue #4). The
// sweep waits for the registry cache and the files watch: an object of a
// live sandbox survives while the registry is held and after it loaded.
func TestSweepWaitsForRegistry(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	a := newTenant(t, env)
	sb := a.create(events.CreateRequest{TimeoutS: 300}).SandboxID
	name := events.FileObjectPrefix(a.id, sb) + "f1"
	data := base64.StdEncoding.EncodeToString([]byte("kept"))
	if e := a.do(events.OpFilesPut, events.FilesPutRequest{SandboxID: sb, Name: name, Data: data}, nil); e != nil {
		t.Fatal(e)
	}
	js, err := jetstream.New(env.Conn("storage-check"))
	if err != nil {
		t.Fatal(err)
	}
	files, err := js.ObjectStore(ctx(t), events.BucketFiles)
	if err != nil {
		t.Fatal(err)
	}
	kept := func(when string) {
		t.Helper()
		if _, err := files.GetInfo(ctx(t), events.FilePartName(name, 0)); err != nil {
			t.Fatalf("%s: the object of a live sandbox: %v", when, err)
		}
	}

	env.StopRouters()
	router.SetOrphanObjectGrace(t, 0) // the object counts as old
	release := router.HoldRegistryLoad(t)
	defer release()
	ticks := router.SweepTicks(t)
	svc, _ := startRouter(t, env)
	waitTicks := func(n int, swept bool) {
		t.Helper()
		for n > 0 {
			select {
			case s := <-ticks:
				if s == swept {
					n--
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("no sweep tick (swept=%v) within 30s", swept)
			}
		}
	}
	waitTicks(3, false)
	kept("registry cache held")
	release()
	sbxtest.Eventually(t, 20*time.Second, func() bool { return router.Cached(svc, sb) }, "the registry cache never loaded")
	waitTicks(2, true)
	kept("registry cache loaded")
}

// TestPutWaitsForFilesLoad: a router (re)started counted a sandbox's
// storage as empty until its files watch had loaded, so a files.put past
// the sandbox's quota was stored (review #4). A files.put waits (bounded)
// for the load: refused retryable while it lasts, SBX_E1406 after.
func TestPutWaitsForFilesLoad(t *testing.T) {
	const part = events.MaxInlineFileBytes
	env := sbxtest.Start(t, sbxtest.Options{})
	a := newTenant(t, env)
	sb := a.create(events.CreateRequest{TimeoutS: 300}).SandboxID
	data := base64.StdEncoding.EncodeToString(make([]byte, part))
	put := func(i int) *events.Error {
		name := events.FileObjectPrefix(a.id, sb) + "f1"
		return a.do(events.OpFilesPut, events.FilesPutRequest{SandboxID: sb, Name: name, Part: i, Data: data}, nil)
	}
	for i := range 2 {
		if e := put(i); e != nil {
			t.Fatalf("part %d: %v", i, e)
		}
	}
	env.StopRouters()
	release := router.HoldFilesLoad(t, 300*time.Millisecond)
	defer release()
	startRouter(t, env, func(c *router.Config) {
		c.DefaultLimits = events.TenantLimits{MaxSandboxStorageBytes: 2 * part, MaxStorageBytes: 6 * part}
	})
	e := put(2)
	wantCode(t, "a part while the files watch loads", e, events.CodeBackendUnavailable)
	if !e.Retryable {
		t.Fatalf("refused while the files watch loads: %+v, want retryable", e)
	}
	release()
	sbxtest.Eventually(t, 20*time.Second, func() bool {
		e = put(2)
		return e == nil || e.Code != events.CodeBackendUnavailable
	}, "files.put still refused as loading")
	wantCode(t, "a part past the sandbox's storage quota after the load", e, events.CodeStorageQuota)
}
