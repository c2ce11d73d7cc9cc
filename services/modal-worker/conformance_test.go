package modalworker_test

import (
	"testing"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker/workertest"
	"github.com/sandboxio/sandboxio/services/modal-worker/modalfake"
)

// TestConformance runs the backend conformance suite against the fake
// Modal, through our Modal client, the runtime, the router and the Go
// client. The capability differences (no set_timeout, no signals but KILL,
// no run_code, no pause) are declared and checked by the suite.
func TestConformance(t *testing.T) {
	srv := startFake(t, modalfake.Options{})
	b := newBackend(t, srv, nil)
	workertest.Run(t, b, modalCommands, workertest.Options{Routing: routing,
		Unsupported: []events.Capability{events.CapSetTimeout, events.CapSignal, events.CapRunCode, events.CapStatefulCode, events.CapPause}})
}

// modalCommands are the shell probes for Modal. One differs from
// workertest.ShellCommands, for hosts where the fake cannot jail processes
// (modalfake.JailNone: they run on the host in a directory that stands for
// the sandbox's "/", and pwd prints <dir>/tmp): the Pwd probe strips that
// prefix, found from $HOME (<dir>/root). In a jail and on Modal HOME is
// /root, the prefix is empty and the probe is plain pwd.
var modalCommands = func() workertest.Commands {
	c := workertest.ShellCommands
	c.Pwd = pwdProbe
	return c
}()

var pwdProbe = []string{"sh", "-c", `r=${HOME%/root}; p=$(pwd -P); printf '%s\n' "${p#"$r"}"`}

// jailed reports whether the fake's processes and its files API see the
// same paths; when not, the test says so and skips only the checks that
// need it.
func jailed(t *testing.T) bool {
	if modalfake.DetectJail() == modalfake.JailNone {
		t.Log("modalfake has no jail on this host (no mount or user namespaces): checks that need processes and the files API to share paths are skipped")
		return false
	}
	return true
}
