package testenv

import (
	"bytes"
	"io"
	"sync"
)

// Buffer collects a process's or a command's output while a test reads it.
// The zero value is ready to use; Tee, when set, also receives every write
// (e.g. GinkgoWriter, so output shows up with a failure).
type Buffer struct {
	Tee io.Writer

	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.Tee != nil {
		_, _ = b.Tee.Write(p)
	}
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
