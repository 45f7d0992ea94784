package action

import "testing"

func TestKindScript(t *testing.T) {
	for k, want := range map[Kind]string{KindCheck: "check", KindGet: "in", KindPut: "out", KindTask: ""} {
		if got := k.Script(); got != want {
			t.Errorf("%s.Script() = %q, want %q", k, got, want)
		}
	}
}
