package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
)

// TestRecordHasNetworkPolicy: the network policy in effect is part of the
// sandbox's record (the requested one when the backend reports none; deny
// when none was asked).
func TestRecordHasNetworkPolicy(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cases := []struct {
		name string
		req  *events.NetworkPolicy
		want string
	}{
		{"none asked", nil, events.EgressDeny},
		{"allow", &events.NetworkPolicy{Egress: events.EgressAllow}, events.EgressAllow},
	}
	for _, c := range cases {
		reply, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 60, Network: c.req})
		if err != nil {
			t.Fatalf("%s: create: %v", c.name, err)
		}
		rec, err := env.Client.Get(ctx, reply.SandboxID)
		if err != nil {
			t.Fatalf("%s: get: %v", c.name, err)
		}
		if rec.Network == nil || rec.Network.Egress != c.want {
			t.Errorf("%s: record network %+v, want egress %s", c.name, rec.Network, c.want)
		}
	}
}
