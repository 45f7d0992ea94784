package action_test

import (
	"strings"
	"testing"
	"time"

	"github.com/porter-ci/porter/pkg/action"
)

func validAction() *action.Action {
	return &action.Action{
		StepID:  "b1-s1",
		Build:   action.Build{ID: "1", Team: "main"},
		Type:    "task",
		Image:   "busybox",
		Run:     action.Run{Path: "echo", Args: []string{"hi"}},
		WorkDir: "/tmp/build/b1-s1",
	}
}

func TestValidatePaths(t *testing.T) {
	for _, tc := range []struct {
		name    string
		modify  func(a *action.Action)
		wantErr string // empty: valid
	}{
		{
			name: "output shares an input's path",
			modify: func(a *action.Action) {
				a.Inputs = []action.Input{{Name: "repo", Path: "repo", Key: "k"}}
				a.Outputs = []action.Output{{Name: "repo", Path: "./repo"}}
			},
		},
		{
			name: "two inputs share a path",
			modify: func(a *action.Action) {
				a.Inputs = []action.Input{{Name: "a", Path: "x", Key: "k"}, {Name: "b", Path: "x/", Key: "k"}}
			},
			wantErr: `input "b": path "x/" is already used by input "a"`,
		},
		{
			name: "two outputs share a path",
			modify: func(a *action.Action) {
				a.Outputs = []action.Output{{Name: "a", Path: "out"}, {Name: "b", Path: "out"}}
			},
			wantErr: `output "b": path "out" is already used by output "a"`,
		},
		{
			name: "two caches share a path",
			modify: func(a *action.Action) {
				a.Caches = []action.Cache{{Path: "c", Key: "k"}, {Path: "c", Key: "k"}}
			},
			wantErr: `cache "c": path "c" is already used by cache "c"`,
		},
		{
			name: "cache shares an input's path",
			modify: func(a *action.Action) {
				a.Inputs = []action.Input{{Name: "a", Path: "x", Key: "k"}}
				a.Caches = []action.Cache{{Path: "x", Key: "k"}}
			},
			wantErr: `cache "x": path "x" is already used by input "a"`,
		},
		{
			name: "cache shares an output's path",
			modify: func(a *action.Action) {
				a.Outputs = []action.Output{{Name: "a", Path: "x"}}
				a.Caches = []action.Cache{{Path: "x", Key: "k"}}
			},
			wantErr: `cache "x": path "x" is already used by output "a"`,
		},
		{
			name: "path leaves the work dir",
			modify: func(a *action.Action) {
				a.Outputs = []action.Output{{Name: "a", Path: "../x"}}
			},
			wantErr: "leaves the working directory",
		},
		{
			name:    "negative timeout",
			modify:  func(a *action.Action) { a.Timeout = action.Duration{Duration: -time.Second} },
			wantErr: "is negative",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := validAction()
			tc.modify(a)
			err := a.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Validate: %v", err)
			case tc.wantErr != "" && err == nil:
				t.Errorf("Validate accepted the action, want %q", tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Errorf("Validate = %v, want it to say %q", err, tc.wantErr)
			}
		})
	}
}

func TestEncodeDecode(t *testing.T) {
	a := validAction()
	a.Timeout = action.Duration{Duration: 90 * time.Minute}
	data, err := a.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := action.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if got.Timeout.Duration != a.Timeout.Duration || got.StepID != a.StepID {
		t.Errorf("round trip gave %+v, want %+v", got, a)
	}
}
