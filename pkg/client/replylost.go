package client

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// Requests whose answer is lost. A router killed with SIGKILL loses its
// pending table (ADR 1), and a NATS node that dies drops the replies
// crossing it: the caller would wait for its own deadline and get a bare
// timeout. While a request waits, the client watches for the two faults it
// can see: its connection was re-established (a reply sent meanwhile was
// dropped), or a router instance that answered pings before the request
// stopped answering them. Either makes the request suspect:
//   - an idempotent request (reads, kill, set_timeout), and a create that
//     names its sandbox (ADR 37: a second one answers the sandbox the
//     first made), is sent again at once, within the caller's deadline, at
//     most maxResends times;
//   - any other request (exec, run_code, signal, stdin, writes) is
//     never sent again (ADR 2: an exec runs at most once) and keeps
//     waiting, since its router may be alive and still answer; if no answer
//     comes by the deadline, the caller gets SBX_E1623 ReplyLost, not
//     retryable (details.outcome "unknown": it may have run), instead of a bare timeout (it still matches context.DeadlineExceeded),
//     and the Exec/Create callers kill what it may have started.

// Defaults of the watch.
const (
	defaultLostCheck = time.Second     // first check after this long without an answer, then as often
	routerRefresh    = 2 * time.Second // the router instances known are refreshed this often while requests flow
	routerPingWait   = 150 * time.Millisecond
	routerPingQuiet  = 30 * time.Millisecond
	maxResends       = 3
)

// idempotent ops are safe to send twice.
var idempotent = map[string]bool{
	events.OpGet: true, events.OpList: true, events.OpKill: true, events.OpBackends: true,
	events.OpQuota: true, events.OpSetTimeout: true, events.OpFilesRead: true, events.OpFilesList: true,
	events.OpFilesGet: true, events.OpPortsList: true, events.OpPortsUnexpose: true,
}

// errSuspect cancels the wait of an idempotent request to send it again.
var errSuspect = errors.New("client: the reply may be lost")

// replyLostError is SBX_E1623; at the caller's deadline it also matches
// context.DeadlineExceeded.
type replyLostError struct {
	e        *events.Error
	deadline bool
}

func (r *replyLostError) Error() string { return r.e.Error() }
func (r *replyLostError) Unwrap() []error {
	if r.deadline {
		return []error{r.e, context.DeadlineExceeded}
	}
	return []error{r.e}
}

// replyLost is SBX_E1623 for op: retryable only when op is idempotent
// (an exec, create or write may have run: details.outcome "unknown"; the
// Create and Exec callers kill what it may have started).
func replyLost(op, why string, deadline bool) error {
	e := events.Errorf(events.CodeReplyLost, "%s: no answer: %s", op, why).With("op", op)
	if !idempotent[op] {
		e = e.With("outcome", "unknown")
		e.Retryable = false
	}
	return &replyLostError{e: e, deadline: deadline}
}

// lostWatch watches one request for a fault that loses its reply.
type lostWatch struct {
	c          *Client
	sent       time.Time
	reconnects uint64
	onSuspect  func() // called once, under mu

	mu   sync.Mutex
	t    *time.Timer
	done bool
	why  string
}

func (c *Client) watchRequest(onSuspect func()) *lostWatch {
	w := &lostWatch{c: c, sent: time.Now(), reconnects: c.nc.Stats().Reconnects, onSuspect: onSuspect}
	c.routers.maybeRefresh(c)
	w.mu.Lock()
	w.t = time.AfterFunc(c.lostCheck, w.check)
	w.mu.Unlock()
	return w
}

func (w *lostWatch) check() {
	why := w.c.lossSince(w.sent, w.reconnects)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return
	}
	if why != "" {
		w.why = why
		if w.onSuspect != nil {
			w.onSuspect()
		}
		return
	}
	w.t.Reset(w.c.lostCheck)
}

// stop ends the watch and says why the reply may be lost ("" if nothing
// was seen).
func (w *lostWatch) stop() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
	w.t.Stop()
	return w.why
}

// lossSince says what may have lost the reply of a request sent at sent.
func (c *Client) lossSince(sent time.Time, reconnects uint64) string {
	if c.nc.Stats().Reconnects != reconnects {
		return "the connection to NATS was re-established while the request waited (a reply sent meanwhile is dropped)"
	}
	if id := c.routers.goneSince(c, sent); id != "" {
		return "router instance " + id + " while the request waited"
	}
	return ""
}

