// Package logtest collects what a logger or a process writes while a test
// reads it, for the tests of the packages that log.
package logtest

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer safe for writers on other goroutines.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

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
