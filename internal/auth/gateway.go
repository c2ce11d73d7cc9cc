package auth

import "github.com/sandboxio/sandboxio/pkg/events"

// RoleGateway is the ports gateway's user (services/gateway): it reads the
// registry and opens tunnels to the workers (internal/tunnel), and nothing
// else: it faces the internet.
const RoleGateway = "gateway"

// GatewaySigner names the gateway's open-signing seed
// (SigningKeyFile(GatewaySigner), keys/signing-gateway.nk; the gateway's
// --signing-key). Its public key is in commanders.txt, scoped to
// events.OpPortsOpen in command-scopes.txt: the workers obey its opens of
// published ports and no command. No worker may take the name.
const GatewaySigner = "gateway"

// GatewayCommandScope is what the gateway's key may sign.
var GatewayCommandScope = []string{events.OpPortsOpen}

// gatewayPermissions: the JetStream API calls of a watch of the registry
// (services/gateway's KeyValue and WatchAll: the bucket's stream info, an
// ordered consumer on KV_sbx_registry created, answered for flow control
// and deleted, a direct get of a key) and no other stream's (no consumer on
// the snapshots, files, output or records, no pull from SBX_CMD), its
// inboxes, micro pings, tunnel opens and frames to the workers; it
// subscribes only to its inboxes and its tunnel subjects.
func gatewayPermissions() perms {
	return perms{
		pubAllow: append(registryWatch(), "_INBOX.>", "$SRV.>",
			"sbx.tun.*.*.open", "sbx.tun.*.*.c.*"),
		subAllow: []string{"_INBOX.>", events.SubjectTunnelGatewayPrefix + ">"},
	}
}

// registryWatch are the JetStream API subjects a read and watch of the
// registry bucket need (nats.go's KeyValue, Get and WatchAll), on that
// bucket's stream only.
func registryWatch() []string {
	return kvRead(events.BucketRegistry, true)
}

// kvRead are the JetStream API subjects that open bucket, get its keys
// (direct get, or a message get on a stream without direct gets) and, with watch, follow it with ordered consumers (created
// by either form of the create call, answered for flow control and
// deleted at the end of the watch): none reaches another stream.
func kvRead(bucket string, watch bool) []string {
	stream := "KV_" + bucket
	subs := []string{"$JS.API.INFO", "$JS.API.STREAM.INFO." + stream,
		"$JS.API.DIRECT.GET." + stream, "$JS.API.DIRECT.GET." + stream + ".>", "$JS.API.STREAM.MSG.GET." + stream}
	if watch {
		subs = append(subs, "$JS.API.CONSUMER.CREATE."+stream, "$JS.API.CONSUMER.CREATE."+stream+".>",
			"$JS.API.CONSUMER.DELETE."+stream+".>", "$JS.FC."+stream+".>")
	}
	return subs
}
