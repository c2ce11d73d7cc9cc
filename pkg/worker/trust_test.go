package worker_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/sandboxio/sandboxio/internal/cemsg"
	"github.com/sandboxio/sandboxio/internal/recsign"
	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

// spy records every message on every subject, as a `>` subscriber on the
// bus sees it.
type spy struct {
	mu   sync.Mutex
	msgs []*nats.Msg
}

func startSpy(t *testing.T, nc *nats.Conn) *spy {
	t.Helper()
	s := &spy{}
	sub, err := nc.Subscribe(">", func(m *nats.Msg) {
		s.mu.Lock()
		s.msgs = append(s.msgs, m)
		s.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return s
}

// containing returns the messages whose subject, headers or body hold s.
func (s *spy) containing(needles ...string) []*nats.Msg {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*nats.Msg
	for _, m := range s.msgs {
		var hb strings.Builder
		for k, vs := range m.Header {
			hb.WriteString(k + ":" + strings.Join(vs, ",") + "\n")
		}
		for _, n := range needles {
			if strings.Contains(m.Subject, n) || strings.Contains(m.Reply, n) || strings.Contains(hb.String(), n) || bytes.Contains(m.Data, []byte(n)) {
				out = append(out, m)
				break
			}
		}
	}
	return out
}

func (s *spy) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.msgs)
}

func leaseOf(t *testing.T, ctx context.Context, js jetstream.JetStream, backend, workerID string) events.WorkerLease {
	t.Helper()
	kv, err := js.KeyValue(ctx, events.BucketWorkers)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, events.WorkerKey(backend, workerID))
	if err != nil {
		t.Fatal(err)
	}
	var l events.WorkerLease
	if err := json.Unmarshal(e.Value(), &l); err != nil {
		t.Fatal(err)
	}
	return l
}

func seal(t *testing.T, recipient string, secrets map[string]string) *events.SealedBox {
	t.Helper()
	sender, err := nkeys.CreateCurveKeys()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := sender.PublicKey()
	plain, _ := json.Marshal(secrets)
	sealed, err := sender.Seal(plain, recipient)
	if err != nil {
		t.Fatal(err)
	}
	return &events.SealedBox{Recipient: recipient, Sender: pub, Data: base64.StdEncoding.EncodeToString(sealed)}
}

// TestSealedSecretCanary: a secret sealed to the backend's key reaches the
// sandbox, and a `>` subscriber sees it in clear nowhere but in the output
// of the process that printed it (output is the caller's own data and is
// not rewritten); nor does any log line, stored record or registry entry.
func TestSealedSecretCanary(t *testing.T) {
	logs := &sbxtest.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	env := sbxtest.Start(t, sbxtest.Options{Logger: log})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nc := env.Conn("spy")
	sp := startSpy(t, nc)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	lease := leaseOf(t, ctx, js, "fake", env.WorkerID)
	if !nkeys.IsValidPublicCurveKey(lease.SealKey) || !nkeys.IsValidPublicUserKey(lease.SigningKey) {
		t.Fatalf("lease advertises seal key %q and signing key %q", lease.SealKey, lease.SigningKey)
	}
	const canary = "canary-7f3a9c1e5b2d4068"
	canaryB64 := base64.StdEncoding.EncodeToString([]byte(canary))
	sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 300,
		SealedSecrets: seal(t, lease.SealKey, map[string]string{"CANARY": canary})})
	if err != nil {
		t.Fatal(err)
	}
	res, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"env", "CANARY"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(res.Stdout)); got != canary {
		t.Fatalf("the sandbox got secret %q, want the canary", got)
	}
	// A failing exec whose error could echo the environment, then the kill.
	if _, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"no-such-command"}}); err == nil {
		t.Fatal("exec of a missing command succeeded")
	}
	if _, err := env.Client.Kill(ctx, sb.SandboxID); err != nil {
		t.Fatal(err)
	}
	// Every record of the sandbox is stored (3 operations × 2 phases, plus the kill).
	sbxtest.Eventually(t, 10*time.Second, func() bool { return len(opsRecords(t, ctx, js, sb.SandboxID)) >= 8 },
		"records of %s not stored", sb.SandboxID)

	var outputs int
	for _, m := range sp.containing(canary, canaryB64) {
		// The exec's reply, worker -> router -> client: the process's own
		// stdout, which the caller asked for.
		var r struct {
			Stdout string `json:"stdout"`
		}
		if strings.HasPrefix(m.Subject, "sbx.") || strings.HasPrefix(m.Subject, "$") ||
			json.Unmarshal(m.Data, &r) != nil || r.Stdout != canary+"\n" {
			t.Errorf("the canary is in clear on %s: %.300s", m.Subject, m.Data)
			continue
		}
		outputs++
	}
	if outputs == 0 {
		t.Errorf("the spy saw no exec reply with the output")
	}
	if strings.Contains(logs.String(), canary) || strings.Contains(logs.String(), canaryB64) {
		t.Errorf("the canary is in a log line")
	}
	// The stored copies: records, the registry entry, the command stream.
	for _, r := range opsRecords(t, ctx, js, sb.SandboxID) {
		if bytes.Contains(r.data, []byte(canary)) {
			t.Errorf("the canary is in record %s", r.data)
		}
	}
	t.Logf("spy saw %d messages; the canary in clear only in %d exec replies (the process's stdout)", sp.count(), outputs)
}

