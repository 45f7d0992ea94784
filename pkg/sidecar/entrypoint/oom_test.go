package entrypoint

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/porter-ci/porter/pkg/sidecar/controlpb"
)

// writeCgroup lays out a container's memory cgroup files under a temp root.
func writeCgroup(t *testing.T, files map[string]string) cgroupFS {
	t.Helper()
	root := t.TempDir()
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return cgroupFS{root: root}
}

func TestCgroupFSReadsV1AndV2(t *testing.T) {
	for _, tc := range []struct {
		name      string
		files     map[string]string
		kills     uint64
		limit     int64
		hasLimit  bool
		killsFail bool
	}{
		{name: "v1 with a limit", files: map[string]string{
			"memory/memory.oom_control":    "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n",
			"memory/memory.limit_in_bytes": "67108864\n",
		}, kills: 3, limit: 64 << 20, hasLimit: true},
		{name: "v1 unlimited", files: map[string]string{
			"memory/memory.oom_control":    "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
			"memory/memory.limit_in_bytes": "9223372036854771712\n",
		}},
		{name: "v1 kernel without a kill count", files: map[string]string{
			"memory/memory.oom_control":    "oom_kill_disable 0\nunder_oom 0\n",
			"memory/memory.limit_in_bytes": "67108864\n",
		}, killsFail: true, limit: 64 << 20, hasLimit: true},
		{name: "v2 with a limit", files: map[string]string{
			"memory.events": "low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n",
			"memory.max":    "134217728\n",
		}, kills: 2, limit: 128 << 20, hasLimit: true},
		{name: "v2 unlimited", files: map[string]string{
			"memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n",
			"memory.max":    "max\n",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cg := writeCgroup(t, tc.files)
			kills, err := cg.OOMKills()
			if tc.killsFail {
				if err == nil {
					t.Fatalf("OOMKills() = %d, want an error", kills)
				}
			} else if err != nil || kills != tc.kills {
				t.Fatalf("OOMKills() = %d, %v; want %d", kills, err, tc.kills)
			}
			limit, ok, err := cg.Limit()
			if err != nil || ok != tc.hasLimit || limit != tc.limit {
				t.Fatalf("Limit() = %d, %v, %v; want %d, %v", limit, ok, err, tc.limit, tc.hasLimit)
			}
		})
	}
}

func TestOOMWatchMarksOnlyAFailedProcessWithANewKill(t *testing.T) {
	const v1 = "memory/memory.oom_control"
	for _, tc := range []struct {
		name          string
		before, after string
		exited        *controlpb.Exited
		want          bool
	}{
		{"killed by the OOM killer", "oom_kill 1\n", "oom_kill 2\n", &controlpb.Exited{ExitStatus: 137, Signal: "killed"}, true},
		{"a child killed, the shell exits 137", "oom_kill 0\n", "oom_kill 1\n", &controlpb.Exited{ExitStatus: 137}, true},
		{"killed by someone else", "oom_kill 1\n", "oom_kill 1\n", &controlpb.Exited{ExitStatus: 137, Signal: "killed"}, false},
		{"succeeded despite a kill", "oom_kill 0\n", "oom_kill 1\n", &controlpb.Exited{ExitStatus: 0}, false},
		{"never started", "oom_kill 0\n", "oom_kill 1\n", &controlpb.Exited{ExitStatus: 127, StartError: "no such file"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cg := writeCgroup(t, map[string]string{v1: tc.before, "memory/memory.limit_in_bytes": "67108864"})
			w := startOOMWatch(cg)
			if err := os.WriteFile(filepath.Join(cg.root, v1), []byte(tc.after), 0o644); err != nil {
				t.Fatal(err)
			}
			w.mark(tc.exited)
			if tc.exited.GetOomKilled() != tc.want {
				t.Fatalf("OomKilled = %v, want %v", tc.exited.GetOomKilled(), tc.want)
			}
			if tc.want && tc.exited.GetMemoryLimit() != 64<<20 {
				t.Fatalf("MemoryLimit = %d, want %d", tc.exited.GetMemoryLimit(), 64<<20)
			}
		})
	}
}

func TestOOMWatchWithoutCgroupMarksNothing(t *testing.T) {
	w := startOOMWatch(cgroupFS{root: t.TempDir()})
	e := &controlpb.Exited{ExitStatus: 137}
	w.mark(e)
	if e.GetOomKilled() {
		t.Fatal("marked an OOM kill without a memory cgroup")
	}
}

func TestOutOfMemoryMessageNamesTheLimit(t *testing.T) {
	for limit, want := range map[int64]string{
		64 << 20:  "out of memory: the step's process was killed for exceeding its memory limit of 64Mi (67108864 bytes)",
		1 << 30:   "out of memory: the step's process was killed for exceeding its memory limit of 1Gi (1073741824 bytes)",
		100000001: "out of memory: the step's process was killed for exceeding its memory limit of 100000001 (100000001 bytes)",
		0:         "out of memory: the step's process was killed by the kernel's OOM killer",
	} {
		if got := OutOfMemoryMessage(limit); got != want {
			t.Errorf("OutOfMemoryMessage(%d) = %q, want %q", limit, got, want)
		}
	}
}
