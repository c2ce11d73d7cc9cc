package router

import (
	"sort"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sealbox"
)

// sealKeys returns the seal keys the live workers of a backend advertise,
// the most recently heartbeating worker's first.
func (s *Service) sealKeys(backend string) []string {
	type keyAt struct {
		key string
		at  time.Time
	}
	var found []keyAt
	seen := map[string]bool{}
	s.mu.RLock()
	for _, l := range s.leases {
		if l.Backend != backend || l.SealKey == "" || time.Since(l.HeartbeatAt) >= s.cfg.Bus.LeaseTTL+2*time.Second {
			continue
		}
		if !seen[l.SealKey] {
			seen[l.SealKey] = true
			found = append(found, keyAt{l.SealKey, l.HeartbeatAt})
		}
	}
	s.mu.RUnlock()
	sort.Slice(found, func(i, j int) bool { return found[i].at.After(found[j].at) })
	keys := make([]string, len(found))
	for i, k := range found {
		keys[i] = k.key
	}
	return keys
}

// sealSecrets makes sure no secret leaves the router in clear: clear
// secrets are sealed (nkeys xkeys, a one-time sender key) to the backend's
// seal key and removed from the request; secrets the client sealed must be
// sealed to a live worker's key of that backend. A backend none of whose
// live workers advertises a seal key gets no secrets at all.
func (s *Service) sealSecrets(backend string, r *events.CreateRequest) *events.Error {
	keys := s.sealKeys(backend)
	if r.SealedSecrets != nil {
		for _, k := range keys {
			if k == r.SealedSecrets.Recipient {
				return nil
			}
		}
		return events.Errorf(events.CodeInvalidValue, "sealed_secrets.recipient is not the seal key of a live %q worker (see the backends op)", backend).
			With("field", "sealed_secrets.recipient")
	}
	if len(r.Secrets) == 0 {
		return nil
	}
	if len(keys) == 0 {
		return events.Errorf(events.CodeNoWorker, "no live worker of backend %q can take secrets: none advertises a seal key", backend).With("backend", backend)
	}
	box, err := sealbox.Seal(r.Secrets, keys[0])
	if err != nil {
		return events.Errorf(events.CodeInternal, "seal secrets: %v", err)
	}
	r.SealedSecrets, r.Secrets = box, nil
	return nil
}
