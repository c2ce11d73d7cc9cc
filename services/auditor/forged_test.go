package auditor

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/sandboxio/sandboxio/internal/recsign"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestSignedRecordWinsOverForged: whoever may publish on sbx.ops.> publishes
// an unsigned record under a command's record id before the worker's
// signed record. On a real nats-server (SBX_OPS's duplicate window on),
// the audit log holds the signed record all the same, and verifies.
func TestSignedRecordWinsOverForged(t *testing.T) {
	e := startEnv(t)
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	path := filepath.Join(e.dir, "audit.jsonl")
	s, err := New(Config{LogPath: path, TrustedSigners: []string{pub}}, e.nc)
	if err != nil {
		t.Fatal(err)
	}
	stop := runService(t, s)

	forged := record("op1", "exec", events.EventClosed)
	forged.Summary = map[string]string{"cmd": "nothing happened"}
	publishMsg(t, e.js, recordMsg(t, forged)) // Nats-Msg-Id = ce-id, as the worker's
	genuine := recordMsg(t, record("op1", "exec", events.EventClosed))
	sign(t, genuine, kp)
	genuine.Header.Set(events.HeaderMsgID, recsign.RecordMsgID(genuine)) // as the worker publishes it
	publishMsg(t, e.js, genuine)
	eventually(t, 10*time.Second, "the signed record written", func() bool { return s.Written() >= 2 })
	stop()

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := Verify(f)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if rep.Signed != 1 {
		t.Fatalf("signed records %d, want 1 (the genuine one); report %+v", rep.Signed, rep)
	}
}
