package worker

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/sandboxio/sandboxio/internal/recsign"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// The worker trusts nothing it receives: whoever can publish to sbx.cmd.>
// (a compromised router or worker credential, an open deployment) may send
// any create. Every create is re-checked here against the worker's own
// limits before anything is claimed or created, and its sealed secrets are
// opened here and nowhere else.

// deadlineSkew is how far a create's deadline may lie beyond now +
// MaxLifetime: the router computed it a moment ago, on another clock.
const deadlineSkew = time.Minute

// keys are the worker's seal key (xkey: opens secrets sealed to the
// backend) and signing key (nkey: signs records, internal/recsign). The
// seeds never leave them: not in a log, a record or an error.
type keys struct {
	seal    nkeys.KeyPair
	sealPub string
	sign    *recsign.Key
	signPub string
	// stable: the signing key came from Config.SigningSeed, so the
	// records of this worker id's earlier runs carry it too.
	stable bool
}

func newKeys(sealSeed, signingSeed []byte) (keys, error) {
	var k keys
	var err error
	if len(sealSeed) > 0 {
		k.seal, err = nkeys.FromCurveSeed(sealSeed)
		if err != nil {
			return keys{}, errors.New("worker: SealSeed is not an xkey seed (SX…)")
		}
	} else if k.seal, err = nkeys.CreateCurveKeys(); err != nil {
		return keys{}, fmt.Errorf("worker: seal key: %w", err)
	}
	if k.sealPub, err = k.seal.PublicKey(); err != nil {
		return keys{}, fmt.Errorf("worker: seal key: %w", err)
	}
	if k.sign, err = recsign.NewKey(signingSeed); err != nil {
		if errors.Is(err, recsign.ErrBadSeed) {
			return keys{}, fmt.Errorf("worker: SigningSeed is not a user nkey seed (SU…): %w", err)
		}
		return keys{}, fmt.Errorf("worker: signing key: %w", err)
	}
	k.signPub = k.sign.Public()
	k.stable = len(signingSeed) > 0
	return k, nil
}

// signRecord adds the signature headers to a record message: the signer's
// public nkey and the base64 signature of SignedRecordPayload(subject,
// ce-id, data).
func (k keys) signRecord(m *nats.Msg) error { return k.sign.Sign(m) }

// openSecrets opens a create's sealed secrets. The box must be sealed to
// this backend's key; the plaintext must be a JSON object of strings.
// Errors never quote the plaintext.
func (k keys) openSecrets(box *events.SealedBox) (map[string]string, *events.Error) {
	if e := box.Validate(); e != nil {
		return nil, e
	}
	if box.Recipient != k.sealPub {
		return nil, events.Errorf(events.CodeInvalidValue, "sealed_secrets are sealed to %s, not to this backend's key %s", box.Recipient, k.sealPub).
			With("field", "sealed_secrets.recipient")
	}
	sealed, err := base64.StdEncoding.DecodeString(box.Data)
	if err != nil {
		return nil, events.Errorf(events.CodeInvalidValue, "sealed_secrets.data is not base64").With("field", "sealed_secrets.data")
	}
	plain, err := k.seal.Open(sealed, box.Sender)
	if err != nil {
		return nil, events.Errorf(events.CodeInvalidValue, "sealed_secrets do not open with this backend's key (sender %s)", box.Sender).
			With("field", "sealed_secrets")
	}
	defer clear(plain)
	var secrets map[string]string
	if err := json.Unmarshal(plain, &secrets); err != nil || secrets == nil {
		return nil, events.Errorf(events.CodeInvalidValue, "sealed_secrets do not hold a JSON object of strings").With("field", "sealed_secrets")
	}
	return secrets, nil
}

