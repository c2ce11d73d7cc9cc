package sbxtest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
)

// StartMain brings up an environment outside a test — a TestMain whose
// Example functions connect to it as a user would — and returns it with
// the function that stops it. It sets Options.Listen, so that Env.URL is
// a TCP URL. A failure during start-up is returned, not fatal.
func StartMain(opts Options) (env *Env, stop func(), err error) {
	opts.Listen = true
	tb := &mainTB{}
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(mainFatal)
			if !ok {
				panic(r)
			}
			tb.stop()
			env, stop, err = nil, nil, f.err
		}
	}()
	env = Start(tb, opts)
	return env, tb.stop, nil
}

// mainFatal is how mainTB's Fatal unwinds Start.
type mainFatal struct{ err error }

// mainTB is the part of testing.TB that Start uses, for use outside a
// test; any other method panics (the embedded TB is nil).
type mainTB struct {
	testing.TB
	mu       sync.Mutex
	cleanups []func()
	dirs     []string
	ctx      context.Context
	cancel   context.CancelFunc
}

// Context is done when the environment stops, as a test's is before its
// cleanups run.
func (m *mainTB) Context() context.Context {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ctx == nil {
		m.ctx, m.cancel = context.WithCancel(context.Background()) // the environment's own root: no caller outside a test
	}
	return m.ctx
}

func (m *mainTB) Helper()      {}
func (m *mainTB) Name() string { return "sbxtest-main" }
func (m *mainTB) Fatal(args ...any) {
	panic(mainFatal{fmt.Errorf("sbxtest: %s", fmt.Sprint(args...))})
}
func (m *mainTB) Fatalf(format string, args ...any) {
	panic(mainFatal{fmt.Errorf("sbxtest: "+format, args...)})
}
func (m *mainTB) Error(args ...any) { fmt.Fprintln(os.Stderr, append([]any{"sbxtest:"}, args...)...) }
func (m *mainTB) Errorf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "sbxtest: "+format+"\n", args...)
}
func (m *mainTB) Log(args ...any)                 {}
func (m *mainTB) Logf(format string, args ...any) {}
func (m *mainTB) Cleanup(f func()) {
	m.mu.Lock()
	m.cleanups = append(m.cleanups, f)
	m.mu.Unlock()
}

func (m *mainTB) TempDir() string {
	d, err := os.MkdirTemp("", "sbxtest-")
	if err != nil {
		m.Fatal(err)
	}
	m.mu.Lock()
	m.dirs = append(m.dirs, d)
	m.mu.Unlock()
	return d
}

// stop runs the cleanups, last registered first, then removes the
// temporary directories.
func (m *mainTB) stop() {
	m.mu.Lock()
	cleanups, dirs := m.cleanups, m.dirs
	m.cleanups, m.dirs = nil, nil
	if m.cancel != nil {
		m.cancel()
	}
	m.mu.Unlock()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	for _, d := range dirs {
		_ = os.RemoveAll(d)
	}
}
