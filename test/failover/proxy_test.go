package failover

import (
	"testing"

	"github.com/sandboxio/sandboxio/internal/cutproxy"
)

// cutter is a TCP proxy between one process and NATS. Cutting it closes
// its connections and refuses new ones: the process is cut off from NATS
// (the rest of the system is not), as a network partition would do to it.
// The partition scenario's fallback where no network namespace can be made.
type cutter struct {
	*cutproxy.Proxy
	why string // why not a network namespace
}

func newCutter(t *testing.T, to string) *cutter {
	t.Helper()
	p, err := cutproxy.New(to)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return &cutter{Proxy: p}
}

// URL is the proxy's NATS URL.
func (k *cutter) URL() string { return "nats://" + k.Addr() }

func (k *cutter) wrap() []string { return nil }

func (k *cutter) cut(_ *testing.T, on bool) { k.SetCut(on) }

func (k *cutter) String() string {
	return "TCP proxy closing the worker's connections and refusing new ones (no network namespace: " + k.why + ")"
}