// checkCreate re-checks a create command against this worker's limits and
// returns the secrets the backend gets (opened from the sealed box, or the
// clear ones of an older router) and the tenant token. It changes nothing.
func (w *Worker) checkCreate(cmd *events.CreateCommand, now time.Time) (map[string]string, string, *events.Error) {
	if !events.ValidID(cmd.SandboxID) {
		return nil, "", events.Errorf(events.CodeInvalidID, "sandbox_id is not a valid id").With("field", "sandbox_id")
	}
	if cmd.Spec.Backend != w.info.Name {
		return nil, "", events.Errorf(events.CodeInvalidValue, "the command is for backend %q, this worker runs %q", truncate(cmd.Spec.Backend), w.info.Name).
			With("field", "spec.backend")
	}
	tenant := cmd.Tenant
	if tenant == "" {
		tenant = events.TenantOpen // a router from before tenants
	}
	if !events.ValidTenant(tenant) {
		return nil, "", events.Errorf(events.CodeForbidden, "the command names no valid tenant").With("field", "tenant")
	}
	req := cmd.Request
	if e := req.Validate(); e != nil {
		return nil, "", e
	}
	maxLife := w.cfg.MaxLifetime
	if req.TimeoutS > int(maxLife/time.Second) {
		return nil, "", events.Errorf(events.CodeInvalidValue, "timeout_s %d exceeds this worker's maximum lifetime of %d s", req.TimeoutS, int(maxLife/time.Second)).
			With("field", "timeout_s").With("limit", int(maxLife/time.Second))
	}
	switch {
	case cmd.Deadline.IsZero():
		return nil, "", events.Errorf(events.CodeInvalidValue, "the command has no deadline").With("field", "deadline")
	case !cmd.Deadline.After(now):
		return nil, "", events.Errorf(events.CodeInvalidValue, "the deadline %s has passed", cmd.Deadline.UTC().Format(time.RFC3339)).With("field", "deadline")
	case cmd.Deadline.After(now.Add(maxLife + deadlineSkew)):
		return nil, "", events.Errorf(events.CodeInvalidValue, "the deadline %s is beyond this worker's maximum lifetime of %s", cmd.Deadline.UTC().Format(time.RFC3339), maxLife).
			With("field", "deadline")
	}
	if e := w.checkResources(mergeResources(cmd.Spec.Resources, req.Resources)); e != nil {
		return nil, "", e
	}
	secrets := req.Secrets
	if req.SealedSecrets != nil {
		// Validate refused a command with both.
		var e *events.Error
		if secrets, e = w.keys.openSecrets(req.SealedSecrets); e != nil {
			return nil, "", e
		}
		opened := events.CreateRequest{TimeoutS: req.TimeoutS, Secrets: secrets}
		if e := opened.Validate(); e != nil {
			return nil, "", e
		}
	}
	return secrets, tenant, nil
}

// checkResources bounds what a sandbox may ask for.
func (w *Worker) checkResources(r events.Resources) *events.Error {
	return r.Within(w.cfg.MaxResources)
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// checkSigner verifies that a command carries a valid signature by one of
// Config.TrustedCommandSigners (none needed when the list is empty): a
// command that the server let through on another subject (a stream's
// RePublish, a push consumer's deliver subject) or from another publisher
// is refused here before it is decoded into anything that runs. So is a
// command taken after its Sbx-Not-After (events.HeaderNotAfter): its router
// has answered the caller without it, so it must not run behind their back.
func (w *Worker) checkSigner(subject string, h nats.Header, data []byte) *events.Error {
	if t, ok := events.ParseNotAfter(h.Get(events.HeaderNotAfter)); ok && time.Now().After(t) {
		return events.Errorf(events.CodeCommandExpired, "the command arrived %s after its Sbx-Not-After; it was not run", time.Since(t).Round(time.Millisecond))
	}
	if len(w.cfg.TrustedCommandSigners) == 0 {
		return nil
	}
	signer, err := recsign.Verify(subject, h, data)
	switch {
	case errors.Is(err, recsign.ErrUnsigned):
		return events.Errorf(events.CodeUnauthorized, "the command is not signed by a trusted commander")
	case err != nil:
		return events.Errorf(events.CodeUnauthorized, "the command's signature does not verify")
	case !slices.Contains(w.cfg.TrustedCommandSigners, signer):
		return events.Errorf(events.CodeUnauthorized, "the command is signed by %s, not a trusted commander", signer)
	}
	if scope, ok := w.cfg.CommandScopes[signer]; ok {
		if op, _ := opFromSubject(subject); !slices.Contains(scope, op) {
			return events.Errorf(events.CodeForbidden, "the command's signer %s may not command %s", signer, truncate(op)).
				With("signer", signer)
		}
	}
	return nil
}

// opFromSubject is the operation a command subject names in its last
// token (sbx.cmd.<backend>.pool.create, sbx.cmd.<backend>.node.<worker>.<verb>):
// the subject is what a command's signature covers, its ce-type is not.
func opFromSubject(subject string) (string, bool) {
	verb := subject[strings.LastIndexByte(subject, '.')+1:]
	return events.OpFromCommandType(events.TypePrefix + "cmd." + verb)
}
