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

// gatewayPermissions: the JetStream API to read the registry (never to
// configure, purge or delete), its inboxes, micro pings, tunnel opens and
// frames to the workers; it subscribes only to its inboxes and its tunnel
// subjects.
func gatewayPermissions() perms {
	return perms{
		pubAllow: []string{"$JS.API.>", "_INBOX.>", "$SRV.>",
			"sbx.tun.*.*.open", "sbx.tun.*.*.c.*"},
		pubDeny: append(append([]string{"$JS.API.STREAM.PURGE.>", "$JS.API.STREAM.DELETE.>", "$JS.API.STREAM.MSG.DELETE.>",
			"$JS.API.CONSUMER.DELETE.>"}, streamConfigs...), opsMutations...),
		subAllow: []string{"_INBOX.>", events.SubjectTunnelGatewayPrefix + ">"},
	}
}