type storedRecord struct {
	subject string
	header  nats.Header
	data    []byte
	rec     events.OpRecord
}

// opsRecords returns the records of one sandbox stored in SBX_OPS (all
// records when sandboxID is "").
func opsRecords(t *testing.T, ctx context.Context, js jetstream.JetStream, sandboxID string) []storedRecord {
	t.Helper()
	filter := events.SubjectOpsAll
	if sandboxID != "" {
		filter = "sbx.ops.*." + sandboxID + ".*"
	}
	c, err := js.OrderedConsumer(ctx, events.StreamOps, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
	if err != nil {
		t.Fatal(err)
	}
	var out []storedRecord
	for {
		b, err := c.FetchNoWait(500)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range b.Messages() {
			n++
			var rec events.OpRecord
			_ = json.Unmarshal(m.Data(), &rec)
			out = append(out, storedRecord{subject: m.Subject(), header: m.Headers(), data: m.Data(), rec: rec})
		}
		if n == 0 {
			return out
		}
	}
}

// verifyRecord checks a stored record's signature (its own, or its
// batch's, ADR 17) against key.
func verifyRecord(r storedRecord, key string) error {
	if r.header.Get(events.HeaderSigner) != key {
		return fmt.Errorf("signer %q, want %q", r.header.Get(events.HeaderSigner), key)
	}
	_, err := recsign.Verify(r.subject, r.header, r.data)
	return err
}

// publishCreate puts a create command straight onto SBX_CMD, as anyone who
// may publish to sbx.cmd.> could, and waits for the worker's answer.
func publishCreate(t *testing.T, ctx context.Context, env *sbxtest.Env, nc *nats.Conn, js jetstream.JetStream, opID string, data []byte) (*events.CreateReply, *events.Error) {
	t.Helper()
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	m, err := cemsg.Encode(events.CreateSubject("fake"), cemsg.Envelope{ID: opID, Type: events.CommandType(events.OpCreate),
		Source: "test/attacker", ReplyTo: inbox, Data: data})
	if err != nil {
		t.Fatal(err)
	}
	env.SignCommand(m) // a compromised router: it holds the router's key
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	reply, err := sub.NextMsgWithContext(ctx)
	if err != nil {
		t.Fatalf("no answer to create %s: %v", opID, err)
	}
	if reply.Header.Get(events.HeaderServiceErrorCode) != "" {
		return nil, events.DecodeError(reply.Data)
	}
	var r events.CreateReply
	if err := json.Unmarshal(reply.Data, &r); err != nil {
		t.Fatal(err)
	}
	return &r, nil
}

// TestWorkerRefusesOutOfBoundsCreates: a create published straight onto
// SBX_CMD (a compromised router or worker credential) is re-checked by the
// worker: out of bounds it is refused with its code, recorded (signed),
// and nothing is created.
func TestWorkerRefusesOutOfBoundsCreates(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nc := env.Conn("attacker")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	lease := leaseOf(t, ctx, js, "fake", env.WorkerID)
	other, _ := nkeys.CreateCurveKeys()
	otherPub, _ := other.PublicKey()
	now := time.Now().UTC()
	good := func(id string) events.CreateCommand {
		return events.CreateCommand{SandboxID: id, Spec: events.ClassSpec{Name: "fake", Backend: "fake"},
			Request: events.CreateRequest{TimeoutS: 300}, Deadline: now.Add(300 * time.Second), Tenant: "ACCTENANTA"}
	}
	garbled := seal(t, lease.SealKey, map[string]string{"K": "v"})
	garbled.Data = base64.StdEncoding.EncodeToString([]byte("not a sealed box at all, just bytes"))
	// A box holding a JSON array instead of an object.
	sender, _ := nkeys.CreateCurveKeys()
	senderPub, _ := sender.PublicKey()
	arr, _ := sender.Seal([]byte(`["x"]`), lease.SealKey)
	notObject := &events.SealedBox{Recipient: lease.SealKey, Sender: senderPub, Data: base64.StdEncoding.EncodeToString(arr)}
	cases := []struct {
		name string
		mod  func(*events.CreateCommand)
		raw  []byte
		code events.Code
	}{
		{"malformed", nil, []byte(`{"sandbox_id":`), events.CodeInvalidRequest},
		{"invalid id", func(c *events.CreateCommand) { c.SandboxID = "Bad.ID>" }, nil, events.CodeInvalidID},
		{"other backend", func(c *events.CreateCommand) { c.Spec.Backend = "docker" }, nil, events.CodeInvalidValue},
		{"bad tenant", func(c *events.CreateCommand) { c.Tenant = "a.b.>" }, nil, events.CodeForbidden},
		{"no lifetime", func(c *events.CreateCommand) { c.Request.TimeoutS = 0 }, nil, events.CodeLifetimeRequired},
		{"lifetime too long", func(c *events.CreateCommand) { c.Request.TimeoutS = events.MaxLifetimeSeconds + 1 }, nil, events.CodeInvalidValue},
		{"no deadline", func(c *events.CreateCommand) { c.Deadline = time.Time{} }, nil, events.CodeInvalidValue},
		{"deadline passed", func(c *events.CreateCommand) { c.Deadline = now.Add(-time.Minute) }, nil, events.CodeInvalidValue},
		{"deadline in 2099", func(c *events.CreateCommand) { c.Deadline = time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC) }, nil, events.CodeInvalidValue},
		{"16 GiB memory", func(c *events.CreateCommand) { c.Request.Resources = &events.Resources{MemoryMB: 16 << 10} }, nil, events.CodeInvalidValue},
		{"100000 pids", func(c *events.CreateCommand) { c.Request.Resources = &events.Resources{PIDs: 100000} }, nil, events.CodeInvalidValue},
		{"class asks too much", func(c *events.CreateCommand) { c.Spec.Resources = &events.Resources{CPUs: 32} }, nil, events.CodeInvalidValue},
		{"sealed to another key", func(c *events.CreateCommand) {
			c.Request.SealedSecrets = seal(t, otherPub, map[string]string{"K": "v"})
		}, nil, events.CodeInvalidValue},
		{"sealed box garbled", func(c *events.CreateCommand) { c.Request.SealedSecrets = garbled }, nil, events.CodeInvalidValue},
		{"sealed box not an object", func(c *events.CreateCommand) { c.Request.SealedSecrets = notObject }, nil, events.CodeInvalidValue},
		{"sealed and clear", func(c *events.CreateCommand) {
			c.Request.SealedSecrets = seal(t, lease.SealKey, map[string]string{"K": "v"})
			c.Request.Secrets = map[string]string{"K": "clear-value"}
		}, nil, events.CodeInvalidValue},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := fmt.Sprintf("refused-%d", i)
			cmd := good(id)
			data := tc.raw
			if tc.mod != nil {
				tc.mod(&cmd)
				data, _ = json.Marshal(cmd)
			}
			opID := events.NewID()
			reply, e := publishCreate(t, ctx, env, nc, js, opID, data)
			if e == nil || e.Code != tc.code {
				t.Fatalf("answer %+v, %v; want %s", reply, e, tc.code)
			}
			// Recorded, signed, with the code; nothing created.
			var closed *storedRecord
			sbxtest.Eventually(t, 5*time.Second, func() bool {
				for _, r := range opsRecords(t, ctx, js, "") {
					if r.rec.OpID == opID && r.rec.Phase == events.EventClosed {
						closed = &r
						return true
					}
				}
				return false
			}, "no record of the refused create %s", opID)
			if closed.rec.Outcome != events.OutcomeError || closed.rec.ErrorCode != tc.code || closed.rec.Kind != events.OpCreate {
				t.Fatalf("record %+v", closed.rec)
			}
			if err := verifyRecord(*closed, lease.SigningKey); err != nil {
				t.Fatalf("record signature: %v", err)
			}
			if bytes.Contains(closed.data, []byte("clear-value")) {
				t.Fatalf("the refused command's secret is in its record: %s", closed.data)
			}
			for _, c := range env.Fake.CallsTo("Create") {
				if c.SandboxID == cmd.SandboxID {
					t.Fatalf("the backend was asked to create %s", c.SandboxID)
				}
			}
			if kv, err := js.KeyValue(ctx, events.BucketRegistry); err == nil && events.ValidID(cmd.SandboxID) {
				if _, err := kv.Get(ctx, cmd.SandboxID); !errors.Is(err, jetstream.ErrKeyNotFound) {
					t.Fatalf("registry entry for a refused create: %v", err)
				}
			}
		})
	}
	t.Logf("%d out-of-bounds creates refused, each recorded and signed, none created", len(cases))

	// In bounds, from a router that predates tenants and sealing: no
	// tenant, clear secrets. Accepted, as the open tenant.
	t.Run("old router", func(t *testing.T) {
		cmd := good("old-router")
		cmd.Tenant = ""
		cmd.Request.Secrets = map[string]string{"K": "old-secret-value"}
		data, _ := json.Marshal(cmd)
		if _, e := publishCreate(t, ctx, env, nc, js, events.NewID(), data); e != nil {
			t.Fatal(e)
		}
		// A sandbox of the open tenant: only an operator (a caller inside
		// the services account) reaches it when the deployment authenticates.
		op, err := client.New(env.Conn("operator"))
		if err != nil {
			t.Fatal(err)
		}
		defer op.Close()
		sb, err := op.Get(ctx, "old-router")
		if err != nil {
			t.Fatal(err)
		}
		if sb.Tenant != events.TenantOpen || !sb.HasSecrets {
			t.Fatalf("registry entry %+v", sb)
		}
		res, err := op.Exec(ctx, events.ExecRequest{SandboxID: "old-router", Cmd: []string{"env", "K"}})
		if err != nil || strings.TrimSpace(string(res.Stdout)) != "old-secret-value" {
			t.Fatalf("exec: %v %+v", err, res)
		}
	})
}

