package failover

import (
	"testing"

	"github.com/sandboxio/sandboxio/internal/cutproxy"
)

// cutter is a TCP proxy between one process and NATS. Cutting it closes
// its connections and refuses new ones: the process is cut off from NATS
// (the rest of the system is not), as a network partition would do to it.
type cutter struct{ *cutproxy.Proxy }

func newCutter(t *testing.T, to string) *cutter {
	t.Helper()
	p, err := cutproxy.New(to)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return &cutter{p}
}

// URL is the proxy's NATS URL.
func (k *cutter) URL() string { return "nats://" + k.Addr() }
