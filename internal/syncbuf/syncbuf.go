// Package syncbuf is a bytes.Buffer safe for concurrent use, for tests that read the log
// output a component writes from its own goroutines.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer collects writes from several goroutines; its zero value is ready to use.
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
