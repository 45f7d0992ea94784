package entrypoint

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/porter-ci/porter/pkg/sidecar/controlpb"
)

// Usage is what the step's container used up to the process's exit, as its
// cgroup counts it: the container holds the step's process tree and the
// entrypoint (a few MiB), nothing else. A zero field is one the kernel does
// not offer (cgroup v2's memory.peak needs Linux 5.19): never a guess.
type Usage struct {
	MemoryPeak   int64 // bytes, page cache included
	CPUUsageUsec int64
}

// Usage reads the container's peak memory and CPU time: cgroup v2's
// memory.peak and cpu.stat (usage_usec), or cgroup v1's
// memory/memory.max_usage_in_bytes and cpuacct/cpuacct.usage (ns). What
// cannot be read is left zero and said in err.
func (c cgroupFS) Usage() (Usage, error) {
	var u Usage
	var errs []string
	if c.v2() {
		peak, err := readInt(filepath.Join(c.root, "memory.peak"))
		if err != nil {
			errs = append(errs, err.Error())
		}
		cpu, err := readKey(filepath.Join(c.root, "cpu.stat"), "usage_usec")
		if err != nil {
			errs = append(errs, err.Error())
		}
		u = Usage{MemoryPeak: peak, CPUUsageUsec: cpu}
	} else {
		peak, err := readInt(filepath.Join(c.root, "memory", "memory.max_usage_in_bytes"))
		if err != nil {
			errs = append(errs, err.Error())
		}
		var ns int64
		for _, dir := range []string{"cpuacct", "cpu,cpuacct"} {
			if ns, err = readInt(filepath.Join(c.root, dir, "cpuacct.usage")); err == nil {
				break
			}
		}
		if err != nil {
			errs = append(errs, err.Error())
		}
		u = Usage{MemoryPeak: peak, CPUUsageUsec: ns / 1000}
	}
	if len(errs) > 0 {
		return u, fmt.Errorf("read the container's resource usage: %s", strings.Join(errs, "; "))
	}
	return u, nil
}

// markUsage records the container's usage on the process's exit.
func markUsage(cg memoryCgroup, exited *controlpb.Exited) error {
	if cg == nil {
		return nil
	}
	u, err := cg.Usage()
	exited.MemoryPeak, exited.CpuUsageUsec = u.MemoryPeak, u.CPUUsageUsec
	return err
}

// readInt reads a file holding one non-negative integer.
func readInt(file string) (int64, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("parse %s: %q is not a count", file, strings.TrimSpace(string(data)))
	}
	return n, nil
}

// readKey reads the integer of one "key value" line of a flat-keyed file.
func readKey(file, key string) (int64, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || name != key {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("parse %s in %s: %q is not a count", key, file, value)
		}
		return n, nil
	}
	return 0, fmt.Errorf("%s has no %s", file, key)
}
