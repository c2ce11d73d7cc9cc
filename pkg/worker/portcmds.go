package worker

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/sandboxio/sandboxio/internal/cemsg"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// The ports commands (ports.expose, ports.unexpose, ports.token with a
// rotation): the router checks and mints, and the worker that owns the
// sandbox changes the published ports in its record (Sandbox.Ports), as it
// makes every other write of that record, and records the operation. The
// token itself never reaches the worker: only its hash, which is what the
// record keeps and never what a record or a log shows.

// portsSummary is an operation record's summary of a ports command.
func portsSummary(port int, access events.PortAccess) map[string]string {
	m := map[string]string{"port": strconv.Itoa(port)}
	if access != "" {
		m["access"] = string(access)
	}
	return m
}

func (w *Worker) handlePortsExpose(sb *sandbox, env cemsg.Envelope, r *events.PortsExposeRequest) (any, *events.Error) {
	if !w.info.Capabilities.Has(events.CapPorts) {
		return nil, events.Errorf(events.CodeCapabilityNotSupp, "backend %q cannot publish a sandbox's ports", w.info.Name).
			With("missing", []events.Capability{events.CapPorts})
	}
	access := r.Access.Effective()
	if access == events.PortPrivate && r.TokenHash == "" {
		return nil, events.Errorf(events.CodeInvalidValue, "token_hash: a private port needs the router's token hash").With("field", "token_hash")
	}
	return w.recorded(sb, env, events.OpPortsExpose, portsSummary(r.Port, access), func(*opRecord) (any, *events.Error) {
		return w.changePorts(sb, func(ports []events.PortExposure) ([]events.PortExposure, events.PortsCommandReply, *events.Error) {
			rep := events.PortsCommandReply{SandboxID: sb.id, Port: r.Port, Access: access, Exposed: true}
			i := slices.IndexFunc(ports, func(p events.PortExposure) bool { return p.Port == r.Port })
			if i < 0 {
				if len(ports) >= events.MaxExposedPorts {
					return nil, rep, events.Errorf(events.CodeTooManyPorts, "sandbox %s publishes %d ports already", sb.id, events.MaxExposedPorts).
						With("max", events.MaxExposedPorts)
				}
				p := events.PortExposure{Port: r.Port, Access: access, ExposedAt: time.Now().UTC().Truncate(time.Millisecond)}
				if access == events.PortPrivate {
					p.TokenHash, rep.TokenSet = r.TokenHash, true
				}
				rep.ExposedAt = p.ExposedAt
				return append(ports, p), rep, nil
			}
			p := ports[i]
			rep.ExposedAt = p.ExposedAt
			switch {
			case p.Access == access && (access == events.PortPublic || p.TokenHash != ""):
				return ports, rep, nil // published as asked already: nothing changes
			case access == events.PortPublic:
				p.Access, p.TokenHash = access, ""
			default: // becomes private, or was private without a token
				p.Access, p.TokenHash, rep.TokenSet = access, r.TokenHash, true
			}
			ports[i] = p
			return ports, rep, nil
		})
	})
}

func (w *Worker) handlePortsUnexpose(sb *sandbox, env cemsg.Envelope, r *events.PortsUnexposeRequest) (any, *events.Error) {
	return w.recorded(sb, env, events.OpPortsUnexpose, portsSummary(r.Port, ""), func(*opRecord) (any, *events.Error) {
		return w.changePorts(sb, func(ports []events.PortExposure) ([]events.PortExposure, events.PortsCommandReply, *events.Error) {
			rep := events.PortsCommandReply{SandboxID: sb.id, Port: r.Port}
			i := slices.IndexFunc(ports, func(p events.PortExposure) bool { return p.Port == r.Port })
			if i < 0 {
				return ports, rep, nil // not published: nothing to do
			}
			rep.Exposed, rep.Access, rep.ExposedAt = true, ports[i].Access, ports[i].ExposedAt
			return slices.Delete(ports, i, i+1), rep, nil
		})
	})
}

// handlePortsToken rotates a private port's token (the router mints links
// without the worker).
func (w *Worker) handlePortsToken(sb *sandbox, env cemsg.Envelope, r *events.PortsTokenRequest) (any, *events.Error) {
	if !r.Rotate || r.TokenHash == "" {
		return nil, events.Errorf(events.CodeInvalidValue, "token_hash: a rotation needs the router's token hash").With("field", "token_hash")
	}
	summary := portsSummary(r.Port, "")
	summary["rotate"] = "true"
	return w.recorded(sb, env, events.OpPortsToken, summary, func(*opRecord) (any, *events.Error) {
		return w.changePorts(sb, func(ports []events.PortExposure) ([]events.PortExposure, events.PortsCommandReply, *events.Error) {
			rep := events.PortsCommandReply{SandboxID: sb.id, Port: r.Port}
			i := slices.IndexFunc(ports, func(p events.PortExposure) bool { return p.Port == r.Port })
			if i < 0 {
				return nil, rep, events.Errorf(events.CodePortNotExposed, "port %d of sandbox %s is not published", r.Port, sb.id).With("port", r.Port)
			}
			if ports[i].Access == events.PortPublic {
				return nil, rep, events.Errorf(events.CodeInvalidValue, "port %d of sandbox %s is public: it has no token and needs no link", r.Port, sb.id).
					With("field", "port")
			}
			ports[i].TokenHash = r.TokenHash
			rep.Exposed, rep.Access, rep.ExposedAt, rep.TokenSet = true, ports[i].Access, ports[i].ExposedAt, true
			return ports, rep, nil
		})
	})
}

// changePorts applies change to the sandbox's published ports and writes
// the record (revision-checked, ordered with the sandbox's other registry
// writes by regMu), unless change left them as they were.
func (w *Worker) changePorts(sb *sandbox, change func([]events.PortExposure) ([]events.PortExposure, events.PortsCommandReply, *events.Error)) (any, *events.Error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb.regMu.Lock()
	defer sb.regMu.Unlock()
	sb.mu.Lock()
	if sb.gone || sb.killWait != nil {
		sb.mu.Unlock()
		return nil, events.Errorf(events.CodeSandboxGone, "sandbox %s is being killed", sb.id)
	}
	rec, rev := sb.record, sb.revision
	sb.mu.Unlock()
	before := slices.Clone(rec.Ports)
	ports, rep, e := change(slices.Clone(rec.Ports))
	if e != nil {
		return nil, e
	}
	rep.Ports = len(ports)
	if slices.Equal(ports, before) {
		return rep, nil
	}
	if len(ports) == 0 {
		ports = nil
	}
	rec.Ports = ports
	next, err := w.putRecord(ctx, rec, rev)
	if err != nil {
		return nil, events.Errorf(events.CodeBackendUnavailable, "registry update failed: %v", err)
	}
	sb.mu.Lock()
	sb.record.Ports, sb.revision = ports, next
	sb.mu.Unlock()
	return rep, nil
}
