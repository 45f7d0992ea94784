package entrypoint

import (
	"strings"
	"testing"

	"github.com/porter-ci/porter/pkg/sidecar/controlpb"
)

func TestCgroupUsageReadsV2V1AndSaysWhatIsMissing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		files   map[string]string
		want    Usage
		missing string // in the error; "" for none
	}{
		{name: "v2", files: map[string]string{
			"memory.events": "oom_kill 0\n",
			"memory.peak":   "71303168\n",
			"cpu.stat":      "usage_usec 1234567\nuser_usec 1000000\nsystem_usec 234567\n",
		}, want: Usage{MemoryPeak: 71303168, CPUUsageUsec: 1234567}},
		{name: "v2 on a kernel before memory.peak", files: map[string]string{
			"memory.events": "oom_kill 0\n",
			"cpu.stat":      "usage_usec 42\n",
		}, want: Usage{CPUUsageUsec: 42}, missing: "memory.peak"},
		{name: "v1", files: map[string]string{
			"memory/memory.max_usage_in_bytes": "68157440\n",
			"cpuacct/cpuacct.usage":            "2500000000\n",
		}, want: Usage{MemoryPeak: 68157440, CPUUsageUsec: 2500000}},
		{name: "v1 with cpu and cpuacct mounted together", files: map[string]string{
			"memory/memory.max_usage_in_bytes": "4096\n",
			"cpu,cpuacct/cpuacct.usage":        "3000\n",
		}, want: Usage{MemoryPeak: 4096, CPUUsageUsec: 3}},
		{name: "v1 without cpuacct", files: map[string]string{
			"memory/memory.max_usage_in_bytes": "4096\n",
		}, want: Usage{MemoryPeak: 4096}, missing: "cpuacct.usage"},
		{name: "a file that holds no count", files: map[string]string{
			"memory.events": "oom_kill 0\n",
			"memory.peak":   "lots\n",
			"cpu.stat":      "user_usec 1\n",
		}, missing: "memory.peak"},
		{name: "nothing mounted", files: map[string]string{}, missing: "memory.max_usage_in_bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := writeCgroup(t, tc.files).Usage()
			if got != tc.want {
				t.Errorf("usage = %+v, want %+v", got, tc.want)
			}
			switch {
			case tc.missing == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tc.missing != "" && (err == nil || !strings.Contains(err.Error(), tc.missing)):
				t.Errorf("error = %v, want one naming %s", err, tc.missing)
			}
		})
	}
}

func TestMarkUsageRecordsWhatWasRead(t *testing.T) {
	cg := writeCgroup(t, map[string]string{
		"memory.events": "oom_kill 0\n",
		"memory.peak":   "1048576\n",
		"cpu.stat":      "usage_usec 900\n",
	})
	e := &controlpb.Exited{ExitStatus: 0}
	if err := markUsage(cg, e); err != nil {
		t.Fatal(err)
	}
	if e.GetMemoryPeak() != 1<<20 || e.GetCpuUsageUsec() != 900 {
		t.Errorf("exited = %v, want memory_peak 1048576 and cpu_usage_usec 900", e)
	}
	if err := markUsage(nil, e); err != nil {
		t.Errorf("no cgroup: %v", err)
	}
}
