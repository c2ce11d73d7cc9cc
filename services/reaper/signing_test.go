package reaper

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/sandboxio/sandboxio/internal/cemsg"
	"github.com/sandboxio/sandboxio/internal/recsign"
	"github.com/sandboxio/sandboxio/pkg/events"
	// Test only: the reaper's records must verify in the real auditor.
	"github.com/sandboxio/sandboxio/services/auditor"
)

// TestReaperRecordsVerify: the records of a deadline kill and of a lost
// worker's sandbox, published by a running reaper, are signed and verify ok
// in the audit log, both with a trusted list holding the reaper's key
// (auth init's signers.txt) and without one (the key the reaper advertises
// in sbx_reaper). Without a list, a record signed by the reaper's key but
// naming a worker, and a record naming the reaper signed by another key,
// are written but not ok.
func TestReaperRecordsVerify(t *testing.T) {
	for _, mode := range []string{"trusted list", "advertised key"} {
		t.Run(mode, func(t *testing.T) {
			e := startEnv(t)
			var cfg Config
			var trusted []string
			if mode == "trusted list" {
				kp, _ := nkeys.CreateUser()
				cfg.SigningSeed, _ = kp.Seed()
				pub, _ := kp.PublicKey()
				trusted = []string{pub}
			}
			logPath := filepath.Join(t.TempDir(), "audit.jsonl")
			aud, err := auditor.New(auditor.Config{LogPath: logPath, TrustedSigners: trusted}, connect(t, e.srv, "auditor"))
			if err != nil {
				t.Fatal(err)
			}
			actx, acancel := context.WithCancel(context.Background())
			adone := make(chan error, 1)
			go func() { adone <- aud.Run(actx) }()
			stopAuditor := func() {
				acancel()
				select {
				case err := <-adone:
					if err != nil {
						t.Errorf("auditor: %v", err)
					}
				case <-time.After(15 * time.Second):
					t.Fatal("auditor did not stop")
				}
			}
			defer acancel()

			w := startWorker(t, e, "w1", true)
			dead := startWorker(t, e, "dead", false)
			now := time.Now()
			putSandbox(t, e, "sbx-expiring", "w1", now.Add(300*time.Millisecond), now)
			putSandbox(t, e, "sbx-orphan", "dead", now.Add(time.Hour), now)
			cfg.InstanceID, cfg.LostGrace = "r1", 500*time.Millisecond
			s, _ := runReaper(t, e.nc, cfg)
			if trusted != nil && s.SigningKey() != trusted[0] {
				t.Fatalf("reaper signs with %s, not its SigningSeed's key %s", s.SigningKey(), trusted[0])
			}
			eventually(t, 5*time.Second, "active", s.Active)
			eventually(t, 5*time.Second, "deadline kill", func() bool { _, ok := w.killed("sbx-expiring"); return ok })
			w.mu.Lock()
			killer := w.killedBy["sbx-expiring"]
			w.mu.Unlock()
			if killer != s.SigningKey() {
				t.Fatalf("the kill command is signed by %q, want the reaper's key %s", killer, s.SigningKey())
			}
			dead.stopLease()
			eventually(t, 10*time.Second, "sbx-orphan lost", func() bool { sb, _ := getSandbox(t, e, "sbx-orphan"); return sb.State == events.StateLost })
			eventually(t, 5*time.Second, "reap and lost records", func() bool {
				return len(records(t, e, KindReap)) == 1 && len(records(t, e, KindLost)) == 1
			})

			want := map[string]string{} // ce-id -> verdict of the forgeries
			if trusted == nil {
				// Signed by the reaper's key, claiming to be w1's exec.
				asWorker := forgedRecord(t, events.OpRecord{OpID: "forged-as-worker", Kind: events.OpExec, Phase: events.EventClosed,
					SandboxID: "sbx-expiring", Backend: "fake", Worker: "w1", StartedAt: now})
				if err := s.key.Sign(asWorker); err != nil {
					t.Fatal(err)
				}
				// Naming the reaper, signed by a key no reaper advertised.
				other, _ := recsign.NewKey(nil)
				asReaper := forgedRecord(t, events.OpRecord{OpID: "forged-as-reaper", Kind: KindReap, Phase: events.EventClosed,
					SandboxID: "sbx-expiring", Backend: "fake", Worker: recsign.ReaperWorker, StartedAt: now})
				if err := other.Sign(asReaper); err != nil {
					t.Fatal(err)
				}
				for _, m := range []*nats.Msg{asWorker, asReaper} {
					if _, err := e.js.PublishMsg(context.Background(), m); err != nil {
						t.Fatal(err)
					}
					want[m.Header.Get(events.HeaderCEID)] = auditor.SigUntrusted
				}
			}
			eventually(t, 10*time.Second, "records in the audit log", func() bool { return aud.Written() >= uint64(4+len(want)) })
			stopAuditor()

			raw, err := os.ReadFile(logPath)
			if err != nil {
				t.Fatal(err)
			}
			kinds := map[string]int{}
			sc := bufio.NewScanner(bytes.NewReader(raw))
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				var en auditor.Entry
				if err := json.Unmarshal(sc.Bytes(), &en); err != nil {
					t.Fatal(err)
				}
				if en.Type == auditor.TypeCheckpoint { // the auditor's, not a record
					continue
				}
				var rec events.OpRecord
				_ = json.Unmarshal(en.Record, &rec)
				if v, forged := want[en.ID]; forged {
					if en.Sig != v {
						t.Errorf("%s: sig %s (signer %s), want %s", en.ID, en.Sig, en.Signer, v)
					}
					delete(want, en.ID)
					continue
				}
				kinds[rec.Kind]++
				if en.Sig != auditor.SigOK || en.Signer != s.SigningKey() || rec.Worker != recsign.ReaperWorker {
					t.Errorf("reaper record %s: sig %s signer %s worker %s", en.ID, en.Sig, en.Signer, rec.Worker)
				}
			}
			if len(want) > 0 {
				t.Errorf("forged records not in the log: %v", want)
			}
			if kinds[KindReap] != 2 || kinds[KindLost] != 2 {
				t.Errorf("record phases by kind %v, want reap 2, lost 2", kinds)
			}
			rep, err := auditor.Verify(bytes.NewReader(raw))
			t.Logf("%s: %d lines, %d signed by a trusted key, %d not", mode, rep.Lines, rep.Signed, rep.UnverifiedCount)
			if trusted != nil && (err != nil || rep.UnverifiedCount != 0 || rep.Signed != 4) {
				t.Errorf("audit verify: %v (%+v)", err, rep)
			}
			if trusted == nil && (rep.Signed != 4 || rep.UnverifiedCount != 2 || rep.SignatureError() == nil) {
				t.Errorf("audit verify: %v (%+v)", err, rep)
			}
		})
	}
}

