package resource

import (
	"encoding/json"
	"fmt"
)

// MaxResponse bounds what a resource script may print on stdout: the
// response is one JSON document held in memory and sent in one event.
const MaxResponse = 4 << 20

// Stdout collects a resource script's stdout, which is its answer to
// the ATC rather than a log: the sidecar's for a step's own process, the
// ATC's for a check run in a pooled check pod.
type Stdout struct {
	script string
	limit  int
	buf    []byte
	over   bool
}

// NewStdout collects script's stdout, up to limit bytes.
func NewStdout(script string, limit int) *Stdout {
	return &Stdout{script: script, limit: limit}
}

// Write keeps data up to the limit; beyond it the response is only
// marked too long (the script keeps running to its end).
func (r *Stdout) Write(data []byte) {
	if r.over {
		return
	}
	if len(r.buf)+len(data) > r.limit {
		r.over = true
		r.buf = nil
		return
	}
	r.buf = append(r.buf, data...)
}

// Body is the response once the script exited zero: valid JSON, or an
// error saying what was wrong with it.
func (r *Stdout) Body() ([]byte, error) {
	if r.over {
		return nil, fmt.Errorf("%s printed more than %d bytes on stdout (its response is limited to %d MiB)", r.script, r.limit, r.limit>>20)
	}
	if !json.Valid(r.buf) {
		var v any
		err := json.Unmarshal(r.buf, &v)
		if len(r.buf) == 0 {
			err = fmt.Errorf("stdout was empty")
		}
		return nil, fmt.Errorf("%s printed invalid JSON: %v; stdout began with %q", r.script, err, head(r.buf, 200))
	}
	return r.buf, nil
}

func head(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}
