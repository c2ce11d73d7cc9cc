//go:build sbxagent_crashhook

package main

import (
	"os"
	"os/signal"
	"syscall"
)

// Built only with the sbxagent_crashhook tag (the worker's tests): SIGUSR2
// makes the agent crash as no recover can catch, a panic on a goroutine of
// its own, so that a test sees what a real fatal crash reports.
func init() {
	crashHook = func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGUSR2)
		go func() {
			<-ch
			panic("crash hook: SIGUSR2")
		}()
	}
}
