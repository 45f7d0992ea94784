package checkpods

import (
	"errors"
	"testing"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/events/eventspb"
)

func TestResultFinished(t *testing.T) {
	for _, tc := range []struct {
		res    Result
		result eventspb.Result
		msg    string
	}{
		{Result{NotFound: true, Error: "exec: no such file"}, eventspb.Result_RESULT_ERRORED, "the resource type's image has no /opt/resource/check"},
		{Result{Error: "permission denied"}, eventspb.Result_RESULT_ERRORED, `check "repo": permission denied`},
		{Result{ExitStatus: 2}, eventspb.Result_RESULT_FAILED, ""},
		{Result{StdoutErr: errors.New("not JSON")}, eventspb.Result_RESULT_ERRORED, "not JSON"},
		{Result{Stdout: []byte(`[{"ref":"1"}]`)}, eventspb.Result_RESULT_SUCCEEDED, ""},
	} {
		fin := tc.res.Finished("repo", "/opt/resource/check")
		if fin.GetResult() != tc.result || fin.GetError() != tc.msg {
			t.Errorf("%+v: finished %v %q, want %v %q", tc.res, fin.GetResult(), fin.GetError(), tc.result, tc.msg)
		}
	}
}

func TestPooled(t *testing.T) {
	var off *Pool
	p := &Pool{}
	check := &action.Action{Type: action.KindCheck}
	if off.Pooled(check) || !p.Pooled(check) {
		t.Error("a check is pooled only when pooling is on")
	}
	for _, a := range []*action.Action{
		{Type: action.KindGet},
		{Type: action.KindCheck, Privileged: true},
		{Type: action.KindCheck, Platform: action.PlatformWindows},
	} {
		if p.Pooled(a) {
			t.Errorf("%+v is pooled", a)
		}
	}
	if NewPool(nil, 1, 0) != nil {
		t.Error("a pool without sessions")
	}
}
