// Package timeres is the time resource type: like Concourse's time resource it
// emits a new version every interval and/or once in a daily time range.
package timeres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
	// The images carry no zoneinfo: embed it so source.location works.
	_ "time/tzdata"

	"github.com/porter-ci/porter/pkg/resource"
)

// Source is the resource's source. At least one of interval or start/stop is needed.
type Source struct {
	// Interval between versions ("1h", "10m", "1s").
	Interval *resource.Duration `json:"interval"`
	// Start and Stop bound the daily range in which versions are emitted
	// ("15:04", "1504", "3:04 PM", "3PM"); both or neither. Stop before Start
	// wraps past midnight.
	Start string `json:"start"`
	Stop  string `json:"stop"`
	// Location is the IANA zone of Start, Stop and Days (default UTC).
	Location string `json:"location"`
	// Days limits versions to these weekdays ("Monday" ... "Sunday").
	Days []string `json:"days"`
	// InitialVersion emits the current time on the first check even outside
	// the range, so a job can run before the first window.
	InitialVersion bool `json:"initial_version"`
}

// VersionKey is the version's only key; the value is RFC 3339 in UTC.
const VersionKey = "time"

// Type is the time resource type. Now is the clock (time.Now when nil).
type Type struct {
	Now func() time.Time
}

// New returns the time type on the real clock.
func New() *Type { return &Type{Now: time.Now} }

type config struct {
	interval    time.Duration
	hasRange    bool
	start, stop int // minutes after midnight
	loc         *time.Location
	days        map[time.Weekday]bool
	initial     bool
}

func parseSource(raw json.RawMessage) (config, error) {
	var s Source
	if err := resource.Decode("time source", raw, &s); err != nil {
		return config{}, err
	}
	c := config{loc: time.UTC, initial: s.InitialVersion}
	if s.Interval != nil {
		c.interval = time.Duration(*s.Interval)
		if c.interval <= 0 {
			return c, errors.New("source.interval must be positive")
		}
	}
	if s.Location != "" {
		loc, err := time.LoadLocation(s.Location)
		if err != nil {
			return c, fmt.Errorf("source.location %q: %w", s.Location, err)
		}
		c.loc = loc
	}
	switch {
	case s.Start != "" && s.Stop != "":
		var err error
		if c.start, err = parseTimeOfDay(s.Start); err != nil {
			return c, fmt.Errorf("source.start: %w", err)
		}
		if c.stop, err = parseTimeOfDay(s.Stop); err != nil {
			return c, fmt.Errorf("source.stop: %w", err)
		}
		if c.start == c.stop {
			return c, fmt.Errorf("source.start and source.stop are both %s: the range is empty", s.Start)
		}
		c.hasRange = true
	case s.Start != "" || s.Stop != "":
		return c, errors.New("source.start and source.stop go together: set both or neither")
	}
	if c.interval == 0 && !c.hasRange {
		return c, errors.New("time source needs interval, or start and stop")
	}
	if len(s.Days) > 0 {
		c.days = map[time.Weekday]bool{}
		for _, d := range s.Days {
			wd, err := parseWeekday(d)
			if err != nil {
				return c, fmt.Errorf("source.days: %w", err)
			}
			c.days[wd] = true
		}
	}
	return c, nil
}

var timeOfDayLayouts = []string{"15:04", "1504", "3:04PM", "3:04 PM", "3PM", "3 PM", "3:04pm", "3:04 pm", "3pm", "3 pm"}

func parseTimeOfDay(s string) (int, error) {
	for _, layout := range timeOfDayLayouts {
		if t, err := time.Parse(layout, strings.TrimSpace(s)); err == nil {
			return t.Hour()*60 + t.Minute(), nil
		}
	}
	return 0, fmt.Errorf("%q is not a time of day like 15:04, 1504, 3:04 PM or 3PM", s)
}

func parseWeekday(s string) (time.Weekday, error) {
	for d := time.Sunday; d <= time.Saturday; d++ {
		if strings.EqualFold(d.String(), s) {
			return d, nil
		}
	}
	return 0, fmt.Errorf("%q is not a day of the week (Monday ... Sunday)", s)
}

