package authtest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/auth"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestGatewayReadsOnlyTheRegistry: the internet-facing gateway watches the
// registry as services/gateway does (KeyValue, then WatchAll) and sees a
// sandbox's published ports, with no permission violation; it cannot read
// any other stream (snapshots, files, output, records) nor pull commands
// off SBX_CMD.
func TestGatewayReadsOnlyTheRegistry(t *testing.T) {
	env := Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	wjs, err := jetstream.New(env.Connect(t, env.Creds(auth.RoleWorker)))
	if err != nil {
		t.Fatal(err)
	}
	wkv, err := wjs.KeyValue(ctx, events.BucketRegistry)
	if err != nil {
		t.Fatal(err)
	}
	put := func(id string, port int) {
		t.Helper()
		b, _ := json.Marshal(events.Sandbox{SandboxID: id, State: events.StateRunning,
			Ports: []events.PortExposure{{Port: port, Access: events.PortPublic}}})
		if _, err := wkv.Put(ctx, id, b); err != nil {
			t.Fatal(err)
		}
	}
	put("sb1", 8000)

	gw := env.Connect(t, env.Creds(auth.RoleGateway))
	gjs, err := jetstream.New(gw)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := gjs.KeyValue(ctx, events.BucketRegistry)
	if err != nil {
		t.Fatalf("the gateway opens the registry: %v", err)
	}
	kw, err := kv.WatchAll(ctx)
	if err != nil {
		t.Fatalf("the gateway watches the registry: %v", err)
	}
	seen := func(id string, port int) {
		t.Helper()
		for {
			select {
			case e := <-kw.Updates():
				if e == nil || e.Key() != id {
					continue
				}
				var sb events.Sandbox
				if err := json.Unmarshal(e.Value(), &sb); err != nil {
					t.Fatal(err)
				}
				if len(sb.Ports) == 1 && sb.Ports[0].Port == port {
					return
				}
			case <-ctx.Done():
				t.Fatalf("the gateway's watch never saw %s's port %d (errors: %v)", id, port, Errors(gw))
			}
		}
	}
	seen("sb1", 8000)
	put("sb2", 3000) // a change after the initial values
	seen("sb2", 3000)
	if err := kw.Stop(); err != nil {
		t.Fatalf("stop the watch: %v", err)
	}
	if err := gw.FlushTimeout(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	for _, err := range Errors(gw) {
		t.Errorf("the gateway's registry watch: %v", err)
	}

	snapshots, files := "OBJ_"+events.BucketSnapshots, "OBJ_"+events.BucketFiles
	pool := events.PoolConsumer("fake")
	for _, subject := range []string{
		"$JS.API.CONSUMER.CREATE." + snapshots,
		"$JS.API.CONSUMER.CREATE." + snapshots + ".c1.$O." + events.BucketSnapshots + ".>",
		"$JS.API.CONSUMER.CREATE." + files + ".c1.$O." + events.BucketFiles + ".>",
		"$JS.API.CONSUMER.CREATE." + events.StreamOutput,
		"$JS.API.CONSUMER.CREATE." + events.StreamOutput + ".c1.sbx.out.>",
		"$JS.API.CONSUMER.CREATE." + events.StreamOps + ".c1.sbx.ops.>",
		"$JS.API.CONSUMER.CREATE." + events.StreamCommands + ".c1.sbx.cmd.>",
		"$JS.API.CONSUMER.DURABLE.CREATE." + events.StreamOutput + ".d1",
		"$JS.API.CONSUMER.MSG.NEXT." + events.StreamCommands + "." + pool,
		"$JS.API.CONSUMER.INFO." + events.StreamCommands + "." + pool,
		"$JS.API.CONSUMER.DELETE." + events.StreamCommands + "." + pool,
		"$JS.ACK." + events.StreamCommands + "." + pool + ".1.1.1.1.1",
		"$JS.API.DIRECT.GET." + events.StreamOutput,
		"$JS.API.DIRECT.GET." + snapshots + ".$O." + events.BucketSnapshots + ".M.x",
		"$JS.API.STREAM.MSG.GET." + files,
		"$JS.API.STREAM.MSG.GET." + events.StreamOps,
		"$JS.API.STREAM.INFO." + events.StreamCommands,
		"$JS.API.STREAM.LIST",
		"$JS.API.STREAM.PURGE." + events.StreamOps,
		"$JS.API.STREAM.UPDATE." + events.StreamCommands,
	} {
		t.Run(subject, func(t *testing.T) {
			nc := env.Connect(t, env.Creds(auth.RoleGateway))
			if err := nc.Publish(subject, []byte("{}")); err != nil {
				t.Fatal(err)
			}
			if !WaitDenied(nc, subject, denyWait) {
				t.Fatalf("the gateway publishing %s was not denied (errors: %v)", subject, Errors(nc))
			}
		})
	}
	// And through the library: output there is, and no consumer reads it.
	w := env.Connect(t, env.Creds(auth.RoleWorker))
	if err := w.Publish("sbx.out._.sb1.p1.stdout", []byte("secret")); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	octx, ocancel := context.WithTimeout(ctx, 3*time.Second)
	defer ocancel()
	if c, err := gjs.OrderedConsumer(octx, events.StreamOutput, jetstream.OrderedConsumerConfig{}); err == nil {
		if m, err := c.Next(jetstream.FetchMaxWait(2 * time.Second)); err == nil {
			t.Errorf("the gateway read %q from %s", m.Data(), events.StreamOutput)
		}
	}
}
