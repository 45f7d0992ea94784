package apiserver

import (
	"archive/tar"
	"io"
	"strings"
	"testing"

	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/db"
)

// A step's audit objects and its outputs (auditserver/objects.go).

func TestStepAuditObject(t *testing.T) {
	a := newTestAPI(t)
	viewer := a.roleIn(t, "viewer")
	ans := a.do(t, "GET", "/api/v1/builds/1/audit/steps/s1/pod.yaml", viewer, "")
	if ans.code != 200 || !strings.HasPrefix(ans.header.Get("Content-Type"), "application/yaml") || !strings.Contains(ans.body, "image: busybox@sha256:00") {
		t.Errorf("pod.yaml: %d %s %q", ans.code, ans.header.Get("Content-Type"), ans.body)
	}
	ans = a.do(t, "GET", "/api/v1/builds/1/audit/steps/s1/result.json", viewer, "")
	if ans.code != 200 || ans.header.Get("Content-Type") != "application/json" || ans.body != `{"exit_status":0}` {
		t.Errorf("result.json: %d %s %q", ans.code, ans.header.Get("Content-Type"), ans.body)
	}
	want404(t, a.do(t, "GET", "/api/v1/builds/1/audit/steps/s2/pod.yaml", viewer, ""), "Audit Object Not Found", "build 1 has no pod.yaml for step s2")
	// Bad input is named: objects that are not served, step ids that are no key segment.
	wantError(t, a.do(t, "GET", "/api/v1/builds/1/audit/steps/s1/log", viewer, ""), 400, `audit object "log": a step's audit objects served here are pod.yaml`)
	wantError(t, a.do(t, "GET", "/api/v1/builds/1/audit/steps/s1/events.jsonl.zst", viewer, ""), 400, `audit object "events.jsonl.zst"`)
	wantError(t, a.do(t, "GET", "/api/v1/builds/1/audit/steps/..%2F2/pod.yaml", viewer, ""), 400, `step id: name "../2"`)
	wantError(t, a.do(t, "GET", "/api/v1/builds/1/audit/steps/%2E%2E/pod.yaml", viewer, ""), 400, `step id: name ".."`)
	// Another team's build: refused without saying whose.
	wantText(t, a.do(t, "GET", "/api/v1/builds/4/audit/steps/s4/pod.yaml", viewer, ""), 403, "build 4 belongs to a team you are not allowed to")
	a.blobs.fail = leakyDown
	ans = a.do(t, "GET", "/api/v1/builds/1/audit/steps/s1/pod.yaml", viewer, "")
	checkNoLeak(t, ans)
	if ans.code != 502 {
		t.Errorf("blobstore down: %d %s, want 502", ans.code, ans)
	}
}

// tarFiles reads a tar stream's regular files.
func tarFiles(t *testing.T, body string) map[string]string {
	t.Helper()
	files := map[string]string{}
	tr := tar.NewReader(strings.NewReader(body))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatalf("not a tar: %v", err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = string(b)
	}
}