// TestWorkerLimitsFromConfig: the worker's own MaxLifetime and
// MaxResources bound creates and set_timeout, whatever the router allowed.
func TestWorkerLimitsFromConfig(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{Worker: func(c *worker.Config) {
		c.MaxLifetime = time.Hour
		c.MaxResources = events.Resources{MemoryMB: 512}
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 7200})
	if !errors.Is(err, events.ErrInvalidValue) {
		t.Fatalf("create of 2 h on a worker of 1 h: %v", err)
	}
	_, err = env.Client.Create(ctx, events.CreateRequest{TimeoutS: 60, Resources: &events.Resources{MemoryMB: 1024}})
	if !errors.Is(err, events.ErrInvalidValue) {
		t.Fatalf("create of 1 GiB on a worker of 512 MiB: %v", err)
	}
	// Default limits apply to the fields left zero.
	_, err = env.Client.Create(ctx, events.CreateRequest{TimeoutS: 60, Resources: &events.Resources{PIDs: events.DefaultMaxResources.PIDs + 1}})
	if !errors.Is(err, events.ErrInvalidValue) {
		t.Fatalf("create over the default pids limit: %v", err)
	}
	sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 60, Resources: &events.Resources{MemoryMB: 512}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.SetTimeout(ctx, sb.SandboxID, 2*time.Hour); !errors.Is(err, events.ErrInvalidValue) {
		t.Fatalf("set_timeout of 2 h on a worker of 1 h: %v", err)
	}
	if _, err := env.Client.SetTimeout(ctx, sb.SandboxID, 30*time.Minute); err != nil {
		t.Fatal(err)
	}
}

