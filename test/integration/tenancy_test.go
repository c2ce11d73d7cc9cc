package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/auth"
	"github.com/sandboxio/sandboxio/internal/authtest"
	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/services/auditor"
)

// These tests run the whole system on a real nats-server with the account
// layout of `sandboxio auth init` (internal/authtest): the services connect
// with their own users' creds, tenants A and B with theirs. They prove the
// claims of docs/security.md that need every part at once.

// tenantOps is every op a tenant could address at another tenant's
// sandbox, with a request naming sandbox id (and, where it takes one, a
// process or object of that sandbox's tenant).
func tenantOps(id, ownerTenant string) map[string]any {
	data := base64.StdEncoding.EncodeToString([]byte("x"))
	return map[string]any{
		events.OpGet:         events.GetRequest{SandboxID: id},
		events.OpExec:        events.ExecRequest{SandboxID: id, Cmd: []string{"echo", "hi"}},
		events.OpRunCode:     events.RunCodeRequest{SandboxID: id, Language: "python", Code: "1"},
		events.OpFilesWrite:  events.FilesWriteRequest{SandboxID: id, Path: "/work/x", Data: data},
		events.OpFilesRead:   events.FilesReadRequest{SandboxID: id, Path: "/work/x"},
		events.OpFilesList:   events.FilesListRequest{SandboxID: id, Path: "/work"},
		events.OpSignal:      events.SignalRequest{SandboxID: id, ProcessID: "p1", Signal: "TERM"},
		events.OpStdin:       events.StdinRequest{SandboxID: id, ProcessID: "p1", Data: "x"},
		events.OpSetTimeout:  events.SetTimeoutRequest{SandboxID: id, TimeoutS: 60},
		events.OpKill:        events.KillRequest{SandboxID: id},
		events.OpAttach:      events.AttachRequest{SandboxID: id, ProcessID: "p1", Nonce: events.NewID()},
		events.OpFilesGet:    events.FilesGetRequest{SandboxID: id, Name: events.FileObjectPrefix(ownerTenant, id) + "f1"},
		events.OpFilesPut:    events.FilesPutRequest{SandboxID: id, Name: events.FileObjectPrefix(ownerTenant, id) + "f1", Data: data},
		events.OpCodeContext: events.CodeContextRequest{SandboxID: id, ContextID: "c1", Action: events.ContextDelete},
		events.OpResize:      events.ResizeRequest{SandboxID: id, ProcessID: "p1", Rows: 24, Cols: 80},
		events.OpFilesWatch:  events.FilesWatchRequest{SandboxID: id, Path: "/work", TimeoutMS: 100},
	}
}

