package authtest

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandboxio/sandboxio/internal/auth"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestTunnelsOnlyBetweenGatewaysAndWorkers: a connection to a sandbox's
// port crosses the bus between a gateway and a worker only; the router,
// the auditor and the reaper can neither read its frames nor inject any.
func TestTunnelsOnlyBetweenGatewaysAndWorkers(t *testing.T) {
	env := Start(t)
	gw := env.Connect(t, env.Creds(auth.RoleGateway))
	wk := env.Connect(t, env.Creds(auth.RoleWorker))
	gwSubject := events.TunnelGatewaySubject("g1", "c1")
	gwSub, err := gw.SubscribeSync(events.SubjectTunnelGatewayPrefix + "g1.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, role := range []string{auth.RoleRouter, auth.RoleAuditor, auth.RoleReaper} {
		t.Run(role, func(t *testing.T) {
			nc := env.Connect(t, env.Creds(role))
			spy, err := nc.SubscribeSync(events.SubjectTunnelAll)
			if err != nil {
				t.Fatal(err)
			}
			_ = nc.Flush()
			if err := wk.Publish(gwSubject, []byte("frame")); err != nil {
				t.Fatal(err)
			}
			_ = wk.Flush()
			if _, err := gwSub.NextMsg(5 * time.Second); err != nil {
				t.Fatalf("the gateway did not get the worker's frame: %v", err)
			}
			if m, err := spy.NextMsg(300 * time.Millisecond); err == nil {
				t.Errorf("%s read a tunnel frame on %s", role, m.Subject)
			}
			_ = nc.Publish(gwSubject, []byte("injected"))
			_ = nc.Flush()
			if m, err := gwSub.NextMsg(300 * time.Millisecond); err == nil {
				t.Errorf("%s injected a frame the gateway got: %q", role, m.Data)
			} else if err != nats.ErrTimeout {
				t.Fatal(err)
			}
		})
	}
}
