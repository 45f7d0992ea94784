package main

import (
	"strings"
	"testing"
)

// steady is n samples of a server that neither grows nor leaks.
func steady(n int) []sample {
	out := make([]sample, n)
	for i := range out {
		out[i] = sample{RSSBytes: 100 << 20, Goroutines: 300, Builds: int64(10 * (i + 1)), DBRows: int64(50 * (i + 1))}
	}
	return out
}

// A check over samples fails, saying why, when there are too few samples
// to judge, and judges once there are enough.
func TestSampleChecksNeedEnoughSamples(t *testing.T) {
	checks := map[string]func(*results, []sample){
		"bounded": func(r *results, s []sample) {
			r.addBounded("bounded", s, func(sm sample) int64 { return sm.RSSBytes }, 1.5, 0, mib)
		},
		"growth": func(r *results, s []sample) {
			r.addGrowth("growth", s, func(sm sample) int64 { return sm.DBRows })
		},
	}
	for name, check := range checks {
		for _, n := range []int{0, 1, minSamples - 1} {
			r := &results{}
			check(r, steady(n))
			if len(r.Checks) != 1 || r.Checks[0].OK || !strings.Contains(r.Checks[0].Detail, "too few samples") {
				t.Errorf("%s over %d samples: %+v, want a failed check saying too few samples", name, n, r.Checks)
			}
		}
		r := &results{}
		check(r, steady(minSamples))
		if len(r.Checks) != 1 || !r.Checks[0].OK {
			t.Errorf("%s over %d steady samples: %+v, want it to pass", name, minSamples, r.Checks)
		}
	}
}