// TestTenantIsolation: every operation of tenant A on tenant B's sandbox is
// refused with SBX_E1402, the same answer as for a sandbox that does not
// exist, in N attempts each; list shows each tenant only its own; B's
// sandbox is untouched afterwards.
func TestTenantIsolation(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{Auth: true, Logger: testLogger()})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a, b := env.Client, env.TenantClient(authtest.TenantB)
	accA, accB := env.Auth.TenantAccount(authtest.TenantA), env.Auth.TenantAccount(authtest.TenantB)

	sbA, err := a.Create(ctx, events.CreateRequest{TimeoutS: 300, Owner: "someone-else"})
	if err != nil {
		t.Fatalf("create as A: %v", err)
	}
	sbB, err := b.Create(ctx, events.CreateRequest{TimeoutS: 300})
	if err != nil {
		t.Fatalf("create as B: %v", err)
	}
	got, err := a.Get(ctx, sbA.SandboxID)
	if err != nil || got.Tenant != accA || got.Owner != accA {
		t.Fatalf("A's sandbox: tenant %q owner %q (%v); want both %s: the server says who the caller is, not the body", got.Tenant, got.Owner, err, accA)
	}

	const n = 20
	nc := a.Conn()
	refused := 0
	for op, req := range tenantOps(sbB.SandboxID, accB) {
		for i := 0; i < n; i++ {
			err := rawCall(ctx, nc, op, req, nil)
			if !errors.Is(err, events.ErrForbidden) {
				t.Fatalf("%s by A on B's sandbox (attempt %d): want SBX_E1402, got %v", op, i+1, err)
			}
			refused++
		}
	}
	// A sandbox that does not exist gets the same answer.
	ghost := events.NewID()
	for op, req := range tenantOps(ghost, accA) {
		errGhost := rawCall(ctx, nc, op, req, nil)
		errOther := rawCall(ctx, nc, op, tenantOps(sbB.SandboxID, accB)[op], nil)
		var eg, eo *events.Error
		if !errors.As(errGhost, &eg) || !errors.As(errOther, &eo) || eg.Code != eo.Code ||
			strings.ReplaceAll(eg.Message, ghost, "X") != strings.ReplaceAll(eo.Message, sbB.SandboxID, "X") {
			t.Errorf("%s: a missing sandbox (%v) and another tenant's (%v) must be indistinguishable", op, errGhost, errOther)
		}
	}
	t.Logf("%d operations of tenant A on tenant B's sandbox, %d kinds × %d attempts: all refused with SBX_E1402", refused, len(tenantOps("x", "y")), n)

	// list: each sees only its own, whatever filter it asks for.
	for _, c := range []struct {
		name string
		cl   interface {
			List(context.Context, events.ListRequest) ([]events.Sandbox, error)
		}
		own string
	}{{"A", a, sbA.SandboxID}, {"B", b, sbB.SandboxID}} {
		for _, req := range []events.ListRequest{{}, {Owner: accA}, {Owner: accB}} {
			l, err := c.cl.List(ctx, req)
			if err != nil {
				t.Fatalf("list as %s: %v", c.name, err)
			}
			for _, s := range l {
				if s.SandboxID != c.own {
					t.Errorf("list as %s (filter %+v) shows %s", c.name, req, s.SandboxID)
				}
			}
		}
	}
	// B's sandbox still runs and B can use it.
	res, err := b.Exec(ctx, events.ExecRequest{SandboxID: sbB.SandboxID, Cmd: []string{"echo", "still here"}})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "still here" {
		t.Fatalf("B's sandbox after A's attempts: %v %+v", err, res)
	}

	// A's live output reaches A, and nothing of it reaches B (B may not
	// even subscribe to A's subjects: the server refuses).
	bConn := env.Auth.Connect(t, env.Auth.TenantCreds(authtest.TenantB))
	if _, err := bConn.Subscribe(events.LiveFilter(accA, sbA.SandboxID, "*"), func(*nats.Msg) {
		t.Error("tenant B received tenant A's output")
	}); err != nil {
		t.Fatal(err)
	}
	if !authtest.WaitDenied(bConn, events.LiveFilter(accA, sbA.SandboxID, "*"), 5*time.Second) {
		t.Error("B's subscription to A's live output was not refused")
	}
	p, err := a.Stream(ctx, events.ExecRequest{SandboxID: sbA.SandboxID, Cmd: []string{"drip", "5", "10"}})
	if err != nil {
		t.Fatalf("stream as A: %v", err)
	}
	lines := 0
	for c, err := range p.Chunks() {
		if err != nil {
			t.Fatalf("stream as A: %v", err)
		}
		lines += bytes.Count(c.Data, []byte("\n"))
	}
	if lines != 5 {
		t.Errorf("A's stream: %d lines, want 5", lines)
	}
	// A late attach (replay through the API) sees the whole output again.
	late, err := a.Attach(ctx, sbA.SandboxID, p.ProcessID)
	if err != nil {
		t.Fatalf("late attach as A: %v", err)
	}
	lines = 0
	for c, err := range late.Chunks() {
		if err != nil {
			t.Fatalf("late attach: %v", err)
		}
		lines += bytes.Count(c.Data, []byte("\n"))
	}
	if lines != 5 {
		t.Errorf("A's late attach: %d lines, want 5", lines)
	}
	// B cannot attach to A's process.
	if _, err := b.Attach(ctx, sbA.SandboxID, p.ProcessID); !errors.Is(err, events.ErrForbidden) {
		t.Errorf("B attaching to A's process: want SBX_E1402, got %v", err)
	}
}

