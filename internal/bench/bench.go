package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// opTimeout bounds any one operation of a series.
const opTimeout = 30 * time.Second

// bench is one run's connections, floor responder and sandboxes.
type bench struct {
	cfg     Config
	report  *Report
	conns   []*nats.Conn
	clients []*client.Client
	echoNC  *nats.Conn // the floor responder's own connection
	echoSub *nats.Subscription
	echo    string // the responder's subject, on its own inbox
	// pingOK: the router answers a micro PING on these credentials (a
	// tenant may not publish to $SRV); else the floor is the bare
	// request/reply alone.
	pingOK bool

	mu      sync.Mutex
	created map[string]bool // sandboxes to kill at the end
}

func newBench(ctx context.Context, cfg Config, r *Report) (*bench, error) {
	b := &bench{cfg: cfg, report: r, created: map[string]bool{}}
	for i := range cfg.Conns {
		nc, err := cfg.Dial(ctx, "sandboxio-bench-"+strconv.Itoa(i))
		if err != nil {
			b.close()
			return nil, err
		}
		b.conns = append(b.conns, nc)
		cl, err := client.New(nc)
		if err != nil {
			b.close()
			return nil, err
		}
		b.clients = append(b.clients, cl)
	}
	r.Server = b.conns[0].ConnectedServerName() + " " + b.conns[0].ConnectedServerVersion()
	nc, err := cfg.Dial(ctx, "sandboxio-bench-floor")
	if err != nil {
		b.close()
		return nil, err
	}
	b.echoNC = nc
	b.echo = nc.NewRespInbox()
	b.echoSub, err = nc.Subscribe(b.echo, func(m *nats.Msg) { _ = m.Respond(echoReply) })
	if err == nil {
		err = nc.Flush()
	}
	if err != nil {
		b.close()
		return nil, fmt.Errorf("bench: floor responder: %w", err)
	}
	if err := b.probeFloor(ctx); err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

// probeFloor checks, within seconds, that the bare request/reply works and
// whether the micro PING does.
func (b *bench) probeFloor(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := b.bare(pctx, b.conns[0], nil); err != nil {
		return fmt.Errorf("bench: no answer from bench's own responder (may these credentials use their inbox?): %w", err)
	}
	b.pingOK = b.ping(pctx, b.conns[0]) == nil
	if !b.pingOK {
		b.report.Notes = append(b.report.Notes, "no answer to a micro PING ($SRV.PING."+events.ServiceName+") with these credentials: the floor is the bare request/reply")
	}
	return nil
}

// floorName and floor are the floor beside create and live: the micro PING
// when it answers, else the bare request/reply.
func (b *bench) floorName() string {
	if b.pingOK {
		return "floor ping"
	}
	return "floor request/reply"
}

func (b *bench) floor(ctx context.Context, nc *nats.Conn) error {
	if b.pingOK {
		return b.ping(ctx, nc)
	}
	return b.bare(ctx, nc, nil)
}

var echoReply = []byte(`{"exit_code":0}`)

// close kills what bench created (bounded), then closes its connections.
func (b *bench) close() {
	// Teardown after the run's context may have ended; killAll bounds itself.
	b.killAll(context.Background())
	if b.echoSub != nil {
		_ = b.echoSub.Unsubscribe()
	}
	for _, nc := range append(b.conns, b.echoNC) {
		if nc != nil {
			nc.Close()
		}
	}
}

// ---- floor ----

// ping is one micro PING round trip to the router.
func (b *bench) ping(ctx context.Context, nc *nats.Conn) error {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	_, err := nc.RequestWithContext(ctx, "$SRV.PING."+events.ServiceName, nil)
	return err
}

// bare is one request/reply to bench's own responder, carrying data.
func (b *bench) bare(ctx context.Context, nc *nats.Conn, data []byte) error {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	_, err := nc.RequestWithContext(ctx, b.echo, data)
	return err
}

// pause waits d (think time between operations, --pause) or until ctx is
// done.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// ---- sandboxes ----

func (b *bench) client(i int) *client.Client { return b.clients[i%len(b.clients)] }

// cmdFor is the command exec runs in a sandbox of class.
func (b *bench) cmdFor(class string) []string {
	if len(b.cfg.Cmd) > 0 {
		return b.cfg.Cmd
	}
	if class == "fake" {
		return []string{"echo", "hi"}
	}
	return []string{"true"}
}

func (b *bench) create(ctx context.Context, cl *client.Client, class string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	id := events.NewID()
	b.track(id, true)
	r, err := cl.Create(ctx, events.CreateRequest{SandboxID: id, Class: class, TimeoutS: b.cfg.SandboxTimeout,
		Metadata: map[string]string{"sandboxio-bench": "1"}})
	if err != nil {
		return "", err
	}
	return r.SandboxID, nil
}

func (b *bench) kill(ctx context.Context, cl *client.Client, id string) error {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	_, err := cl.Kill(ctx, id)
	if err == nil || errors.Is(err, events.ErrSandboxNotFound) || errors.Is(err, events.ErrSandboxGone) {
		b.track(id, false)
	}
	return err
}

func (b *bench) track(id string, on bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if on {
		b.created[id] = true
	} else {
		delete(b.created, id)
	}
}

// killAll kills every sandbox bench created and has not killed, Parallel
// at a time, within a minute whatever ctx says.
func (b *bench) killAll(ctx context.Context) {
	if len(b.clients) == 0 {
		return
	}
	b.mu.Lock()
	ids := make([]string, 0, len(b.created))
	for id := range b.created {
		ids = append(ids, id)
	}
	b.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	b.parallel(ctx, len(ids), b.cfg.Parallel, func(ctx context.Context, i int) error {
		return b.kill(ctx, b.client(i), ids[i])
	})
}

// parallel runs f for 0..n-1 with at most k at once; it stops starting new
// ones when ctx ends, and returns the first error.
func (b *bench) parallel(ctx context.Context, n, k int, f func(ctx context.Context, i int) error) error {
	sem := make(chan struct{}, max(k, 1))
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for i := 0; i < n && ctx.Err() == nil; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := f(ctx, i); err != nil {
				once.Do(func() { first = err })
			}
		}()
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

// execRequest is the encoded non-streamed exec request of cmd in sandbox.
func execRequest(sandbox string, cmd []string) []byte {
	data, _ := json.Marshal(events.ExecRequest{SandboxID: sandbox, Cmd: cmd})
	return data
}

// execRaw is one non-streamed exec as a stock NATS client makes it: one
// request with a prepared body, the reply's error headers read, the exit
// code checked.
func execRaw(ctx context.Context, nc *nats.Conn, data []byte) error {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	resp, err := nc.RequestWithContext(ctx, execSubject, data)
	if err != nil {
		return err
	}
	if code := resp.Header.Get(events.HeaderServiceErrorCode); code != "" {
		if e := events.DecodeError(resp.Data); e != nil {
			return e
		}
		n, _ := strconv.Atoi(code)
		return events.Errorf(events.CodeFromNumber(n), "%s", resp.Header.Get(events.HeaderServiceError))
	}
	var res struct {
		ExitCode *int `json:"exit_code"`
	}
	if err := json.Unmarshal(resp.Data, &res); err != nil || res.ExitCode == nil || *res.ExitCode != 0 {
		return fmt.Errorf("bench: unexpected exec reply %.200q", resp.Data)
	}
	return nil
}

var execSubject = events.APISubject(events.OpExec)
