package auditor

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/sandboxio/sandboxio/internal/cemsg"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
	"github.com/sandboxio/sandboxio/pkg/worker/fake"
)

// recordMsg builds a record message as a worker does, unsigned.
func recordMsg(t *testing.T, rec events.OpRecord) *nats.Msg {
	t.Helper()
	data, _ := json.Marshal(rec)
	typ := events.TypeOpOpened
	if rec.Phase == events.EventClosed {
		typ = events.TypeOpClosed
	}
	m, err := cemsg.Encode(events.OpsSubject(rec.Backend, rec.SandboxID, rec.Phase), cemsg.Envelope{
		ID: rec.OpID + "-" + rec.Phase, Type: typ, Source: "sandboxio/worker/" + rec.Worker, Subject: rec.SandboxID, Data: data})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func sign(t *testing.T, m *nats.Msg, kp nkeys.KeyPair) {
	t.Helper()
	pub, _ := kp.PublicKey()
	sig, err := kp.Sign(events.SignedRecordPayload(m.Subject, m.Header.Get(events.HeaderCEID), m.Data))
	if err != nil {
		t.Fatal(err)
	}
	m.Header.Set(events.HeaderSigner, pub)
	m.Header.Set(events.HeaderSignature, base64.StdEncoding.EncodeToString(sig))
}

func publishMsg(t *testing.T, js jetstream.JetStream, m *nats.Msg) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
}