// TestConfigSeeds: given seeds give the advertised keys; a wrong seed is
// refused at New without quoting it.
func TestConfigSeeds(t *testing.T) {
	xk, _ := nkeys.CreateCurveKeys()
	xseed, _ := xk.Seed()
	xpub, _ := xk.PublicKey()
	uk, _ := nkeys.CreateUser()
	useed, _ := uk.Seed()
	upub, _ := uk.PublicKey()
	env := sbxtest.Start(t, sbxtest.Options{Worker: func(c *worker.Config) {
		c.SealSeed, c.SigningSeed = xseed, useed
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := jetstream.New(env.Conn("t"))
	if err != nil {
		t.Fatal(err)
	}
	if l := leaseOf(t, ctx, js, "fake", env.WorkerID); l.SealKey != xpub || l.SigningKey != upub {
		t.Fatalf("lease keys %s %s, want %s %s", l.SealKey, l.SigningKey, xpub, upub)
	}
	ak, _ := nkeys.CreateAccount()
	aseed, _ := ak.Seed()
	for name, cfg := range map[string]worker.Config{
		"seal seed is a user seed":    {SealSeed: useed},
		"signing seed is a curve key": {SigningSeed: xseed},
		"signing seed of an account":  {SigningSeed: aseed},
		"garbage":                     {SealSeed: []byte("SXnotaseed")},
		"the reaper's worker id":      {WorkerID: "reaper"},
	} {
		_, err := worker.New(cfg, env.Conn("x"), env.Fake)
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		for _, s := range [][]byte{useed, xseed, aseed} {
			if strings.Contains(err.Error(), string(s)) {
				t.Errorf("%s: the error quotes a seed", name)
			}
		}
	}
}

// TestSealedSecretRedactedFromRecords: the values of opened secrets are
// redacted from records exactly as clear secrets were.
func TestSealedSecretRedactedFromRecords(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := jetstream.New(env.Conn("t"))
	if err != nil {
		t.Fatal(err)
	}
	lease := leaseOf(t, ctx, js, "fake", env.WorkerID)
	const secret = "opened-secret-91c2"
	sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 300,
		SealedSecrets: seal(t, lease.SealKey, map[string]string{"TOKEN": secret})})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"echo", secret}}); err != nil {
		t.Fatal(err)
	}
	var execs []storedRecord
	sbxtest.Eventually(t, 5*time.Second, func() bool {
		execs = execs[:0]
		for _, r := range opsRecords(t, ctx, js, sb.SandboxID) {
			if r.rec.Kind == events.OpExec {
				execs = append(execs, r)
			}
		}
		return len(execs) == 2
	}, "exec records not stored")
	for _, r := range execs {
		if bytes.Contains(r.data, []byte(secret)) || r.rec.Summary["cmd"] != "echo [REDACTED]" {
			t.Fatalf("record %s", r.data)
		}
		if err := verifyRecord(r, lease.SigningKey); err != nil {
			t.Fatalf("signature: %v", err)
		}
	}
}

