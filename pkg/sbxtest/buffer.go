package sbxtest

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer that services' loggers may write to while a
// test reads it: a log sink for tests that look for what must never be
// logged.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String is everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
