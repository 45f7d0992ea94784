package pipeline

import (
	"github.com/porter-ci/porter/pkg/concourse"
	"strings"
	"testing"
)

func TestDiff(t *testing.T) {
	parse := func(y string) *concourse.Config {
		c, err := Parse([]byte(y))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	before := parse("jobs:\n- name: a\n  plan: [{task: t, file: f}]\n- name: gone\n  plan: []\n")
	after := parse("jobs:\n- name: a\n  plan: [{task: t, file: g}]\n- name: new\n  plan: []\n")
	var out strings.Builder
	if !Diff(&out, before, after) {
		t.Fatal("no change found")
	}
	got := out.String()
	for _, want := range []string{"jobs:\n", "  job a has changed:\n", "  - - file: f\n  + - file: g\n",
		"  job gone has been removed:\n", "  job new has been added:\n", "+ name: new\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("diff lacks %q:\n%s", want, got)
		}
	}
	out.Reset()
	if Diff(&out, after, after) || out.Len() > 0 {
		t.Errorf("same config: changed, %q", out.String())
	}
}
