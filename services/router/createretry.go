package router

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// Creates retried with the same sandbox_id (ADR 37). A create names its
// spec by a hash (specHash) that the worker keeps in the registry record;
// a later create of an id that exists is a retry when its tenant and hash
// are the same. The router answers a retry of a running sandbox itself,
// refuses one whose sandbox ran and ended, and sends the others on: the
// worker waits for a create still in progress, or takes over the claim of
// one that never started (its worker lost, or the create failed).

// specVersion is bumped whenever specHash covers other fields, so that an
// old record never matches a new request by accident.
const specVersion = "v1"

// specHash identifies what a create asks for: the tenant, the owner, the
// resolved class spec and the request less its sandbox id, idempotency
// key, secrets and seal. Secrets count only as present or absent: sealed
// ones differ at every seal, and a hash of a secret's value must not be
// stored anywhere (a short secret could be guessed from it). So a retry
// with other secret values is the same create (it gets the first one's
// sandbox and secrets); one that adds or drops secrets is not.
func specHash(tenant string, spec events.ClassSpec, r *events.CreateRequest) string {
	body := *r
	hasSecrets := len(r.Secrets) > 0 || r.SealedSecrets != nil
	body.SandboxID, body.IdempotencyKey, body.Secrets, body.SealedSecrets = "", "", nil, nil
	b, _ := json.Marshal(struct {
		Version    string               `json:"v"`
		Tenant     string               `json:"tenant"`
		Spec       events.ClassSpec     `json:"spec"`
		Request    events.CreateRequest `json:"request"`
		HasSecrets bool                 `json:"has_secrets"`
	}{specVersion, tenant, spec, body, hasSecrets})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// sameCreate reports whether the record was made by a create of cmd's
// tenant and spec.
func sameCreate(sb events.Sandbox, cmd events.CreateCommand) bool {
	return sb.SpecHash != "" && sb.SpecHash == cmd.SpecHash && tenantOf(sb) == tenantOf(events.Sandbox{Tenant: cmd.Tenant})
}

// createExisting answers a create whose client-chosen id is in the
// registry already (sb, read from the bucket): the sandbox itself for a
// retry of a running one, SBX_E1202 for another create.
func (s *Service) createExisting(to string, c caller, r *events.CreateRequest, cmd events.CreateCommand, sb events.Sandbox, opID, traceparent, reqHash string) {
	switch {
	case !sameCreate(sb, cmd):
		s.publishReply(to, nil, events.Errorf(events.CodeSandboxExists, "sandbox %s already exists", cmd.SandboxID).With("sandbox_id", cmd.SandboxID))
	case sb.State == events.StateRunning:
		b, _ := json.Marshal(existingReply(sb))
		s.publishReply(to, b, nil)
	case sb.State.Ended() && sb.StartedAt != nil:
		s.publishReply(to, nil, events.Errorf(events.CodeSandboxGone, "sandbox %s was created and has ended (%s)", cmd.SandboxID, sb.EndReason).With("sandbox_id", cmd.SandboxID))
	default:
		// Still being created, or never started: the worker decides.
		s.sendCreate(to, c, r, cmd, opID, traceparent, reqHash)
	}
}

// existingReply is the create reply of a running sandbox's record.
func existingReply(sb events.Sandbox) events.CreateReply {
	reply := events.CreateReply{SandboxID: sb.SandboxID, Backend: sb.Backend, Class: sb.Class,
		Isolation: sb.Isolation, Capabilities: sb.Capabilities, Deadline: sb.Deadline}
	if sb.Isolation == events.TierUnknown {
		reply.Warnings = []string{"backend isolation tier is unknown: no isolation guarantee"}
	}
	return reply
}

// checkExistingID reads the registry for a create's client-chosen id, off
// the handler, and sends the create on, answers the retry, or refuses it.
func (s *Service) checkExistingID(to string, c caller, r *events.CreateRequest, cmd events.CreateCommand, opID, traceparent, reqHash string) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := s.workCtx(registryReadTimeout)
		defer cancel()
		sb, ok, err := s.readSandbox(ctx, cmd.SandboxID)
		switch {
		case err != nil:
			s.publishReply(to, nil, events.Errorf(events.CodeBackendUnavailable, "registry: %v", err))
		case ok && !c.may(sb):
			s.publishReply(to, nil, forbidden(cmd.SandboxID))
		case ok && r.IdempotencyKey == "":
			s.createExisting(to, c, r, cmd, sb, opID, traceparent, reqHash)
		default:
			s.sendCreate(to, c, r, cmd, opID, traceparent, reqHash)
		}
	}()
}

// registryReadTimeout bounds checkExistingID's read.
const registryReadTimeout = 5 * time.Second
