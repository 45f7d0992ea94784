package pipeline

import (
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/porter-ci/porter/pkg/concourse"
)

// Diff writes what changes from before to after, section by section and
// item by item, as Concourse shows it in a set_pipeline step's log ("job
// j has changed:" and the YAML lines with - and +). It reports whether
// anything changed.
func Diff(w io.Writer, before, after *concourse.Config) bool {
	changed := false
	section := func(title, label string, a, b []diffItem) {
		var out strings.Builder
		for _, d := range diffNamed(a, b) {
			d.render(&out, label)
		}
		if out.Len() > 0 {
			changed = true
			fmt.Fprintf(w, "%s:\n%s\n", title, indent(out.String()))
		}
	}
	section("groups", "group", namedList(before.Groups, func(g concourse.GroupConfig) string { return g.Name }),
		namedList(after.Groups, func(g concourse.GroupConfig) string { return g.Name }))
	section("var sources", "var source", namedList(before.VarSources, func(m map[string]any) string { s, _ := m["name"].(string); return s }),
		namedList(after.VarSources, func(m map[string]any) string { s, _ := m["name"].(string); return s }))
	section("resources", "resource", namedList(before.Resources, func(r concourse.ResourceConfig) string { return r.Name }),
		namedList(after.Resources, func(r concourse.ResourceConfig) string { return r.Name }))
	section("resource types", "resource type", namedList(before.ResourceTypes, func(t concourse.ResourceType) string { return t.Name }),
		namedList(after.ResourceTypes, func(t concourse.ResourceType) string { return t.Name }))
	section("jobs", "job", namedList(before.Jobs, func(j concourse.JobConfig) string { return j.Name }),
		namedList(after.Jobs, func(j concourse.JobConfig) string { return j.Name }))
	if !sameJSON(before.Display, after.Display) {
		changed = true
		var out strings.Builder
		(itemDiff{before: yamlOf(before.Display), after: yamlOf(after.Display), name: ""}).render(&out, "display configuration")
		fmt.Fprintf(w, "%s\n", out.String())
	}
	return changed
}

type diffItem struct {
	name string
	yaml string
}

func namedList[T any](items []T, name func(T) string) []diffItem {
	out := make([]diffItem, 0, len(items))
	for _, it := range items {
		out = append(out, diffItem{name: name(it), yaml: yamlOf(it)})
	}
	return out
}

func yamlOf(v any) string {
	if v == nil || (reflect.ValueOf(v).Kind() == reflect.Map && reflect.ValueOf(v).Len() == 0) {
		return ""
	}
	b, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Sprintf("(cannot show: %v)\n", err)
	}
	return string(b)
}

func sameJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// itemDiff is one item that was added (before ""), removed (after "") or
// changed.
type itemDiff struct {
	name          string
	before, after string
}

func diffNamed(a, b []diffItem) []itemDiff {
	var out []itemDiff
	inB := map[string]string{}
	for _, n := range b {
		inB[n.name] = n.yaml
	}
	inA := map[string]bool{}
	for _, n := range a {
		inA[n.name] = true
		after, ok := inB[n.name]
		switch {
		case !ok:
			out = append(out, itemDiff{name: n.name, before: n.yaml})
		case after != n.yaml:
			out = append(out, itemDiff{name: n.name, before: n.yaml, after: after})
		}
	}
	for _, n := range b {
		if !inA[n.name] {
			out = append(out, itemDiff{name: n.name, after: n.yaml})
		}
	}
	return out
}

func (d itemDiff) render(w *strings.Builder, label string) {
	title := label
	if d.name != "" {
		title += " " + d.name
	}
	switch {
	case d.before == "":
		fmt.Fprintf(w, "%s has been added:\n", title)
	case d.after == "":
		fmt.Fprintf(w, "%s has been removed:\n", title)
	default:
		fmt.Fprintf(w, "%s has changed:\n", title)
	}
	w.WriteString(lineDiff(d.before, d.after))
}

// lineDiff writes b against a line by line: unchanged lines indented,
// removed ones with "- ", added ones with "+ " (a longest common
// subsequence; configs are small).
func lineDiff(a, b string) string {
	x, y := splitLines(a), splitLines(b)
	// lcs[i][j] is the common length of x[i:] and y[j:].
	lcs := make([][]int, len(x)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(y)+1)
	}
	for i := len(x) - 1; i >= 0; i-- {
		for j := len(y) - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out strings.Builder
	i, j := 0, 0
	for i < len(x) || j < len(y) {
		switch {
		case i < len(x) && j < len(y) && x[i] == y[j]:
			out.WriteString("  " + x[i] + "\n")
			i++
			j++
		case i < len(x) && (j == len(y) || lcs[i+1][j] >= lcs[i][j+1]):
			out.WriteString("- " + x[i] + "\n")
			i++
		default:
			out.WriteString("+ " + y[j] + "\n")
			j++
		}
	}
	return out.String()
}

func splitLines(s string) []string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func indent(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = "  " + l
	}
	return strings.Join(lines, "\n") + "\n"
}
