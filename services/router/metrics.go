package router

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// maxOpenCalls bounds the calls whose outcome the router is waiting to
// see (a call answered outside its handler is matched by its reply
// subject); past it, a call is counted but its outcome is not.
const maxOpenCalls = 1 << 16

// openCallTTL is how long an unanswered call is remembered.
const openCallTTL = 15 * time.Minute

// outcomes counts every client call by op and its outcome: answered ok,
// or failed with which SBX code, and how long the answer took. It sees
// every answer, those sent in the micro handler and those sent after it
// (forwarded ops, async replies), which is what `nats micro stats` cannot.
type outcomes struct {
	reg     *prometheus.Registry
	calls   *prometheus.CounterVec
	errors  *prometheus.CounterVec
	latency *prometheus.HistogramVec

	mu   sync.Mutex
	open map[string]openCall // reply subject -> call
}

type openCall struct {
	op    string
	start time.Time
}

func newOutcomes() *outcomes {
	o := &outcomes{
		reg: prometheus.NewRegistry(),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandboxio_router_calls_total",
			Help: "Client API calls received, by op."}, []string{"op"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandboxio_router_errors_total",
			Help: "Client API calls answered with an error, by op and SBX code."}, []string{"op", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sandboxio_router_call_duration_seconds",
			Help:    "Time from a client call to its answer (for a streamed exec: to the process's start), by op and outcome (ok or error).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}}, []string{"op", "outcome"}),
		open: make(map[string]openCall),
	}
	o.reg.MustRegister(o.calls, o.errors, o.latency)
	return o
}

// handler serves the metrics in the Prometheus text format.
func (o *outcomes) handler() http.Handler {
	return promhttp.HandlerFor(o.reg, promhttp.HandlerOpts{})
}

// begin counts a call and remembers it until its answer; the returned
// request records an answer given in the handler.
func (o *outcomes) begin(op string, req micro.Request) micro.Request {
	o.calls.WithLabelValues(op).Inc()
	reply := req.Reply()
	if reply == "" {
		return req
	}
	now := time.Now()
	o.mu.Lock()
	if len(o.open) >= maxOpenCalls {
		for k, c := range o.open {
			if now.Sub(c.start) > openCallTTL {
				delete(o.open, k)
			}
		}
	}
	if len(o.open) < maxOpenCalls {
		o.open[reply] = openCall{op: op, start: now}
	}
	o.mu.Unlock()
	return trackedRequest{Request: req, o: o}
}

// end records the answer to the call whose reply subject is to; code ""
// is success. An answer to no remembered call is ignored.
func (o *outcomes) end(to string, code events.Code) {
	o.mu.Lock()
	c, ok := o.open[to]
	delete(o.open, to)
	o.mu.Unlock()
	if !ok {
		return
	}
	outcome := "ok"
	if code != "" {
		outcome = "error"
		o.errors.WithLabelValues(c.op, string(code)).Inc()
	}
	o.latency.WithLabelValues(c.op, outcome).Observe(time.Since(c.start).Seconds())
}

// endMsg records a reply message (a relayed worker reply).
func (o *outcomes) endMsg(to string, m *nats.Msg) {
	o.end(to, headerCode(m.Header.Get(events.HeaderServiceErrorCode)))
}

func headerCode(v string) events.Code {
	if v == "" {
		return ""
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return events.CodeInternal
	}
	return events.CodeFromNumber(n)
}

// trackedRequest records the answer given through the request itself.
type trackedRequest struct {
	micro.Request
	o *outcomes
}

func (r trackedRequest) Respond(b []byte, opts ...micro.RespondOpt) error {
	r.o.end(r.Reply(), "")
	return r.Request.Respond(b, opts...)
}

func (r trackedRequest) RespondJSON(v any, opts ...micro.RespondOpt) error {
	r.o.end(r.Reply(), "")
	return r.Request.RespondJSON(v, opts...)
}

func (r trackedRequest) Error(code, description string, data []byte, opts ...micro.RespondOpt) error {
	r.o.end(r.Reply(), headerCode(code))
	return r.Request.Error(code, description, data, opts...)
}

// MetricsHandler serves the router's outcome metrics (calls, errors by SBX
// code, latency, by op) in the Prometheus text format, for /metrics.
func (s *Service) MetricsHandler() http.Handler { return s.outcomes.handler() }

func errCode(e *events.Error) events.Code {
	if e == nil {
		return ""
	}
	return e.Code
}
