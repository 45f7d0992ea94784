package cli

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// progressInterval is how often the progress line is redrawn: often enough
// to look alive, rarely enough not to flood a slow terminal.
const progressInterval = 200 * time.Millisecond

// progressLine shows the bytes sent of several transfers on one line of a
// terminal, redrawn in place: "uploading repo: 12.3 MiB, tools: 1.0 MiB".
type progressLine struct {
	w     io.Writer
	verb  string
	names []string

	mu    sync.Mutex
	bytes map[string]int64

	done    chan struct{}
	stopped chan struct{}
	once    sync.Once
}

func newProgressLine(w io.Writer, verb string, names []string) *progressLine {
	p := &progressLine{
		w: w, verb: verb, names: names,
		bytes:   map[string]int64{},
		done:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	go p.loop()
	return p
}

// set records that name has sent n bytes so far; any goroutine may call it.
func (p *progressLine) set(name string, n int64) {
	p.mu.Lock()
	p.bytes[name] = n
	p.mu.Unlock()
}

// stop draws the line a last time and ends it.
func (p *progressLine) stop() {
	p.once.Do(func() {
		close(p.done)
		<-p.stopped
	})
}

func (p *progressLine) loop() {
	defer close(p.stopped)
	t := time.NewTicker(progressInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			p.draw("")
		case <-p.done:
			p.draw("\n")
			return
		}
	}
}

func (p *progressLine) draw(end string) {
	p.mu.Lock()
	parts := make([]string, len(p.names))
	for i, name := range p.names {
		parts[i] = fmt.Sprintf("%s: %s", name, formatBytes(p.bytes[name]))
	}
	p.mu.Unlock()
	// \r and "erase to end of line" redraw the line in place.
	fmt.Fprintf(p.w, "\r\x1b[K%s %s%s", p.verb, strings.Join(parts, ", "), end)
}

// formatBytes renders n in binary units: "512 B", "12.3 MiB".
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
