package gateway

import (
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the gateway's Prometheus series. Only sandboxes and ports
// that the registry holds ever become label values (a URL's made-up id
// counts in unrouted), and a sandbox's series are deleted when it leaves
// the registry, so the label sets stay bounded by live sandboxes.
type metrics struct {
	reg         *prometheus.Registry
	requests    *prometheus.CounterVec // sandbox_id, port, status
	bytes       *prometheus.CounterVec // sandbox_id, port, direction
	credentials *prometheus.CounterVec // sandbox_id, port, kind, outcome
	unrouted    prometheus.Counter
	inflight    prometheus.Gauge
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandboxio_gateway_requests_total",
			Help: "Requests to a published port, by sandbox, port and the status answered (101 for an upgrade)."},
			[]string{"sandbox_id", "port", "status"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandboxio_gateway_bytes_total",
			Help: "Bytes carried to (in) and from (out) a sandbox's port, headers included, by sandbox and port."},
			[]string{"sandbox_id", "port", "direction"}),
		credentials: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandboxio_gateway_credentials_total",
			Help: "Credential checks of private ports, by sandbox, port, kind (token, link, cookie, none) and outcome (ok, refused)."},
			[]string{"sandbox_id", "port", "kind", "outcome"}),
		unrouted: prometheus.NewCounter(prometheus.CounterOpts{Name: "sandboxio_gateway_not_found_total",
			Help: "Requests answered 404: no running sandbox publishes the port they name (or they name none)."}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sandboxio_gateway_inflight",
			Help: "Requests and upgraded connections being carried now."}),
	}
	m.reg.MustRegister(m.requests, m.bytes, m.credentials, m.unrouted, m.inflight)
	return m
}

func (m *metrics) handler() http.Handler { return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}) }

func (m *metrics) request(id string, port, status int) {
	m.requests.WithLabelValues(id, strconv.Itoa(port), strconv.Itoa(status)).Inc()
}

func (m *metrics) credential(id string, port int, kind, outcome string) {
	m.credentials.WithLabelValues(id, strconv.Itoa(port), kind, outcome).Inc()
}

// byteCounters returns the in and out counters of a sandbox's port.
func (m *metrics) byteCounters(id string, port int) (in, out prometheus.Counter) {
	p := strconv.Itoa(port)
	return m.bytes.WithLabelValues(id, p, "in"), m.bytes.WithLabelValues(id, p, "out")
}

// forget deletes a sandbox's series.
func (m *metrics) forget(id string) {
	l := prometheus.Labels{"sandbox_id": id}
	m.requests.DeletePartialMatch(l)
	m.bytes.DeletePartialMatch(l)
	m.credentials.DeletePartialMatch(l)
}
