package stepcreds_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/stepcreds"
	"github.com/porter-ci/porter/test/testenv"
)

func resources(t *testing.T, policy []byte) map[string][]string {
	t.Helper()
	var doc struct {
		Statement []struct {
			Action   []string
			Resource []string
		}
	}
	if err := json.Unmarshal(policy, &doc); err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, s := range doc.Statement {
		for _, a := range s.Action {
			out[a] = append(out[a], s.Resource...)
		}
	}
	return out
}

func TestPolicyGrantsOnlyTheStepsKeys(t *testing.T) {
	in := blobstore.NewBlobKey("main", "producer")
	cache := blobstore.TaskCacheKey("main", "p", "j", "s", "cache")
	p, err := stepcreds.Policy("bkt", "", stepcreds.Scope{Team: "main", BuildID: "7", StepID: "s1", Inputs: []string{in}, Caches: []string{cache}})
	if err != nil {
		t.Fatal(err)
	}
	got := resources(t, p)
	arn := func(k string) string { return "arn:aws:s3:::bkt/" + k }
	want := map[string][]string{
		"s3:GetBucketLocation":    {"arn:aws:s3:::bkt"},
		"s3:GetObject":            {arn(in), arn(cache), arn("builds/7/steps/s1/*")},
		"s3:PutObject":            {arn("blobs/main/s1/*"), arn("builds/7/steps/s1/*"), arn(cache)},
		"s3:AbortMultipartUpload": {arn("blobs/main/s1/*"), arn("builds/7/steps/s1/*"), arn(cache)},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("policy grants\n%v\nwant\n%v", got, want)
	}
}

func TestPolicyWidensWithinTheTeamOnlyWhenItMustFit(t *testing.T) {
	var many []string
	for range 30 {
		many = append(many, blobstore.NewBlobKey("main", "producer"))
	}
	p, err := stepcreds.Policy("bkt", "", stepcreds.Scope{Team: "main", BuildID: "7", StepID: "s1", Inputs: many})
	if err != nil {
		t.Fatal(err)
	}
	if len(p) > stepcreds.MaxPolicySize {
		t.Fatalf("policy of %d bytes", len(p))
	}
	if got := resources(t, p)["s3:GetObject"][0]; got != "arn:aws:s3:::bkt/blobs/main/producer/*" {
		t.Errorf("30 outputs of one step: read grant %q, want the producer's prefix", got)
	}

	var producers []string
	for i := range 40 {
		producers = append(producers, blobstore.NewBlobKey("main", fmt.Sprintf("producer-%02d-%s", i, strings.Repeat("x", 20))))
	}
	p, err = stepcreds.Policy("bkt", "", stepcreds.Scope{Team: "main", BuildID: "7", StepID: "s1", Inputs: producers})
	if err != nil {
		t.Fatal(err)
	}
	if got := resources(t, p)["s3:GetObject"][0]; got != "arn:aws:s3:::bkt/blobs/main/*" {
		t.Errorf("40 producers: read grant %q, want the team's blobs", got)
	}

	var legacy []string
	for i := range 40 {
		legacy = append(legacy, fmt.Sprintf("artifacts/%064d.tar.zst", i))
	}
	_, err = stepcreds.Policy("bkt", "", stepcreds.Scope{Team: "main", BuildID: "7", StepID: "s1", Inputs: legacy})
	if !errors.Is(err, stepcreds.ErrPolicyTooLarge) || !strings.Contains(err.Error(), "40 inputs") {
		t.Errorf("40 keys that cannot be grouped: %v, want ErrPolicyTooLarge naming the inputs", err)
	}
	if _, err := stepcreds.Policy("bkt", "", stepcreds.Scope{Team: "main"}); err == nil {
		t.Error("a scope without build and step was accepted")
	}
}

