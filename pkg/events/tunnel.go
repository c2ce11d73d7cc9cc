package events

// Port tunnels (internal/tunnel): a gateway's connection to a published
// port crosses core NATS (not JetStream) to the worker that owns the
// sandbox, which dials the port through its backend (the sandbox's agent).
//
//	sbx.tun.<backend>.<worker>.open      gateway → worker: TunnelOpen (JSON), signed
//	sbx.tun.<backend>.<worker>.c.<conn>  gateway → worker: the connection's frames
//	sbx.tun.gw.<gateway>.<conn>          worker → gateway: the open's answer, then frames
//
// <gateway> and both <conn> tokens are random 128-bit ids (32 hex): a
// connection's subjects are known only to its two ends.
const (
	// SubjectTunnelAll is every tunnel subject.
	SubjectTunnelAll = "sbx.tun.>"
	// SubjectTunnelGatewayPrefix starts every gateway's subjects.
	SubjectTunnelGatewayPrefix = "sbx.tun.gw."
	// OpPortsOpen is what a command-scopes line names to let a key sign
	// tunnel opens (keys/command-scopes.txt: the gateway's key).
	OpPortsOpen = "ports.open"
)

// TunnelOpenSubject is where a worker takes opens:
// sbx.tun.<backend>.<worker>.open.
func TunnelOpenSubject(backend, worker string) string {
	return "sbx.tun." + backend + "." + worker + ".open"
}

// TunnelWorkerConnSubject carries a connection's frames to the worker:
// sbx.tun.<backend>.<worker>.c.<conn>.
func TunnelWorkerConnSubject(backend, worker, conn string) string {
	return "sbx.tun." + backend + "." + worker + ".c." + conn
}

// TunnelGatewaySubject carries a connection's frames to the gateway:
// sbx.tun.gw.<gateway>.<conn>.
func TunnelGatewaySubject(gateway, conn string) string {
	return SubjectTunnelGatewayPrefix + gateway + "." + conn
}

// ValidTunnelID accepts a tunnel id: 32 lowercase hex digits.
func ValidTunnelID(s string) bool {
	if len(s) != 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// TunnelOpen asks a worker to connect to a published port of one of its
// sandboxes. The worker answers on Reply (which the signature covers, with
// the subject and the Sbx-Not-After header: a replayed open can neither be
// redirected nor run late). The worker checks the port against the
// sandbox's registry record, never against this message.
type TunnelOpen struct {
	SandboxID string `json:"sandbox_id"`
	Port      int    `json:"port"`
	// Tenant is the sandbox's tenant as the gateway read it in the
	// registry record; the worker refuses an open whose tenant is not the
	// record's.
	Tenant string `json:"tenant,omitempty"`
	// Conn is the gateway's connection id; Reply is
	// TunnelGatewaySubject(gateway, Conn).
	Conn  string `json:"conn"`
	Reply string `json:"reply"`
	// Window is how many bytes the worker may send before the gateway
	// grants more.
	Window int `json:"window"`
}

// TunnelAccept is a worker's answer to an open that connected.
type TunnelAccept struct {
	// Conn is the worker's connection id (TunnelWorkerConnSubject).
	Conn string `json:"conn"`
	// Window is how many bytes the gateway may send before the worker
	// grants more.
	Window int `json:"window"`
}