// TestForgedRecordsAreFlagged: genuine records of a running worker verify;
// records published by a client that may publish to sbx.ops but holds no
// worker key (unsigned), signed by an unknown key, signed by a key another
// worker advertised, or altered after signing are written but flagged, each
// by its line, by Verify.
func TestForgedRecordsAreFlagged(t *testing.T) {
	e := startEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	workerKey, _ := nkeys.CreateUser()
	seed, _ := workerKey.Seed()
	workerPub, _ := workerKey.PublicKey()
	wnc, err := e.srv.Connect("worker")
	if err != nil {
		t.Fatal(err)
	}
	defer wnc.Close()
	fk := fake.New(fake.Config{})
	w, err := worker.New(worker.Config{WorkerID: "w1", SigningSeed: seed, KillOnShutdown: true}, wnc, fk)
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	wdone := make(chan error, 1)
	go func() { wdone <- w.Run(wctx) }()
	defer func() {
		wcancel()
		<-wdone
	}()
	leases, err := e.js.KeyValue(ctx, events.BucketWorkers)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the worker's lease", func() bool {
		_, err := leases.Get(ctx, events.WorkerKey("fake", "w1"))
		return err == nil
	})
	// Another worker's lease with its own key: its key must not vouch for w1.
	evilKey, _ := nkeys.CreateUser()
	evilPub, _ := evilKey.PublicKey()
	evil, _ := json.Marshal(events.WorkerLease{Backend: "fake", Worker: "evil", SigningKey: evilPub, HeartbeatAt: time.Now()})
	if _, err := leases.Put(ctx, events.WorkerKey("fake", "evil"), evil); err != nil {
		t.Fatal(err)
	}

	logPath := filepath.Join(e.dir, "audit.jsonl")
	s, err := New(Config{LogPath: logPath}, e.nc)
	if err != nil {
		t.Fatal(err)
	}
	stop := runService(t, s)

	// Genuine: a create the worker refuses (opened + closed, signed by w1).
	cmdMsg, _ := cemsg.Encode(events.CreateSubject("fake"), cemsg.Envelope{ID: "genuine-op", Type: events.CommandType(events.OpCreate),
		Source: "test", Data: []byte(`{"sandbox_id":"sbx1","spec":{"backend":"fake"},"request":{"timeout_s":0}}`)})
	publishMsg(t, e.js, cmdMsg)
	eventually(t, 10*time.Second, "the genuine records", func() bool { return s.Written() >= 2 })

	// Forged, in order.
	unknownKey, _ := nkeys.CreateUser()
	forged := []struct {
		id  string
		sig string
		msg func() *nats.Msg
	}{
		{"forged-unsigned-closed", SigMissing, func() *nats.Msg {
			return recordMsg(t, record("forged-unsigned", events.OpCreate, events.EventClosed))
		}},
		{"forged-unknown-closed", SigUntrusted, func() *nats.Msg {
			m := recordMsg(t, record("forged-unknown", events.OpCreate, events.EventClosed))
			sign(t, m, unknownKey)
			return m
		}},
		{"forged-evil-closed", SigUntrusted, func() *nats.Msg {
			m := recordMsg(t, record("forged-evil", events.OpCreate, events.EventClosed)) // claims worker w1
			sign(t, m, evilKey)
			return m
		}},
		{"forged-altered-closed", SigInvalid, func() *nats.Msg {
			rec := record("forged-altered", events.OpExec, events.EventClosed)
			m := recordMsg(t, rec)
			sign(t, m, workerKey) // a genuine signature by w1's key...
			rec.Outcome, rec.ErrorCode = events.OutcomeError, events.CodeExecFailed
			m.Data, _ = json.Marshal(rec) // ...over other data
			return m
		}},
		{"forged-badsig-closed", SigInvalid, func() *nats.Msg {
			m := recordMsg(t, record("forged-badsig", events.OpCreate, events.EventClosed))
			m.Header.Set(events.HeaderSigner, workerPub)
			m.Header.Set(events.HeaderSignature, "not base64!")
			return m
		}},
		{"resigned-closed", SigOK, func() *nats.Msg { // w1's key really signed it: ok
			m := recordMsg(t, record("resigned", events.OpCreate, events.EventClosed))
			sign(t, m, workerKey)
			return m
		}},
	}
	for _, f := range forged {
		publishMsg(t, e.js, f.msg())
	}
	eventually(t, 10*time.Second, "every record written", func() bool { return s.Written() >= uint64(2+len(forged)) })
	stop()

	raw, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Verify(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("chain: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	lineOf := map[string]int{}
	for i, l := range lines {
		var en Entry
		_ = json.Unmarshal([]byte(l), &en)
		lineOf[en.ID] = i + 1
	}
	flagged := map[int]SignatureProblem{}
	for _, p := range rep.Unverified {
		flagged[p.Line] = p
	}
	for _, id := range []string{"genuine-op-opened", "genuine-op-closed"} {
		if _, bad := flagged[lineOf[id]]; bad || lineOf[id] == 0 {
			t.Errorf("genuine record %s (line %d) flagged: %+v", id, lineOf[id], flagged[lineOf[id]])
		}
	}
	want := 0
	for _, f := range forged {
		line := lineOf[f.id]
		p, bad := flagged[line]
		switch {
		case line == 0:
			t.Errorf("%s not in the log", f.id)
		case f.sig == SigOK && bad:
			t.Errorf("%s flagged %+v", f.id, p)
		case f.sig != SigOK && (!bad || p.Sig != f.sig || p.ID != f.id):
			t.Errorf("%s on line %d: flagged %v %+v, want %s", f.id, line, bad, p, f.sig)
		}
		if f.sig != SigOK {
			want++
		}
	}
	if rep.UnverifiedCount != want || rep.Signed != rep.Records-want {
		t.Errorf("signed %d, unverified %d of %d lines; want %d unverified", rep.Signed, rep.UnverifiedCount, len(lines), want)
	}
	serr := rep.SignatureError()
	if !errors.Is(serr, events.ErrAuditTampered) {
		t.Errorf("SignatureError = %v", serr)
	}
	for _, p := range rep.Unverified {
		t.Logf("flagged: line %d %s sig=%s signer=%s", p.Line, p.ID, p.Sig, p.Signer)
	}
	// The verdict is inside what the chain covers: changing it breaks the chain.
	tampered := strings.Replace(string(raw), `"sig":"missing"`, `"sig":"ok"`, 1)
	if _, err := Verify(strings.NewReader(tampered)); !errors.Is(err, events.ErrAuditTampered) {
		t.Errorf("a verdict rewritten to ok verified: %v", err)
	}
}

// TestTrustedSigners: with a configured list, only its keys are ok, even
// for a key a lease advertises.
func TestTrustedSigners(t *testing.T) {
	trusted, _ := nkeys.CreateUser()
	trustedPub, _ := trusted.PublicKey()
	other, _ := nkeys.CreateUser()
	otherPub, _ := other.PublicKey()
	sg := newSigners([]string{trustedPub}, nil)
	sg.remember(events.WorkerKey("fake", "w1"), otherPub)
	rec := record("t1", events.OpCreate, events.EventClosed)
	for name, tc := range map[string]struct {
		kp   nkeys.KeyPair
		want string
	}{"trusted": {trusted, SigOK}, "advertised only": {other, SigUntrusted}} {
		m := recordMsg(t, rec)
		sign(t, m, tc.kp)
		if got, _ := sg.verdict(context.Background(), m.Subject, m.Header, m.Data, rec); got != tc.want {
			t.Errorf("%s: %s, want %s", name, got, tc.want)
		}
	}
	if err := (Config{TrustedSigners: []string{"SUAAAA"}}).Validate(); err == nil {
		t.Errorf("a seed in TrustedSigners was accepted")
	}
	if err := (Config{TrustedSigners: []string{trustedPub}}).Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

// TestLegacyLogVerifies: a log written before records were signed (no sig
// field) verifies its chain as before and reports every record unsigned.
func TestLegacyLogVerifies(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.jsonl")
	l, err := OpenLog(path)
	if err != nil {
		t.Fatal(err)
	}
	var entries []Entry
	for i := range 3 {
		raw, _ := json.Marshal(record(opID(i), events.OpExec, events.EventClosed))
		entries = append(entries, Entry{ID: opID(i) + "-closed", Type: events.TypeOpClosed, Source: "s", Time: time.Now().UTC(),
			Subject: "sbx.ops.fake.sbx1.closed", Record: raw})
	}
	if _, err := l.Append(entries); err != nil {
		t.Fatal(err)
	}
	l.Close()
	raw, _ := os.ReadFile(path)
	if recs, _, _ := bytes.Cut(raw, []byte(TypeCheckpoint)); bytes.Contains(recs, []byte(`"sig"`)) {
		t.Fatalf("unsigned entries carry a sig field: %s", raw)
	}
	rep, err := Verify(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("chain of a legacy log: %v", err)
	}
	if rep.UnverifiedCount != 3 || rep.Unverified[0].Sig != SigUnsigned || rep.Unverified[2].Line != 3 || rep.SignatureError() == nil {
		t.Fatalf("report %+v", rep)
	}
}
