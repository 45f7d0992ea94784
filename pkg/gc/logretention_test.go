package gc

import (
	"fmt"
	"testing"
	"time"

	"github.com/porter-ci/porter/pkg/db"
)

func TestLogRetentionFor(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits LogRetentionLimits
		config string
		want   LogRetention
	}{
		{"nothing said", LogRetentionLimits{}, `{"name":"j"}`, LogRetention{}},
		{"the job's", LogRetentionLimits{}, `{"build_log_retention":{"builds":5,"days":2,"minimum_succeeded_builds":1}}`, LogRetention{5, 2, 1}},
		{"the deprecated field", LogRetentionLimits{}, `{"build_logs_to_retain":7}`, LogRetention{Builds: 7}},
		{"the default", LogRetentionLimits{DefaultBuilds: 10, DefaultDays: 3}, `{}`, LogRetention{10, 3, 0}},
		{"capped", LogRetentionLimits{MaxBuilds: 20, MaxDays: 4}, `{"build_log_retention":{"builds":50,"days":9}}`, LogRetention{20, 4, 0}},
		{"under the cap", LogRetentionLimits{MaxBuilds: 20}, `{"build_log_retention":{"builds":5}}`, LogRetention{Builds: 5}},
		{"negative values keep everything", LogRetentionLimits{}, `{"build_log_retention":{"builds":-1,"days":-2,"minimum_succeeded_builds":-3}}`, LogRetention{}},
		{"the cap when the job says nothing", LogRetentionLimits{MaxBuilds: 20}, `{}`, LogRetention{Builds: 20}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.limits.For([]byte(tc.config))
			if err != nil || got != tc.want {
				t.Fatalf("For(%s) = %+v, %v; want %+v", tc.config, got, err, tc.want)
			}
		})
	}
	if _, err := (LogRetentionLimits{}).For([]byte(`{"build_log_retention":"many"}`)); err == nil {
		t.Fatal("a retention that is not an object was accepted")
	}
}

func TestLogRetentionReap(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	// Builds 10 (newest) to 1, ended a day apart, 10 still running; even
	// ones succeeded.
	var builds []db.LoggedBuild
	for id := int64(10); id >= 1; id-- {
		b := db.LoggedBuild{ID: id, Status: "failed", EndTime: now.Add(-time.Duration(10-id) * 24 * time.Hour).Add(-time.Hour)}
		if id%2 == 0 {
			b.Status = "succeeded"
		}
		if id == 10 {
			b.EndTime = time.Time{}
		}
		builds = append(builds, b)
	}
	for _, tc := range []struct {
		name string
		r    LogRetention
		want string
	}{
		{"keep all", LogRetention{}, "[]"},
		{"3 builds (the running one does not count)", LogRetention{Builds: 3}, "[6 5 4 3 2 1]"},
		// 9 ended 1 day and an hour ago, 8 two days and an hour ago.
		{"2 days", LogRetention{Days: 2}, "[8 7 6 5 4 3 2 1]"},
		// 6 is young enough but would be a fourth: the count caps the days.
		{"3 builds and 5 days", LogRetention{Builds: 3, Days: 5}, "[5 4 3 2 1 6]"},
		// Kept: 9, 8 and 6; 7 makes way for the second succeeded build.
		{"3 builds with 2 succeeded among them", LogRetention{Builds: 3, MinimumSucceeded: 2}, "[5 4 3 2 1 7]"},
		// Kept: the 4 newest succeeded builds, even above the count.
		{"2 builds with 4 succeeded", LogRetention{Builds: 2, MinimumSucceeded: 4}, "[7 5 3 1 9]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fmt.Sprint(tc.r.Reap(builds, now)); got != tc.want {
				t.Fatalf("Reap = %s, want %s", got, tc.want)
			}
		})
	}
}
