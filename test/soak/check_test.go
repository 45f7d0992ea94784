package main

import (
	"testing"
	"time"
)

// TestGrowthChecksNeedEnoughSamples: a check that judges growth fails when
// it has too few samples to judge, and judges when it has enough.
func TestGrowthChecksNeedEnoughSamples(t *testing.T) {
	rss := func(sm sample) int64 { return sm.RSSBytes }
	flat := func(n int) []sample {
		out := make([]sample, n)
		for i := range out {
			out[i] = sample{At: time.Unix(int64(i*5), 0), RSSBytes: 100 << 20, Builds: int64(i + 1)}
		}
		return out
	}
	for n, want := range map[int]bool{0: false, 1: false, minSamples - 1: false, minSamples: true, 40: true} {
		var r results
		r.addBounded("rss", flat(n), rss, 1.5, 0, mib)
		r.addGrowth("rows", flat(n), rss)
		if r.ok() != want {
			t.Errorf("%d samples: ok %v, want %v: %+v", n, r.ok(), want, r.Checks)
		}
	}
	// Enough samples, and growth: the check fails.
	grown := flat(minSamples)
	for i := range grown[minSamples/2:] {
		grown[minSamples/2+i].RSSBytes = 400 << 20
	}
	var r results
	r.addBounded("rss", grown, rss, 1.5, 0, mib)
	if r.ok() {
		t.Errorf("growth from 100 to 400 MiB passed: %+v", r.Checks)
	}
}
