package reaper

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/sandboxio/sandboxio/internal/recsign"
	"github.com/sandboxio/sandboxio/pkg/events"
	// Test only: the reaper's record must win in the real auditor.
	"github.com/sandboxio/sandboxio/services/auditor"
)

// TestSignedRecordWinsOverForged: whoever may publish on sbx.ops.> sees a
// reap's opened record and publishes an unsigned closed record under its
// id before the reaper does. On a real nats-server (SBX_OPS's duplicate
// window on), the reaper's signed record reaches SBX_OPS all the same, and
// the audit log holds it signed.
func TestSignedRecordWinsOverForged(t *testing.T) {
	e := startEnv(t)
	kp, _ := nkeys.CreateUser()
	seed, _ := kp.Seed()
	pub, _ := kp.PublicKey()
	s, err := New(Config{InstanceID: "r1", SigningSeed: seed}, e.nc)
	if err != nil {
		t.Fatal(err)
	}
	rec := events.OpRecord{OpID: "reap-op1", Kind: KindReap, Phase: events.EventClosed, SandboxID: "sbx-1",
		Backend: "fake", Worker: recsign.ReaperWorker, StartedAt: time.Now().UTC(), Outcome: events.OutcomeOK,
		Summary: map[string]string{recsign.SummaryWorker: "w1"}}
	forged := rec
	forged.Summary = map[string]string{recsign.SummaryWorker: "w1", "reason": "nothing happened"}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := e.js.PublishMsg(ctx, forgedRecord(t, forged)); err != nil { // Nats-Msg-Id = ce-id
		t.Fatal(err)
	}
	if err := s.publishRecord(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if n := len(records(t, e, KindReap)); n != 2 {
		t.Fatalf("SBX_OPS holds %d closed reap records, want 2 (the forgery and the reaper's signed one)", n)
	}

	path := filepath.Join(t.TempDir(), "audit.jsonl")
	aud, err := auditor.New(auditor.Config{LogPath: path, TrustedSigners: []string{pub}}, connect(t, e.srv, "auditor"))
	if err != nil {
		t.Fatal(err)
	}
	actx, acancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- aud.Run(actx) }()
	eventually(t, 10*time.Second, "both records written", func() bool { return aud.Written() >= 2 })
	acancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("auditor did not stop")
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := auditor.VerifyWith(f, auditor.VerifyOptions{TrustedSigners: []string{pub}})
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if rep.Signed != 1 {
		t.Fatalf("signed records %d, want 1 (the reaper's); report %+v", rep.Signed, rep)
	}
}
