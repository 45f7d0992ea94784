package entrypoint

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/porter-ci/porter/pkg/sidecar/controlpb"
)

// memoryCgroup reads the step container's memory cgroup: how many processes
// the kernel's OOM killer has killed in it, and its limit. When the OOM
// killer kills the step's process rather than the container's first process
// (the entrypoint), the kubelet sees no OOMKilled container: this is how the
// entrypoint tells an out-of-memory kill from any other SIGKILL.
type memoryCgroup interface {
	// OOMKills is the cgroup's count of OOM kills so far.
	OOMKills() (uint64, error)
	// Limit is the cgroup's memory limit in bytes; ok is false when it has none.
	Limit() (limit int64, ok bool, err error)
	// Usage is the container's peak memory and CPU time so far.
	Usage() (Usage, error)
}

// cgroupFS is the container's own memory cgroup under root (the container
// runtime mounts the container's cgroup at /sys/fs/cgroup): cgroup v2's
// memory.events and memory.max, or cgroup v1's memory/memory.oom_control
// and memory/memory.limit_in_bytes.
type cgroupFS struct{ root string }

const cgroupRoot = "/sys/fs/cgroup"

func (c cgroupFS) v2() bool {
	_, err := os.Stat(filepath.Join(c.root, "memory.events"))
	return err == nil
}

func (c cgroupFS) OOMKills() (uint64, error) {
	file, key := filepath.Join(c.root, "memory", "memory.oom_control"), "oom_kill"
	if c.v2() {
		file = filepath.Join(c.root, "memory.events")
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return 0, fmt.Errorf("read the container's OOM kill count: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if ok && name == key {
			n, err := strconv.ParseUint(strings.TrimSpace(value), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse %s in %s: %w", key, file, err)
			}
			return n, nil
		}
	}
	// Kernels before 4.13 do not count kills.
	return 0, fmt.Errorf("%s has no %s count: %w", file, key, fs.ErrNotExist)
}

// unlimitedV1 is where cgroup v1's "no limit" starts (the kernel reports
// the largest page-aligned int64).
const unlimitedV1 = int64(1) << 62

func (c cgroupFS) Limit() (int64, bool, error) {
	file := filepath.Join(c.root, "memory", "memory.limit_in_bytes")
	if c.v2() {
		file = filepath.Join(c.root, "memory.max")
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return 0, false, fmt.Errorf("read the container's memory limit: %w", err)
	}
	s := strings.TrimSpace(string(data))
	if s == "max" {
		return 0, false, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("parse the memory limit in %s: %w", file, err)
	}
	if n <= 0 || n >= unlimitedV1 {
		return 0, false, nil
	}
	return n, true, nil
}

// oomWatch counts the OOM kills of the process's lifetime.
type oomWatch struct {
	cg     memoryCgroup
	before uint64
	ok     bool // the count could be read at the start
}

func startOOMWatch(cg memoryCgroup) oomWatch {
	if cg == nil {
		return oomWatch{}
	}
	n, err := cg.OOMKills()
	return oomWatch{cg: cg, before: n, ok: err == nil}
}

// mark records on a failed process's exit whether the OOM killer killed
// something of the step while it ran, and the limit it exceeded.
func (w oomWatch) mark(exited *controlpb.Exited) {
	if !w.ok || exited.GetExitStatus() == 0 || exited.GetStartError() != "" {
		return
	}
	after, err := w.cg.OOMKills()
	if err != nil || after <= w.before {
		return
	}
	exited.OomKilled = true
	if limit, ok, err := w.cg.Limit(); err == nil && ok {
		exited.MemoryLimit = limit
	}
}

// OutOfMemoryMessage says that the step's process was killed for exceeding
// the container's memory limit, naming it when known (0: unknown).
func OutOfMemoryMessage(limit int64) string {
	if limit <= 0 {
		return "out of memory: the step's process was killed by the kernel's OOM killer"
	}
	return fmt.Sprintf("out of memory: the step's process was killed for exceeding its memory limit of %s (%d bytes)", quantity(limit), limit)
}

// quantity writes bytes as Kubernetes does where it divides evenly (64Mi).
func quantity(n int64) string {
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"Ti", 1 << 40}, {"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}} {
		if n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}