// TestCanarySealedUnderServicesListener: a services-account user
// subscribed to every subject sees the canary secret nowhere in clear while
// a tenant creates a sandbox with it, uses it, and kills it; nor does any
// stream, bucket, object or log line hold it afterwards. The sandbox gets
// the value (its SHA-256 comes back).
func TestCanarySealedUnderServicesListener(t *testing.T) {
	logs := &logCapture{}
	env := sbxtest.Start(t, sbxtest.Options{Auth: true, Logger: logs.logger()})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	canary := "cnry" + events.NewID()
	needle := []byte(canary)
	var (
		mu      sync.Mutex
		seen    int
		inClear []string
	)
	spy := env.Auth.Connect(t, env.Auth.Creds(auth.RoleAdmin))
	if _, err := spy.Subscribe(">", func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		seen++
		hdr := ""
		for k, v := range m.Header {
			hdr += k + ":" + strings.Join(v, ",") + "\n"
		}
		if bytes.Contains(m.Data, needle) || strings.Contains(hdr, canary) || strings.Contains(m.Subject, canary) {
			inClear = append(inClear, m.Subject)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}

	for _, plain := range []bool{false, true} {
		cl := env.Client
		var reply *events.CreateReply
		var err error
		if plain {
			// A plain client that sends the secret in clear: the router seals
			// it before it leaves the router. (The request itself carried it
			// in clear inside the services account: docs/security.md says
			// so, and this test allows exactly that one subject.)
			var r events.CreateReply
			err = rawCall(ctx, cl.Conn(), events.OpCreate, events.CreateRequest{TimeoutS: 300,
				Secrets: map[string]string{"DB_PASSWORD": canary}}, &r)
			reply = &r
		} else {
			var sb *client.Sandbox
			if sb, err = cl.Create(ctx, events.CreateRequest{TimeoutS: 300, Secrets: map[string]string{"DB_PASSWORD": canary}}); err == nil {
				reply = &sb.CreateReply
			}
		}
		if err != nil {
			t.Fatalf("create (plain %v): %v", plain, err)
		}
		sum := sha256.Sum256(needle)
		res, err := cl.Exec(ctx, events.ExecRequest{SandboxID: reply.SandboxID, Cmd: []string{"env-sha256", "DB_PASSWORD"}})
		if err != nil || strings.TrimSpace(string(res.Stdout)) != hex.EncodeToString(sum[:]) {
			t.Fatalf("the secret did not reach the sandbox (plain %v): %v %+v", plain, err, res)
		}
		if _, err := cl.Exec(ctx, events.ExecRequest{SandboxID: reply.SandboxID, Cmd: []string{"nosuch-cmd"}}); !errors.Is(err, events.ErrExecFailed) {
			t.Fatalf("failing exec: %v", err)
		}
		if _, err := cl.Kill(ctx, reply.SandboxID); err != nil {
			t.Fatalf("kill: %v", err)
		}
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(env.Conn("inspector"))
	if err != nil {
		t.Fatal(err)
	}
	sbxtest.Eventually(t, 10*time.Second, func() bool { return streamMsgs(t, js, events.StreamCommands) == 0 },
		"SBX_CMD still holds commands")
	found, scanned := scanStreams(t, js, needle)
	for _, f := range found {
		t.Errorf("canary in %s", f)
	}
	for _, l := range linesWith(logs.Bytes(), needle) {
		t.Errorf("canary in a log line: %s", l)
	}
	mu.Lock()
	defer mu.Unlock()
	clear := 0
	for _, s := range inClear {
		if s == events.APISubject(events.OpCreate) {
			clear++
			continue
		}
		t.Errorf("canary in clear on %s", s)
	}
	if clear != 1 {
		t.Errorf("the plain client's create request carried the canary %d times on %s, want exactly 1", clear, events.APISubject(events.OpCreate))
	}
	t.Logf("a `>` listener with services credentials saw %d messages; the canary was in clear in %d of them "+
		"(the plain client's own request; 0 from the Go client); %d stream messages scanned, 0 hold it", seen, len(inClear), scanned)
}

// TestTenantQuota: the (N+1)-th sandbox of a tenant at its quota is refused
// with the retryable SBX_E1403 and nothing is created; another tenant is
// unaffected; a freed slot can be used again.
func TestTenantQuota(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{Auth: true, Logger: testLogger()})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 3
	tn := env.Auth.AddTenant(t, "tenant-q", events.TenantLimits{MaxSandboxes: n})
	admin := env.Conn("admin")
	putTenant(ctx, t, admin, events.TenantRecord{ID: tn.Account, Name: "tenant-q", Limits: events.TenantLimits{MaxSandboxes: n}})
	q := env.TenantClient("tenant-q")

	sbxtest.Eventually(t, 10*time.Second, func() bool {
		r, err := q.Quota(ctx)
		return err == nil && r.Limits.MaxSandboxes == n
	}, "the router never learnt tenant-q's quota")
	var ids []string
	for i := 0; i < n; i++ {
		r, err := q.Create(ctx, events.CreateRequest{TimeoutS: 300})
		if err != nil {
			t.Fatalf("create %d of %d: %v", i+1, n, err)
		}
		ids = append(ids, r.SandboxID)
	}
	chosen := events.NewID()
	_, err := q.Create(ctx, events.CreateRequest{TimeoutS: 300, SandboxID: chosen})
	var e *events.Error
	if !errors.Is(err, events.ErrQuotaExceeded) || !errors.As(err, &e) || !e.Retryable {
		t.Fatalf("create %d: want retryable SBX_E1403, got %v", n+1, err)
	}
	if _, err := env.Client.Get(ctx, chosen); err == nil {
		t.Errorf("the refused create made sandbox %s", chosen)
	}
	if l, _ := q.List(ctx, events.ListRequest{}); len(l) != n {
		t.Errorf("tenant-q has %d sandboxes, want %d", len(l), n)
	}
	// Another tenant is unaffected.
	other, err := env.TenantClient(authtest.TenantB).Create(ctx, events.CreateRequest{TimeoutS: 300})
	if err != nil {
		t.Fatalf("tenant B while tenant-q is at its quota: %v", err)
	}
	_ = other
	// A freed slot can be used again.
	if _, err := q.Kill(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	sbxtest.Eventually(t, 10*time.Second, func() bool {
		_, err := q.Create(ctx, events.CreateRequest{TimeoutS: 300})
		return err == nil
	}, "tenant-q could not create after freeing a slot")
	t.Logf("tenant-q at %d sandboxes: sandbox %d refused with SBX_E1403 (retryable); tenant B unaffected", n, n+1)
}

// putTenant stores a tenant's record as `sandboxio tenant add` does.
func putTenant(ctx context.Context, t *testing.T, nc *nats.Conn, rec events.TenantRecord) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, events.BucketTenants)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(rec)
	if _, err := kv.Put(ctx, rec.ID, b); err != nil {
		t.Fatal(err)
	}
}

