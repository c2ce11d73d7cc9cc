package client

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// backendsTTL is how long a backends reply (its seal keys) is reused.
const backendsTTL = 30 * time.Second

// sealSecrets replaces req.Secrets by SealedSecrets, sealed with a one-time
// xkey to the public xkey of the backend the create goes to, so that the
// secrets are in clear nowhere between this process and that backend's
// workers. When no key is known (workers that advertise none, an unknown
// class) the secrets go in clear for the router to seal, and a debug line
// says so, never with a value.
func (c *Client) sealSecrets(ctx context.Context, req *events.CreateRequest) error {
	backend, key := c.sealKey(ctx, req)
	if key == "" {
		c.log.Debug("no seal key known: secrets go to the router in clear over this connection for it to seal",
			"backend", backend, "secrets", len(req.Secrets))
		return nil
	}
	box, err := sealTo(req.Secrets, key)
	if err != nil {
		return events.Errorf(events.CodeInternal, "seal secrets to backend %s: %v", backend, err)
	}
	req.SealedSecrets, req.Secrets = box, nil
	return nil
}

// sealTo seals the JSON object of secrets to recipient (a public xkey)
// with a one-time sender key.
func sealTo(secrets map[string]string, recipient string) (*events.SealedBox, error) {
	plain, err := json.Marshal(secrets)
	if err != nil {
		return nil, err
	}
	kp, err := nkeys.CreateCurveKeys()
	if err != nil {
		return nil, err
	}
	defer kp.Wipe()
	sender, err := kp.PublicKey()
	if err != nil {
		return nil, err
	}
	sealed, err := kp.Seal(plain, recipient)
	clear(plain)
	if err != nil {
		return nil, fmt.Errorf("recipient %s: %w", recipient, err)
	}
	return &events.SealedBox{Recipient: recipient, Sender: sender, Data: base64.StdEncoding.EncodeToString(sealed)}, nil
}

// sealKey finds the backend a create goes to (a dsn's scheme, else its
// class, else the default class) and that backend's public xkey; "" when
// none is known.
func (c *Client) sealKey(ctx context.Context, req *events.CreateRequest) (backend, key string) {
	b := c.cachedBackends(ctx)
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
func (c *Client) cachedBackends(ctx context.Context) *events.BackendsReply {
	c.mu.Lock()
	b, at := c.backends, c.backendAt
	c.mu.Unlock()
	if b != nil && time.Since(at) < backendsTTL {
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