// forgedRecord builds a record message as a publisher of records does.
func forgedRecord(t *testing.T, rec events.OpRecord) *nats.Msg {
	t.Helper()
	data, _ := json.Marshal(rec)
	m, err := cemsg.Encode(events.OpsSubject(rec.Backend, rec.SandboxID, rec.Phase), cemsg.Envelope{
		ID: rec.OpID + "-" + rec.Phase, Type: events.TypeOpClosed, Source: "test", Subject: rec.SandboxID, Data: data})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestSigningSeedValidated: a seed that is not a user nkey seed is refused
// by New, and the error does not quote it.
func TestSigningSeedValidated(t *testing.T) {
	acc, _ := nkeys.CreateAccount()
	accSeed, _ := acc.Seed()
	for name, seed := range map[string][]byte{"account seed": accSeed, "garbage": []byte("SUNOTASEED")} {
		_, err := New(Config{SigningSeed: seed}, &nats.Conn{})
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if bytes.Contains([]byte(err.Error()), seed) {
			t.Errorf("%s: the error quotes the seed: %v", name, err)
		}
	}
}

// TestSweepSignsAndAdvertises: a one-off sweep (sandboxio reap: no Run, no
// sbx_reaper bucket yet) creates the bucket, advertises its key there, and
// signs its records with it.
func TestSweepSignsAndAdvertises(t *testing.T) {
	e := startEnv(t)
	old := time.Now().Add(-time.Hour)
	putSandbox(t, e, "sbx-orphan", "gone", time.Now().Add(time.Hour), old)
	s, err := New(Config{InstanceID: "one-off"}, e.nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := s.Sweep(ctx, false); err != nil {
		t.Fatal(err)
	}
	if sb, _ := getSandbox(t, e, "sbx-orphan"); sb.State != events.StateLost {
		t.Fatalf("sandbox %s after the sweep", sb.State)
	}
	kv, err := e.js.KeyValue(ctx, recsign.ReaperBucket)
	if err != nil {
		t.Fatal(err)
	}
	en, err := kv.Get(ctx, recsign.SignerKey(s.SigningKey()))
	if err != nil {
		t.Fatalf("advert: %v", err)
	}
	var a recsign.Advert
	if err := json.Unmarshal(en.Value(), &a); err != nil || !recsign.ValidAdvert(en.Key(), a) || a.Instance != "one-off" {
		t.Fatalf("advert %s: %+v %v", en.Value(), a, err)
	}
	st, err := e.js.Stream(ctx, events.StreamOps)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Fatalf("%d records, want the lost record's two phases", info.State.Msgs)
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if signer, err := recsign.Verify(m.Subject, m.Header, m.Data); err != nil || signer != s.SigningKey() {
			t.Errorf("record %d: signer %s, %v", seq, signer, err)
		}
	}
}