func TestStepOutputDownload(t *testing.T) {
	a := newTestAPI(t)
	viewer := a.roleIn(t, "viewer")
	ans := a.do(t, "GET", "/api/v1/builds/1/outputs/s2/out", viewer, "")
	if ans.code != 200 || ans.header.Get("Content-Type") != "application/x-tar" ||
		ans.header.Get("Content-Disposition") != `attachment; filename="build-1-out.tar"` || ans.header.Get("X-Porter-Artifact-Digest") != "blake3:aa" {
		t.Fatalf("download: %d %v", ans.code, ans.header)
	}
	if got := tarFiles(t, ans.body); got["made.txt"] != "made by s2" || len(got) != 1 {
		t.Errorf("tar holds %v, want made.txt", got)
	}
	want404(t, a.do(t, "GET", "/api/v1/builds/1/outputs/s2/nope", viewer, ""), "Output Not Found", `step s2 of build 1 made no output "nope"`)
	want404(t, a.do(t, "GET", "/api/v1/builds/1/outputs/s9/out", viewer, ""), "Output Not Found", "build 1 has no audit record of step s9 (it has not ended, or ran no pod)")
	wantError(t, a.do(t, "GET", "/api/v1/builds/1/outputs/s2/%2E%2E", viewer, ""), 400, `output: name ".."`)
	wantError(t, a.do(t, "GET", "/api/v1/builds/x/outputs/s2/out", viewer, ""), 400, "build id must be a positive number")

	// Deduplicated after the step recorded it: found by its content address.
	a.blobs.put("artifacts/main/blake3-aa.json", []byte(`{"key":"blobs/main/s1/kept.tar.zst","digest":"blake3:aa","size":5}`))
	a.blobs.put("blobs/main/s1/kept.tar.zst", zstdTar(t, "made.txt", "made by s2"))
	_ = a.blobs.Delete(t.Context(), "blobs/main/s2/u.tar.zst")
	ans = a.do(t, "GET", "/api/v1/builds/1/outputs/s2/out", viewer, "")
	if got := tarFiles(t, ans.body); ans.code != 200 || got["made.txt"] != "made by s2" {
		t.Errorf("deduplicated output: %d %v", ans.code, got)
	}
	// Collected after the artifact retention.
	_ = a.blobs.Delete(t.Context(), "blobs/main/s1/kept.tar.zst")
	wantError(t, a.do(t, "GET", "/api/v1/builds/1/outputs/s2/out", viewer, ""), 410, `output "out" of step s2 is no longer kept`)

	// A record naming another team's blob is not served.
	a.blobs.put("builds/1/steps/s3/result.json", []byte(`{"outputs":[{"name":"out","key":"blobs/other/s4/y.tar.zst","digest":"blake3:bb","size":5}]}`))
	a.blobs.put("blobs/other/s4/y.tar.zst", zstdTar(t, "secret.txt", "other's"))
	ans = a.do(t, "GET", "/api/v1/builds/1/outputs/s3/out", viewer, "")
	if ans.code != 502 || strings.Contains(ans.body, "other's") {
		t.Errorf("another team's blob: %d %s, want 502", ans.code, ans)
	}
}

// An output is read as the build's events are: a public job's build by
// anyone, a private job's build by its team only.
func TestStepOutputOfAPublicJob(t *testing.T) {
	a := newTestAPI(t)
	a.store.builds = append(a.store.builds,
		db.JobBuild{Build: db.Build{ID: 5, TeamID: 1, TeamName: "main", Name: "1", Status: "succeeded"}, PipelineID: 11, PipelineName: "pub", JobID: 101, JobName: "j"})
	a.blobs.put("builds/5/steps/s5/result.json", []byte(`{"outputs":[{"name":"out","key":"blobs/main/s5/u.tar.zst","digest":"blake3:cc","size":5}]}`))
	a.blobs.put("blobs/main/s5/u.tar.zst", zstdTar(t, "pub.txt", "public"))
	if ans := a.do(t, "GET", "/api/v1/builds/5/outputs/s5/out", "", ""); ans.code != 200 || tarFiles(t, ans.body)["pub.txt"] != "public" {
		t.Errorf("a public job's output, anonymously: %d %s", ans.code, ans)
	}
	// Its audit record stays the team's.
	wantText(t, a.do(t, "GET", "/api/v1/builds/5/audit/steps/s5/result.json", "", ""), 401, "not authorized")
	// A private job's (build 2, pipeline p) and a one-off's (build 1): not for others.
	wantText(t, a.do(t, "GET", "/api/v1/builds/1/outputs/s2/out", "", ""), 401, "not authorized")
	outsider := a.token(t, "o", map[string]string{"other": "owner"})
	wantText(t, a.do(t, "GET", "/api/v1/builds/1/outputs/s2/out", outsider, ""), 403, "build 1 belongs to a team you are not allowed to")
}

// The audit trail carries each step's pod timeline.
func TestBuildAuditTimelines(t *testing.T) {
	a := newTestAPI(t)
	a.blobs.put("builds/1/steps/s1/timeline.json", []byte(`{"step_id":"s1","queued":"2026-11-29T10:00:00Z"}`))
	au := decode[api.Audit](t, a.do(t, "GET", "/api/v1/builds/1/audit", a.roleIn(t, "viewer"), ""), 200)
	if string(au.Timelines["s1"]) != `{"step_id":"s1","queued":"2026-11-29T10:00:00Z"}` {
		t.Errorf("timelines %v", au.Timelines)
	}
}
