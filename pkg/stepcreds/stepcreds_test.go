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

	"github.com/porter-ci/porter/pkg/auditseal"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/stepcreds"
	"github.com/porter-ci/porter/test/testenv"
)

func resources(t *testing.T, policy []byte) map[string][]string {
	t.Helper()
	var doc struct {
		Statement []struct {
			Effect   string
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
			if s.Effect != "Allow" {
				a = s.Effect + " " + a
			}
			out[a] = append(out[a], s.Resource...)
		}
	}
	return out
}

func TestPolicyGrantsOnlyTheStepsKeys(t *testing.T) {
	in := blobstore.NewBlobKey("main", "producer")
	cache := blobstore.TaskCacheKey("main", "p", "j", "s", "cache")
	p, err := stepcreds.Policy("bkt", "audit", stepcreds.Scope{Team: "main", BuildID: "7", StepID: "s1", Inputs: []string{in}, Caches: []string{cache}})
	if err != nil {
		t.Fatal(err)
	}
	got := resources(t, p)
	arn := func(k string) string { return "arn:aws:s3:::bkt/" + k }
	// The audit record is staged, never written to the audit trail.
	staged := arn("audit-staging/s1/builds/7/steps/s1/*")
	want := map[string][]string{
		"s3:GetBucketLocation":    {"arn:aws:s3:::bkt"},
		"s3:GetObject":            {arn(in), arn(cache), staged},
		"s3:PutObject":            {arn("blobs/main/s1/*"), staged, arn(cache)},
		"s3:AbortMultipartUpload": {arn("blobs/main/s1/*"), staged, arn(cache)},
		"Deny s3:*":               {"arn:aws:s3:::audit/builds/*"},
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
		// Its audit record: staged in the artifacts' bucket (the sidecar
		// checks first), never written to the audit trail, before the
		// step's end or after.
		staged := auditseal.StagedKey("7", "s1", blobstore.ResultObject)
		const accepted = `{"result":"SUCCEEDED"}`
		if _, err := step.Put(ctx, staged, strings.NewReader(accepted), int64(len(accepted)), blobstore.PutOptions{}); err != nil {
			t.Errorf("stage its audit record: %v", err)
		}
		if _, err := step.Stat(ctx, staged); err != nil {
			t.Errorf("look its staged record up: %v", err)
		}
		record := blobstore.StepPrefix("7", "s1") + blobstore.ResultObject
		forged := blobstore.StepPrefix("7", "s1") + "forged.json"
		refused := func(when string) {
			t.Helper()
			for _, k := range []string{record, forged} {
				if _, err := stepAudit.Put(ctx, k, strings.NewReader("forged"), 6, blobstore.PutOptions{}); !accessDenied(err) {
					t.Errorf("%s: write %s in the audit bucket: %v, want Access Denied", when, k, err)
				}
				if _, err := step.Put(ctx, k, strings.NewReader("forged"), 6, blobstore.PutOptions{}); !accessDenied(err) {
					t.Errorf("%s: write %s in the artifacts' bucket: %v, want Access Denied", when, k, err)
				}
			}
		}
		refused("before the seal")
		// The server seals the record once the step has ended.
		sealer := auditseal.Sealer{Staging: admin, Audit: audit}
		if res, err := sealer.Seal(ctx, "s1"); err != nil || len(res.Keys) != 1 || res.Keys[0] != record {
			t.Errorf("seal: %+v, %v; want %s sealed", res, err, record)
		}
		refused("after the seal")
		if err := stepAudit.Delete(ctx, record); !accessDenied(err) {
			t.Errorf("delete its audit record: %v, want Access Denied", err)
		}
		// Staged again and sealed again: the sealed record stands.
		if _, err := step.Put(ctx, staged, strings.NewReader("forged"), 6, blobstore.PutOptions{}); err != nil {
			t.Errorf("stage again: %v", err)
		}
		if res, err := sealer.Seal(ctx, "s1"); err != nil || len(res.Keys) != 0 {
			t.Errorf("seal again: %+v, %v; want nothing written", res, err)
		}
		// A plain read of the audit trail, as any S3 client does it.
		if b := readAll(t, audit, record); b != accepted {
			t.Errorf("the record reads %q, want %q", b, accepted)
		}
		if objs, err := audit.List(ctx, blobstore.StepPrefix("7", "s1")); err != nil || len(objs) != 1 {
			t.Errorf("the step's audit prefix holds %+v (%v), want its record alone", objs, err)
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
			if b := readAll(t, admin, k); b != "original "+k {
				t.Errorf("%s now holds %q", k, b)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func accessDenied(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Access Denied")
}

func readAll(t *testing.T, s blobstore.Store, key string) string {
	t.Helper()
	rc, _, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	defer rc.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(rc); err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return b.String()
}
