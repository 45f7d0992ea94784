package inpod_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/events/eventspb"
)

// resourceAction is a resource step (check, get or put) running a shell
// script as its resource script, with request on stdin.
func resourceAction(typ action.Kind, script, request string) *action.Action {
	a := newAction(string(typ), "sh", "-c", script)
	a.Type = typ
	a.Stdin = &request
	return a
}

var _ = Describe("a resource step's processes", func() {
	var atc *testATC
	BeforeEach(func() { atc = startATC() })

	It("gives the script the request on stdin and returns its stdout as the response, not as logs", func() {
		r := resourceAction("check", `req=$(cat); echo "checking" >&2; echo "[{\"ref\":\"1\",\"req\":$(echo "$req" | wc -c)}]"`, `{"source":{"uri":"x"}}`)
		runStep(atc, r, stepOptions{blob: blobCfg}).wait(time.Minute)
		evs, fin := atc.waitFinished(r.StepID, time.Minute)
		Expect(fin.GetResult()).To(Equal(eventspb.Result_RESULT_SUCCEEDED), describe(evs))
		var versions []map[string]any
		Expect(json.Unmarshal(fin.GetResponse(), &versions)).To(Succeed(), string(fin.GetResponse()))
		Expect(versions).To(Equal([]map[string]any{{"ref": "1", "req": float64(len(`{"source":{"uri":"x"}}`) + 1)}}))
		Expect(stdoutOf(evs)).To(BeEmpty(), "stdout is the response, not a log")
		Expect(stderrOf(evs)).To(Equal("checking\n"))
	})

	It("errors a script that prints invalid JSON, quoting the start of it", func() {
		r := resourceAction("get", `echo "Cloning into..."; echo '{"version":{}}'`, `{}`)
		r.Outputs = append(r.Outputs, action.Output{Name: "get", Path: "get"})
		runStep(atc, r, stepOptions{blob: blobCfg}).wait(time.Minute)
		evs, fin := atc.waitFinished(r.StepID, time.Minute)
		Expect(fin.GetResult()).To(Equal(eventspb.Result_RESULT_ERRORED), describe(evs))
		Expect(fin.GetError()).To(ContainSubstring("in printed invalid JSON"))
		Expect(fin.GetError()).To(ContainSubstring(`Cloning into...`))
		Expect(fin.GetResponse()).To(BeEmpty())
		Expect(fin.GetOutputs()).To(BeEmpty(), "nothing is uploaded for an errored get")
	})

	It("errors a script whose response is longer than the limit", func() {
		r := resourceAction("put", `head -c 5000000 /dev/zero | tr '\0' 'x'`, `{}`)
		runStep(atc, r, stepOptions{blob: blobCfg}).wait(time.Minute)
		evs, fin := atc.waitFinished(r.StepID, time.Minute)
		Expect(fin.GetResult()).To(Equal(eventspb.Result_RESULT_ERRORED), describe(evs))
		Expect(fin.GetError()).To(ContainSubstring("out printed more than 4194304 bytes on stdout"))
	})

	It("says the resource type's image has no script when it is missing", func() {
		r := resourceAction("check", "", `{}`)
		r.Run.Path, r.Run.Args = filepath.Join(GinkgoT().TempDir(), "opt/resource/check"), nil
		runStep(atc, r, stepOptions{blob: blobCfg}).wait(time.Minute)
		evs, fin := atc.waitFinished(r.StepID, time.Minute)
		Expect(fin.GetResult()).To(Equal(eventspb.Result_RESULT_ERRORED), describe(evs))
		Expect(fin.GetError()).To(Equal("the resource type's image has no " + r.Run.Path))
	})

	It("leaves a task's stdout a log", func() {
		a := newAction("task", "sh", "-c", `echo not json`)
		runStep(atc, a, stepOptions{blob: blobCfg}).wait(time.Minute)
		evs, fin := atc.waitFinished(a.StepID, time.Minute)
		Expect(fin.GetResult()).To(Equal(eventspb.Result_RESULT_SUCCEEDED), describe(evs))
		Expect(stdoutOf(evs)).To(Equal("not json\n"))
		Expect(fin.GetResponse()).To(BeEmpty())
	})
})

func stderrOf(evs []*eventspb.Event) string {
	var b strings.Builder
	for _, e := range evs {
		if o := e.GetOutput(); o != nil && o.GetStream() == eventspb.Stream_STREAM_STDERR {
			b.Write(o.GetData())
		}
	}
	return b.String()
}
