package cli

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// signalContext returns a context that ends at the first SIGINT or SIGTERM
// (a clean, bounded shutdown: a worker waits at most its ShutdownGrace), and
// calls force at the second: an operator's second Ctrl-C always ends the
// process at once. stop releases the signals.
func signalContext(force func()) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-ch:
		case <-done:
			return
		}
		cancel()
		select {
		case <-ch:
			force()
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		cancel()
	}
}