// routerSet is what the client knows of the router instances: those the
// last ping found, and those that answered a ping once and not the next.
type routerSet struct {
	last       atomic.Int64 // unix nanoseconds of the last ping sent
	refreshing atomic.Bool

	mu      sync.Mutex
	alive   map[string]time.Time // instance id → last ping it answered
	started map[string]time.Time // instance id → when it started (alive ones)
	gone    map[string]time.Time // instance id → last time it was seen alive
}

// maybeRefresh pings the routers in the background when the last ping is
// older than routerRefresh, so that a request has a baseline from before
// it was sent.
func (s *routerSet) maybeRefresh(c *Client) {
	if time.Since(time.Unix(0, s.last.Load())) < routerRefresh || !s.refreshing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer s.refreshing.Store(false)
		s.refresh(c, routerAskWait)
	}()
}

// refresh pings the routers once and updates the sets. A ping nobody
// answers changes nothing. A client that does not know yet who it is asks
// first, within ask (mayPingRouters).
func (s *routerSet) refresh(c *Client, ask time.Duration) {
	s.last.Store(time.Now().UnixNano())
	if !c.mayPingRouters(ask) {
		return
	}
	ids := pingRouters(c.nc)
	if len(ids) == 0 {
		return
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.alive == nil {
		s.alive, s.gone, s.started = map[string]time.Time{}, map[string]time.Time{}, map[string]time.Time{}
	}
	for id, seen := range s.alive {
		if _, ok := ids[id]; !ok {
			s.gone[id] = seen
			delete(s.alive, id)
		}
	}
	for id, started := range ids {
		s.alive[id] = now
		s.started[id] = started
		delete(s.gone, id)
	}
	for id := range s.started {
		if _, ok := s.alive[id]; !ok {
			delete(s.started, id)
		}
	}
	for id, seen := range s.gone {
		if now.Sub(seen) > time.Minute {
			delete(s.gone, id)
		}
	}
}

// goneSince pings the routers and names one that was alive shortly before
// sent (within one refresh period) and no longer answers, or one that
// started after sent: it replaced one (a restart), or joined (a false
// alarm, which costs an idempotent request a resend and nothing else).
// The second covers a router that died before any ping saw it.
func (s *routerSet) goneSince(c *Client, sent time.Time) string {
	s.refresh(c, routerAskWaitCheck)
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, seen := range s.gone {
		if seen.After(sent.Add(-2 * routerRefresh)) {
			return id + " (stopped)"
		}
	}
	for id, started := range s.started {
		if started.After(sent) {
			return id + " (started after the request: another may have stopped)"
		}
	}
	return ""
}

// mayPingRouters: a tenant may not publish to $SRV subjects (its ping
// would be a permissions violation on its connection, printed every two
// seconds in every tenant's process), so a client the deployment has called
// a tenant does not ping and sees only its own reconnects. A client that
// does not know yet asks first, within wait (the answer is kept; a
// tenant's router answers whenever it is up); one that still does not know
// pings, as one that is open does.
func (c *Client) mayPingRouters(wait time.Duration) bool {
	c.mu.Lock()
	s := c.sess
	c.mu.Unlock()
	if !s.known {
		// Called from the connection watch, which has no caller: bounded by wait.
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		s = c.askSession(ctx, false)
	}
	return !s.known || s.tenant == events.TenantOpen
}

// How long a router refresh waits to learn who the caller is: in the
// background, and while a request waits (a check must not hold up the
// next one long).
const (
	routerAskWait      = 2 * time.Second
	routerAskWaitCheck = 250 * time.Millisecond
)

// pingRouters asks every instance of the router's micro service for its id
// and start time ($SRV.STATS: PING has no start time).
func pingRouters(nc *nats.Conn) map[string]time.Time {
	inbox := nc.NewInbox()
	ch := make(chan *nats.Msg, 64)
	sub, err := nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest("$SRV.STATS."+events.ServiceName, inbox, nil); err != nil {
		return nil
	}
	ids := map[string]time.Time{}
	end := time.NewTimer(routerPingWait)
	defer end.Stop()
	quiet := time.NewTimer(routerPingWait)
	defer quiet.Stop()
	for {
		select {
		case m := <-ch:
			var p struct {
				ID      string    `json:"id"`
				Started time.Time `json:"started"`
			}
			if json.Unmarshal(m.Data, &p) == nil && p.ID != "" {
				ids[p.ID] = p.Started
			}
			quiet.Reset(routerPingQuiet)
		case <-quiet.C:
			return ids
		case <-end.C:
			return ids
		}
	}
}