// rangeStart is the start of the range that holds now, and whether now is in
// one at all (day of the week included).
func (c config) rangeStart(now time.Time) (time.Time, bool) {
	now = now.In(c.loc)
	if !c.hasRange {
		return time.Time{}, c.days == nil || c.days[now.Weekday()]
	}
	midnight := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, c.loc)
	minute := now.Hour()*60 + now.Minute()
	var start time.Time
	switch {
	case c.start < c.stop && minute >= c.start && minute < c.stop:
		start = midnight.Add(time.Duration(c.start) * time.Minute)
	case c.start > c.stop && minute >= c.start: // wrapped range, before midnight
		start = midnight.Add(time.Duration(c.start) * time.Minute)
	case c.start > c.stop && minute < c.stop: // wrapped range, after midnight: it began yesterday
		start = midnight.AddDate(0, 0, -1).Add(time.Duration(c.start) * time.Minute)
	default:
		return time.Time{}, false
	}
	// The day that counts is the one the range started on.
	if c.days != nil && !c.days[start.Weekday()] {
		return time.Time{}, false
	}
	return start, true
}

// due reports whether a new version is due at now after the previous one.
func (c config) due(prev, now time.Time) bool {
	start, in := c.rangeStart(now)
	if !in {
		return false
	}
	if prev.IsZero() {
		return true
	}
	if c.interval > 0 {
		return now.Sub(prev) >= c.interval
	}
	// A range without an interval: once per range.
	return prev.Before(start)
}

func parseVersion(v resource.Version) (time.Time, error) {
	s, ok := v[VersionKey]
	if !ok {
		return time.Time{}, fmt.Errorf("version %v has no %q key", v, VersionKey)
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("version time %q: %w", s, err)
	}
	return t, nil
}

func format(t time.Time) resource.Version {
	return resource.Version{VersionKey: t.UTC().Format(time.RFC3339Nano)}
}

func (t *Type) now() time.Time {
	if t.Now == nil {
		return time.Now()
	}
	return t.Now()
}

// Check emits the given version (if any) and, when one is due, the current time.
func (t *Type) Check(ctx context.Context, req resource.CheckRequest, log io.Writer) ([]resource.Version, error) {
	c, err := parseSource(req.Source)
	if err != nil {
		return nil, err
	}
	now := t.now()
	var prev time.Time
	versions := []resource.Version{}
	if req.Version != nil {
		if prev, err = parseVersion(req.Version); err != nil {
			return nil, err
		}
		versions = append(versions, format(prev))
	} else if c.initial {
		return []resource.Version{format(now)}, nil
	}
	if c.due(prev, now) {
		versions = append(versions, format(now))
	}
	return versions, nil
}

// In writes the version's time to DIR/timestamp and the request to DIR/input.
func (t *Type) In(ctx context.Context, dir string, req resource.InRequest, log io.Writer) (resource.Response, error) {
	if _, err := parseSource(req.Source); err != nil {
		return resource.Response{}, err
	}
	if err := resource.Decode("time get params", req.Params, &struct{}{}); err != nil {
		return resource.Response{}, err
	}
	at := t.now()
	if req.Version != nil {
		var err error
		if at, err = parseVersion(req.Version); err != nil {
			return resource.Response{}, err
		}
	}
	v := format(at)
	input, err := json.Marshal(req)
	if err != nil {
		return resource.Response{}, fmt.Errorf("encode the request: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "timestamp"), []byte(v[VersionKey]+"\n"), 0o644); err != nil {
		return resource.Response{}, fmt.Errorf("write timestamp: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "input"), input, 0o644); err != nil {
		return resource.Response{}, fmt.Errorf("write input: %w", err)
	}
	return resource.Response{Version: v}, nil
}

// Out emits the current time.
func (t *Type) Out(ctx context.Context, dir string, req resource.OutRequest, log io.Writer) (resource.Response, error) {
	if _, err := parseSource(req.Source); err != nil {
		return resource.Response{}, err
	}
	if err := resource.Decode("time put params", req.Params, &struct{}{}); err != nil {
		return resource.Response{}, err
	}
	return resource.Response{Version: format(t.now())}, nil
}
