package client

import (
	"context"
	"time"
)

// WithAPIPaths makes the client read output and files through the API
// (live subjects, attach, files.get/put) as a tenant must, even where
// JetStream is reachable.
func WithAPIPaths() Option { return func(c *Client) { c.forceAPI = true } }

// WithIdleCheck sets how long a stream may be silent before the client
// checks on its sandbox and worker.
func WithIdleCheck(d time.Duration) Option { return func(c *Client) { c.idleCheck = d } }

// UsesAPIPaths reports how the client reads output.
func (c *Client) UsesAPIPaths() bool { return c.session(context.Background()).api }

// WithLostCheck sets how long a request waits before the client checks for
// a fault that lost its reply, and then how often.
func WithLostCheck(d time.Duration) Option { return func(c *Client) { c.lostCheck = d } }

// RefreshRouters pings the router instances now (the baseline a request's
// check compares with).
func (c *Client) RefreshRouters() { c.routers.refresh(c, routerAskWait) }

// KnownRouters are the router instances the last ping found.
func (c *Client) KnownRouters() []string {
	c.routers.mu.Lock()
	defer c.routers.mu.Unlock()
	var ids []string
	for id := range c.routers.alive {
		ids = append(ids, id)
	}
	return ids
}

// WithAttemptObserver calls f after each attempt of a request: err is why it
// got no reply (nil: it got one), seen before the client decides whether to
// send it again.
func WithAttemptObserver(f func(op string, err error)) Option {
	return func(c *Client) { c.onAttempt = f }
}