// TestSTSCredentialsOnRealMinIO mints a step's credentials from a real
// MinIO and uses them as step code would: everything the step needs works,
// and another build's objects can be neither read nor overwritten.
func TestSTSCredentialsOnRealMinIO(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	err := testenv.WithMinIOBucket(ctx, func(_ *testenv.MinIO, cfg blobstore.Config) error {
		admin, err := blobstore.Open(ctx, cfg)
		if err != nil {
			return err
		}
		auditCfg := cfg
		auditCfg.Bucket = cfg.Bucket + "-audit"
		audit, err := blobstore.Open(ctx, auditCfg)
		if err != nil {
			return err
		}
		if err := blobstore.EnsureLockedBucket(ctx, audit, 24*time.Hour); err != nil {
			return err
		}
		put := func(key, body string) {
			if _, err := admin.Put(ctx, key, strings.NewReader(body), int64(len(body)), blobstore.PutOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		in := blobstore.NewBlobKey("main", "producer")
		cache := blobstore.TaskCacheKey("main", "p", "j", "s", "cache")
		victim := blobstore.NewBlobKey("main", "other-step")
		otherTeam := blobstore.NewBlobKey("other", "their-step")
		otherAudit := blobstore.StepPrefix("8", "s2") + blobstore.ResultObject
		for _, k := range []string{in, cache, victim, otherTeam, otherAudit} {
			put(k, "original "+k)
		}
		if _, err := audit.Put(ctx, otherAudit, strings.NewReader("original "+otherAudit), -1, blobstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}

		client, err := cfg.HTTPClient()
		if err != nil {
			return err
		}
		issuer := stepcreds.STS{Endpoint: cfg.URL(), AccessKey: cfg.AccessKey, SecretKey: cfg.SecretKey, Bucket: cfg.Bucket, AuditBucket: auditCfg.Bucket, Client: client}
		c, err := issuer.Issue(ctx, stepcreds.Scope{Team: "main", BuildID: "7", StepID: "s1", Inputs: []string{in}, Caches: []string{cache}, Lifetime: time.Hour})
		if err != nil {
			return err
		}
		if c.SessionToken == "" || c.AccessKey == cfg.AccessKey {
			t.Fatalf("got %+v: not temporary credentials", c)
		}
		if left := time.Until(c.Expiration); left < 55*time.Minute || left > 65*time.Minute {
			t.Errorf("credentials last %s, want the step's hour", left)
		}
		stepCfg := cfg
		stepCfg.AccessKey, stepCfg.SecretKey, stepCfg.SessionToken = c.AccessKey, c.SecretKey, c.SessionToken
		step, err := blobstore.Open(ctx, stepCfg)
		if err != nil {
			return err
		}
		stepAuditCfg := stepCfg
		stepAuditCfg.Bucket = auditCfg.Bucket
		stepAudit, err := blobstore.Open(ctx, stepAuditCfg)
		if err != nil {
			return err
		}

		// What the step needs.
		for _, k := range []string{in, cache} {
			if _, err := step.Stat(ctx, k); err != nil {
				t.Errorf("read %s: %v", k, err)
			}
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "f"), []byte("output"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := blobstore.UploadDir(ctx, step, dir, blobstore.NewBlobKey("main", "s1"), blobstore.UploadOptions{}); err != nil {
			t.Errorf("upload an output: %v", err)
		}
		if _, err := blobstore.UploadDir(ctx, step, dir, cache, blobstore.UploadOptions{}); err != nil {
			t.Errorf("save the cache: %v", err)
		}
		record := blobstore.StepPrefix("7", "s1") + blobstore.ResultObject
		if _, err := stepAudit.Put(ctx, record, bytes.NewReader([]byte("{}")), 2, blobstore.PutOptions{}); err != nil {
			t.Errorf("write its audit record: %v", err)
		}
		// A second write only adds a version; it cannot delete either.
		if _, err := stepAudit.Put(ctx, record, strings.NewReader("forged"), 6, blobstore.PutOptions{}); err != nil {
			t.Errorf("second write of its audit record: %v", err)
		}
		if err := stepAudit.Delete(ctx, record); err == nil {
			t.Errorf("delete its audit record: allowed")
		}
		if rc, _, err := blobstore.GetOriginal(ctx, audit, record); err != nil {
			t.Errorf("read the record back: %v", err)
		} else {
			var b bytes.Buffer
			_, _ = b.ReadFrom(rc)
			rc.Close()
			if b.String() != "{}" {
				t.Errorf("the record reads %q", b.String())
			}
		}
		if _, err := step.Put(ctx, record, strings.NewReader("{}"), 2, blobstore.PutOptions{}); err == nil {
			t.Errorf("audit record written to the artifacts bucket: allowed")
		}

		// What it must not do.
		if _, err := stepAudit.Put(ctx, otherAudit, strings.NewReader("forged"), 6, blobstore.PutOptions{}); err == nil {
			t.Errorf("overwrite another build's audit record: allowed")
		}
		for _, k := range []string{victim, otherTeam, otherAudit, blobstore.ManifestKey("main", "sha256:ab")} {
			if _, _, err := step.Get(ctx, k); err == nil {
				t.Errorf("read %s: allowed", k)
			}
			if _, err := step.Put(ctx, k, strings.NewReader("overwritten"), 11, blobstore.PutOptions{}); err == nil {
				t.Errorf("overwrite %s: allowed", k)
			}
		}
		if err := step.Delete(ctx, in); err == nil {
			t.Errorf("delete its input: allowed")
		}
		if _, err := step.List(ctx, "blobs/"); err == nil {
			t.Errorf("list the bucket: allowed")
		}
		for _, k := range []string{victim, otherTeam, otherAudit, in} {
			rc, _, err := admin.Get(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			_, _ = b.ReadFrom(rc)
			rc.Close()
			if b.String() != "original "+k {
				t.Errorf("%s now holds %q", k, b.String())
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