// TestForgedRecordFlagged: a record published by a user who may publish to
// sbx.ops (the worker's credentials) but holds no worker key is flagged by
// `audit verify` with its line, while the genuine records verify.
func TestForgedRecordFlagged(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{Auth: true, Logger: testLogger()})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	signers, err := os.ReadFile(env.Auth.Layout.SignersFile())
	if err != nil {
		t.Fatal(err)
	}
	auditPath := filepath.Join(t.TempDir(), "audit.jsonl")
	_, audSvc := startAuditor(t, env.Conn(auth.RoleAuditor), auditor.Config{LogPath: auditPath, Logger: testLogger(),
		TrustedSigners: strings.Fields(string(signers))})
	sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 300})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.Kill(ctx, sb.SandboxID); err != nil {
		t.Fatal(err)
	}
	// The forger holds the worker's NATS credentials, not its signing key.
	forger := env.Auth.Connect(t, env.Auth.Creds(auth.RoleWorker))
	fjs, err := jetstream.New(forger)
	if err != nil {
		t.Fatal(err)
	}
	forged := events.OpRecord{OpID: events.NewID(), Kind: events.OpExec, Phase: events.EventClosed, SandboxID: sb.SandboxID,
		Backend: "fake", Worker: env.WorkerID, Outcome: events.OutcomeOK, StartedAt: time.Now().UTC()}
	data, _ := json.Marshal(forged)
	m := nats.NewMsg(events.OpsSubject("fake", sb.SandboxID, events.EventClosed))
	m.Data = data
	ceID := events.NewID()
	m.Header.Set(events.HeaderCEID, ceID)
	m.Header.Set(events.HeaderCEType, "io.sandboxio.v1.op.closed")
	m.Header.Set(events.HeaderCESource, "forger")
	m.Header.Set(events.HeaderCESpecVersion, "1.0")
	if _, err := fjs.PublishMsg(ctx, m); err != nil {
		t.Fatalf("publish forged record: %v", err)
	}
	js, err := jetstream.New(env.Conn("inspector"))
	if err != nil {
		t.Fatal(err)
	}
	waitAudited(t, env, js, auditPath, 30*time.Second)
	audSvc.stop(t)
	f, err := os.Open(auditPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := auditor.Verify(f)
	if err != nil || len(rep.Problems) != 0 {
		t.Fatalf("audit verify: the chain itself must be intact: %v %+v", err, rep.Problems)
	}
	if rep.UnverifiedCount != 1 || len(rep.Unverified) != 1 || rep.Unverified[0].ID != ceID {
		t.Fatalf("audit verify flagged %+v; want exactly the forged record %s", rep.Unverified, ceID)
	}
	t.Logf("audit verify: forged record flagged at line %d (%s); %d genuine records verified", rep.Unverified[0].Line,
		rep.Unverified[0].Sig, len(readAudit(t, auditPath))-1)
}
