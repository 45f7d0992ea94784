package loadvarstep

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/porter-ci/porter/pkg/atc/exec/stepplan"
	"github.com/porter-ci/porter/pkg/concourse"
)

func TestLoadVarFormats(t *testing.T) {
	for _, tc := range []struct {
		file, format, body string
		want               any
		err                string
	}{
		{file: "a/v.json", body: `{"n": 10, "s": "x"}`, want: map[string]any{"n": json.Number("10"), "s": "x"}},
		{file: "a/v.yml", body: "num: 10\nlist: [a, b]\n", want: map[string]any{"num": json.Number("10"), "list": []any{"a", "b"}}},
		{file: "a/v.txt", body: "  padded \n", want: "padded"},
		{file: "a/v", format: "raw", body: "  padded \n", want: "  padded \n"},
		{file: "a/v.json", format: "trim", body: " {} ", want: "{}"},
		{file: "a/v.json", body: `{"a": 1} {"b": 2}`, err: "characters found after the top-level value"},
		{file: "a/v.json", body: `{`, err: "invalid json"},
		{file: "a/v", format: "toml", err: `format "toml": want json, yaml, trim or raw`},
	} {
		lv := &concourse.LoadVarPlan{Name: "v", File: tc.file, Format: tc.format}
		format, err := stepplan.LoadVarFormat(lv)
		var got any
		if err == nil {
			got, err = stepplan.ParseVarFile([]byte(tc.body), format)
		}
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s (%s): err %v, want %q", tc.file, tc.format, err, tc.err)
			}
		case err != nil:
			t.Errorf("%s (%s): %v", tc.file, tc.format, err)
		case !reflect.DeepEqual(got, tc.want):
			t.Errorf("%s (%s): %#v, want %#v", tc.file, tc.format, got, tc.want)
		}
	}
}