// TestNodeCommandsValidated: a node command published straight onto
// SBX_CMD is validated by the worker before it acts, and refused with a code.
func TestNodeCommandsValidated(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb := env.Create(ctx)
	nc := env.Conn("attacker")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		op   string
		data string
		code events.Code
	}{
		{events.OpExec, `{"sandbox_id":"` + sb.SandboxID + `","cmd":[]}`, events.CodeMissingField},
		{events.OpExec, `{"sandbox_id":"` + sb.SandboxID + `","cmd":["echo"],"timeout_ms":-5}`, events.CodeInvalidValue},
		{events.OpSignal, `{"sandbox_id":"` + sb.SandboxID + `","process_id":"p1","signal":"BOGUS"}`, events.CodeInvalidValue},
		{events.OpSetTimeout, `{"sandbox_id":"` + sb.SandboxID + `","timeout_s":999999}`, events.CodeInvalidValue},
		{events.OpFilesRead, `{"sandbox_id":"` + sb.SandboxID + `","path":""}`, events.CodeMissingField},
		{events.OpExec, `{"sandbox_id":"` + sb.SandboxID + `","cmd":["echo"],"surprise":1}`, events.CodeUnknownField},
	} {
		inbox := nats.NewInbox()
		sub, err := nc.SubscribeSync(inbox)
		if err != nil {
			t.Fatal(err)
		}
		m, _ := cemsg.Encode(events.NodeSubject("fake", env.WorkerID, events.Verb(tc.op)), cemsg.Envelope{ID: events.NewID(),
			Type: events.CommandType(tc.op), Source: "test/attacker", ReplyTo: inbox, Data: []byte(tc.data)})
		env.SignCommand(m) // a compromised router: it holds the router's key
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
		r, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			t.Fatalf("%s: no answer: %v", tc.op, err)
		}
		_ = sub.Unsubscribe()
		if e := events.DecodeError(r.Data); e == nil || e.Code != tc.code {
			t.Errorf("%s %s: answer %s, want %s", tc.op, tc.data, r.Data, tc.code)
		}
	}
	if n := len(env.Fake.CallsTo("Exec")); n != 0 {
		t.Fatalf("the backend ran %d execs", n)
	}
}
