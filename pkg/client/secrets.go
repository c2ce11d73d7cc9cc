package client

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sealbox"
)

// backendsTTL is how long a backends reply (its seal keys) is reused.
const backendsTTL = 30 * time.Second

// sealSecrets replaces req.Secrets by SealedSecrets, sealed with a one-time
// xkey to the public xkey of the backend the create goes to, so that the
// secrets are in clear nowhere between this process and that backend's
// workers. When no key is known (workers that advertise none, an unknown
// class) the secrets go in clear for the router to seal, and a debug line
// says so, never with a value.
// It reports whether it sealed; fresh asks the backends anew.
func (c *Client) sealSecrets(ctx context.Context, req *events.CreateRequest, fresh bool) (bool, error) {
	backend, key := c.sealKey(ctx, req, fresh)
	if key == "" {
		c.log.Debug("no seal key known: secrets go to the router in clear over this connection for it to seal",
			"backend", backend, "secrets", len(req.Secrets))
		return false, nil
	}
	box, err := sealbox.Seal(req.Secrets, key)
	if err != nil {
		return false, events.Errorf(events.CodeInternal, "seal secrets to backend %s: %v", backend, err)
	}
	req.SealedSecrets, req.Secrets = box, nil
	return true, nil
}

// staleSealKey: the router refused sealed secrets because their recipient
// is no live worker's key.
func staleSealKey(err error) bool {
	var e *events.Error
	return errors.As(err, &e) && e.Code == events.CodeInvalidValue && e.Details["field"] == "sealed_secrets.recipient"
}

// sealKey finds the backend a create goes to (a dsn's scheme, else its
// class, else the default class) and that backend's public xkey; "" when
// none is known.
func (c *Client) sealKey(ctx context.Context, req *events.CreateRequest, fresh bool) (backend, key string) {
	b := c.cachedBackends(ctx, fresh)
	if b == nil {
		return "", ""
	}
	if req.DSN != "" {
		scheme, _, ok := strings.Cut(req.DSN, "://")
		if !ok {
			return "", ""
		}
		backend = scheme
	} else {
		for _, cl := range b.Classes {
			if (req.Class == "" && cl.Default) || (req.Class != "" && cl.Name == req.Class) {
				backend = cl.Backend
				break
			}
		}
	}
	for _, info := range b.Backends {
		if info.Name != backend || backend == "" {
			continue
		}
		if info.SealKey != "" {
			return backend, info.SealKey
		}
		// A router that does not aggregate the key yet: the workers' leases
		// carry it, and all workers of a backend share one.
		for _, w := range info.Workers {
			if w.SealKey == "" || (key != "" && w.SealKey != key) {
				return backend, ""
			}
			key = w.SealKey
		}
		return backend, key
	}
	return backend, ""
}

// cachedBackends is the backends reply of the last backendsTTL, or a new
// one; nil if the router does not answer.
func (c *Client) cachedBackends(ctx context.Context, fresh bool) *events.BackendsReply {
	c.mu.Lock()
	b, at := c.backends, c.backendAt
	c.mu.Unlock()
	if !fresh && b != nil && time.Since(at) < backendsTTL {
		return b
	}
	bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	b, err := c.Backends(bctx)
	if err != nil {
		return nil
	}
	c.mu.Lock()
	c.backends, c.backendAt = b, time.Now()
	c.mu.Unlock()
	return b
}
