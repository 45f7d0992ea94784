package blobstore_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/porter-ci/porter/pkg/auditseal"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/test/testenv"
)

const (
	testPartSize      = 5 << 20 // S3's minimum
	testCopyThreshold = 6 << 20
)

// openStore opens driver on cfg with small parts, so that the multipart
// paths run with objects of a few MiB.
func openStore(ctx context.Context, driver string, cfg blobstore.Config) blobstore.Store {
	cfg.Driver = driver
	s, err := blobstore.Open(ctx, cfg)
	Expect(err).NotTo(HaveOccurred())
	switch s := s.(type) {
	case *blobstore.MinioStore:
		s.PartSize, s.Concurrency = testPartSize, 4
		s.MultipartCopyThreshold, s.CopyPartSize = testCopyThreshold, testPartSize
	case *blobstore.S3Store:
		s.PartSize, s.Concurrency = testPartSize, 4
		s.MultipartCopyThreshold, s.CopyPartSize = testCopyThreshold, testPartSize
	default:
		Fail(fmt.Sprintf("unexpected store type %T", s))
	}
	return s
}

// rawClient looks at the bucket behind the drivers' backs (incomplete
// multipart uploads).
func rawClient() *minio.Client {
	c, err := minio.New(minioServer.Endpoint, &minio.Options{
		Creds:  credentials.NewStaticV4(minioServer.AccessKey, minioServer.SecretKey, ""),
		Region: "us-east-1",
	})
	Expect(err).NotTo(HaveOccurred())
	return c
}

func incompleteUploads(ctx context.Context, bucket, prefix string) []string {
	var keys []string
	for u := range rawClient().ListIncompleteUploads(ctx, bucket, prefix, true) {
		Expect(u.Err).NotTo(HaveOccurred())
		keys = append(keys, u.Key)
	}
	return keys
}

func getAll(ctx context.Context, s blobstore.Store, key string) []byte {
	rc, _, err := s.Get(ctx, key)
	Expect(err).NotTo(HaveOccurred())
	defer rc.Close()
	b, err := io.ReadAll(rc)
	Expect(err).NotTo(HaveOccurred())
	return b
}

// onlyReader hides every interface but io.Reader (sizes, seeking).
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

// failingReader yields n bytes of data, then err.
type failingReader struct {
	data []byte
	n    int
	err  error
	pos  int
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.pos >= f.n {
		return 0, f.err
	}
	k := copy(p, f.data[f.pos:min(f.n, len(f.data))])
	f.pos += k
	return k, nil
}

// hookReader calls hook once, after at bytes were read.
type hookReader struct {
	r    io.Reader
	at   int64
	n    int64
	hook func()
	done bool
}

func (h *hookReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.n += int64(n)
	if !h.done && h.n >= h.at {
		h.done = true
		h.hook()
	}
	return n, err
}

var errBoom = errors.New("boom: disk went away")

var _ = Describe("Store conformance", func() {
	for _, driver := range []string{blobstore.DriverMinio, blobstore.DriverS3} {
		Context("driver "+driver, func() {
			var (
				store  blobstore.Store
				bucket string
			)

			BeforeEach(func(ctx SpecContext) {
				var err error
				bucket, err = minioServer.NewBucket(ctx)
				Expect(err).NotTo(HaveOccurred())
				store = openStore(ctx, driver, minioServer.Config(bucket))
			})

			It("puts, stats and gets an object with its metadata", func(ctx SpecContext) {
				body := []byte("hello, porter")
				info, err := store.Put(ctx, "a/b.txt", bytes.NewReader(body), int64(len(body)), blobstore.PutOptions{
					ContentType: "text/plain",
					Metadata:    map[string]string{"Porter-Step": "build"},
				})
				Expect(err).NotTo(HaveOccurred())
				Expect(info.Key).To(Equal("a/b.txt"))
				Expect(info.Size).To(Equal(int64(len(body))))
				Expect(info.ETag).NotTo(BeEmpty())

				st, err := store.Stat(ctx, "a/b.txt")
				Expect(err).NotTo(HaveOccurred())
				Expect(st.Size).To(Equal(int64(len(body))))
				Expect(st.ETag).To(Equal(info.ETag))
				Expect(st.ContentType).To(Equal("text/plain"))
				Expect(st.Metadata).To(HaveKeyWithValue("porter-step", "build"))
				Expect(st.LastModified).To(BeTemporally("~", time.Now(), time.Minute))

				rc, gi, err := store.Get(ctx, "a/b.txt")
				Expect(err).NotTo(HaveOccurred())
				defer rc.Close()
				Expect(gi.Size).To(Equal(int64(len(body))))
				Expect(gi.Metadata).To(HaveKeyWithValue("porter-step", "build"))
				Expect(io.ReadAll(rc)).To(Equal(body))
			})

			It("stores an empty object", func(ctx SpecContext) {
				_, err := store.Put(ctx, "empty", bytes.NewReader(nil), 0, blobstore.PutOptions{})
				Expect(err).NotTo(HaveOccurred())
				_, err = store.Put(ctx, "empty-unknown", onlyReader{bytes.NewReader(nil)}, -1, blobstore.PutOptions{})
				Expect(err).NotTo(HaveOccurred())
				for _, k := range []string{"empty", "empty-unknown"} {
					st, err := store.Stat(ctx, k)
					Expect(err).NotTo(HaveOccurred())
					Expect(st.Size).To(BeZero())
				}
			})

			It("lists by prefix in key order", func(ctx SpecContext) {
				for _, k := range []string{"b/2", "a/2", "a/1", "ab", "a/sub/3"} {
					_, err := store.Put(ctx, k, strings.NewReader(k), int64(len(k)), blobstore.PutOptions{})
					Expect(err).NotTo(HaveOccurred())
				}
				got, err := store.List(ctx, "a/")
				Expect(err).NotTo(HaveOccurred())
				var keys []string
				for _, o := range got {
					keys = append(keys, o.Key)
					Expect(o.Size).To(Equal(int64(len(o.Key))))
				}
				Expect(keys).To(Equal([]string{"a/1", "a/2", "a/sub/3"}))
				none, err := store.List(ctx, "zzz/")
				Expect(err).NotTo(HaveOccurred())
				Expect(none).To(BeEmpty())
			})

			It("maps missing objects to ErrNotFound, naming the key", func(ctx SpecContext) {
				_, err := store.Stat(ctx, "missing/key")
				Expect(err).To(MatchError(blobstore.ErrNotFound))
				Expect(err.Error()).To(ContainSubstring(`"missing/key"`))

				_, _, err = store.Get(ctx, "missing/key")
				Expect(err).To(MatchError(blobstore.ErrNotFound))
				Expect(err.Error()).To(ContainSubstring(`get "missing/key"`))

				_, err = store.Copy(ctx, "missing/key", "dst")
				Expect(err).To(MatchError(blobstore.ErrNotFound))

				Expect(store.Delete(ctx, "missing/key")).To(Succeed())
			})

			It("reads a range of an object, and refuses a range the object does not hold", func(ctx SpecContext) {
				body := []byte("0123456789abcdef")
				_, err := store.Put(ctx, "ranged", bytes.NewReader(body), int64(len(body)), blobstore.PutOptions{})
				Expect(err).NotTo(HaveOccurred())
				for _, r := range []struct{ offset, length int64 }{{0, 16}, {0, 1}, {3, 4}, {15, 1}, {10, 6}} {
					rc, err := store.GetRange(ctx, "ranged", r.offset, r.length)
					Expect(err).NotTo(HaveOccurred(), "range %d+%d", r.offset, r.length)
					Expect(io.ReadAll(rc)).To(Equal(body[r.offset:r.offset+r.length]), "range %d+%d", r.offset, r.length)
					Expect(rc.Close()).To(Succeed())
				}
				// Past the end, partly past it, empty or negative: an error, not fewer bytes.
				for _, r := range []struct{ offset, length int64 }{{16, 1}, {100, 5}, {10, 7}, {0, 0}, {-1, 2}} {
					rc, err := store.GetRange(ctx, "ranged", r.offset, r.length)
					if err == nil {
						rc.Close()
					}
					Expect(err).To(HaveOccurred(), "range %d+%d", r.offset, r.length)
					Expect(errors.Is(err, blobstore.ErrNotFound)).To(BeFalse(), "range %d+%d: %v", r.offset, r.length, err)
				}
				_, err = store.GetRange(ctx, "missing/key", 0, 1)
				Expect(err).To(MatchError(blobstore.ErrNotFound))
				Expect(err.Error()).To(ContainSubstring(`"missing/key"`))
			})

			It("does not map a missing bucket to ErrNotFound", func(ctx SpecContext) {
				other := openStore(ctx, driver, minioServer.Config("no-such-bucket-"+bucket))
				_, err := other.Put(ctx, "k", strings.NewReader("x"), 1, blobstore.PutOptions{})
				Expect(err).To(HaveOccurred())
				Expect(errors.Is(err, blobstore.ErrNotFound)).To(BeFalse(), "err: %v", err)
			})

			It("deletes", func(ctx SpecContext) {
				_, err := store.Put(ctx, "gone", strings.NewReader("x"), 1, blobstore.PutOptions{})
				Expect(err).NotTo(HaveOccurred())
				Expect(store.Delete(ctx, "gone")).To(Succeed())
				_, err = store.Stat(ctx, "gone")
				Expect(err).To(MatchError(blobstore.ErrNotFound))
			})

			It("copies a small object with one CopyObject, keeping metadata", func(ctx SpecContext) {
				body := randomBytes(1, 1<<20)
				_, err := store.Put(ctx, "src", bytes.NewReader(body), int64(len(body)), blobstore.PutOptions{Metadata: map[string]string{"k": "v"}})
				Expect(err).NotTo(HaveOccurred())
				info, err := store.Copy(ctx, "src", "dst")
				Expect(err).NotTo(HaveOccurred())
				Expect(info.Size).To(Equal(int64(len(body))))
				Expect(info.ETag).NotTo(ContainSubstring("-"), "a single copy has a plain MD5 ETag")
				Expect(info.Metadata).To(HaveKeyWithValue("k", "v"))
				Expect(getAll(ctx, store, "dst")).To(Equal(body))
			})

			It("copies an object above the threshold part by part", func(ctx SpecContext) {
				body := randomBytes(2, 15<<20) // 3 parts of 5 MiB
				_, err := store.Put(ctx, "big", bytes.NewReader(body), int64(len(body)), blobstore.PutOptions{Metadata: map[string]string{"k": "v"}})
				Expect(err).NotTo(HaveOccurred())
				info, err := store.Copy(ctx, "big", "big-copy")
				Expect(err).NotTo(HaveOccurred())
				Expect(info.Size).To(Equal(int64(len(body))))
				// A multipart object's ETag ends in -<number of parts>.
				Expect(info.ETag).To(HaveSuffix("-3"))
				Expect(info.Metadata).To(HaveKeyWithValue("k", "v"))
				Expect(getAll(ctx, store, "big-copy")).To(Equal(body))
				Expect(incompleteUploads(ctx, bucket, "")).To(BeEmpty())
			})

			It("uploads a large body of unknown size in parallel parts", func(ctx SpecContext) {
				body := randomBytes(3, 40<<20)
				info, err := store.Put(ctx, "unknown-size", onlyReader{bytes.NewReader(body)}, -1, blobstore.PutOptions{})
				Expect(err).NotTo(HaveOccurred())
				Expect(info.Size).To(Equal(int64(len(body))))
				st, err := store.Stat(ctx, "unknown-size")
				Expect(err).NotTo(HaveOccurred())
				Expect(st.Size).To(Equal(int64(len(body))))
				Expect(st.ETag).To(HaveSuffix("-8"), "40 MiB in 5 MiB parts")
				got := getAll(ctx, store, "unknown-size")
				Expect(sha256.Sum256(got)).To(Equal(sha256.Sum256(body)))
			})

			It("uploads a large body of known size in parts", func(ctx SpecContext) {
				body := randomBytes(4, 11<<20)
				_, err := store.Put(ctx, "known-size", onlyReader{bytes.NewReader(body)}, int64(len(body)), blobstore.PutOptions{})
				Expect(err).NotTo(HaveOccurred())
				st, err := store.Stat(ctx, "known-size")
				Expect(err).NotTo(HaveOccurred())
				Expect(st.ETag).To(HaveSuffix("-3"))
				Expect(getAll(ctx, store, "known-size")).To(Equal(body))
			})

			Describe("atomicity", func() {
				expectNothingUnder := func(ctx context.Context, key string) {
					_, err := store.Stat(ctx, key)
					Expect(err).To(MatchError(blobstore.ErrNotFound))
					objs, err := store.List(ctx, "")
					Expect(err).NotTo(HaveOccurred())
					Expect(objs).To(BeEmpty())
					Expect(incompleteUploads(ctx, bucket, "")).To(BeEmpty(), "the multipart upload must be aborted")
				}

				It("leaves no object when the reader fails half way through a multipart upload", func(ctx SpecContext) {
					data := randomBytes(5, 40<<20)
					_, err := store.Put(ctx, "half", &failingReader{data: data, n: 20 << 20, err: errBoom}, -1, blobstore.PutOptions{})
					Expect(err).To(MatchError(errBoom))
					Expect(err.Error()).To(ContainSubstring(`put "half"`))
					expectNothingUnder(ctx, "half")
				})

				It("leaves no object when the reader fails within the first part", func(ctx SpecContext) {
					data := randomBytes(6, 1<<20)
					_, err := store.Put(ctx, "small-half", &failingReader{data: data, n: 1000, err: errBoom}, -1, blobstore.PutOptions{})
					Expect(err).To(MatchError(errBoom))
					expectNothingUnder(ctx, "small-half")
				})

				It("does not take a bare io.ErrUnexpectedEOF for the end of the body", func(ctx SpecContext) {
					data := randomBytes(7, 20<<20)
					_, err := store.Put(ctx, "truncated", &failingReader{data: data, n: 12 << 20, err: io.ErrUnexpectedEOF}, -1, blobstore.PutOptions{})
					Expect(err).To(MatchError(io.ErrUnexpectedEOF))
					expectNothingUnder(ctx, "truncated")
				})

				It("refuses a body shorter than its announced size", func(ctx SpecContext) {
					for _, n := range []int{100, 12 << 20} {
						data := randomBytes(8, n)
						_, err := store.Put(ctx, "short", onlyReader{bytes.NewReader(data)}, int64(n)+10, blobstore.PutOptions{})
						Expect(err).To(HaveOccurred(), "announced %d+10 bytes", n)
						expectNothingUnder(ctx, "short")
					}
				})

				It("leaves no object when the context is canceled mid-upload", func(ctx SpecContext) {
					cctx, cancel := context.WithCancel(ctx)
					defer cancel()
					data := randomBytes(9, 40<<20)
					_, err := store.Put(cctx, "canceled", &hookReader{r: bytes.NewReader(data), at: 15 << 20, hook: cancel}, -1, blobstore.PutOptions{})
					Expect(err).To(MatchError(context.Canceled))
					expectNothingUnder(ctx, "canceled")
				})
			})

			It("rides out a few seconds of the server being unreachable", func(ctx SpecContext) {
				proxy, err := testenv.StartProxy(minioServer.Endpoint)
				Expect(err).NotTo(HaveOccurred())
				DeferCleanup(proxy.Close)
				cfg := minioServer.Config(bucket)
				cfg.Endpoint = proxy.Addr
				flaky := openStore(ctx, driver, cfg)

				data := randomBytes(10, 30<<20)
				var upAt atomic.Int64
				// The outage's goroutine reports how bringing the proxy back
				// went to the spec's goroutine (no Expect off it), and the
				// spec waits for it whatever the outcome.
				upErr := make(chan error, 1)
				var outageStarted atomic.Bool
				outage := func() {
					outageStarted.Store(true)
					proxy.Down()
					go func() {
						time.Sleep(4 * time.Second) // the outage's length, not a wait for another goroutine
						upAt.Store(time.Now().UnixNano())
						upErr <- proxy.Up()
					}()
				}
				DeferCleanup(func() {
					if outageStarted.Load() {
						Eventually(upErr).WithTimeout(10*time.Second).Should(Receive(), "the outage's goroutine ended")
					}
				})
				start := time.Now()
				_, err = flaky.Put(ctx, "through-outage", &hookReader{r: onlyReader{bytes.NewReader(data)}, at: 10 << 20, hook: outage}, -1, blobstore.PutOptions{})
				Expect(err).NotTo(HaveOccurred())
				Expect(upAt.Load()).NotTo(BeZero(), "the upload finished before the proxy came back: the outage did not happen")
				var up error
				Eventually(upErr).WithTimeout(10 * time.Second).Should(Receive(&up))
				Expect(up).To(Succeed(), "bring the proxy back up")
				outageStarted.Store(false) // received: nothing left for the cleanup
				Expect(time.Since(start)).To(BeNumerically(">", 4*time.Second))
				Expect(getAll(ctx, store, "through-outage")).To(Equal(data))
			}, SpecTimeout(2*time.Minute))

			It("keeps an audit bucket's first versions under compliance-mode Object Lock, and refuses an unlocked one", func(ctx SpecContext) {
				err := blobstore.EnsureLockedBucket(ctx, store, 24*time.Hour)
				Expect(err).To(MatchError(blobstore.ErrNotLocked), "a bucket made without Object Lock")
				Expect(err.Error()).To(ContainSubstring(bucket))

				cfg := minioServer.Config("audit-" + strings.ToLower(driver) + "-" + strings.ToLower(rand.Text()[:8]))
				audit := openStore(ctx, driver, cfg)
				Expect(blobstore.EnsureLockedBucket(ctx, audit, 36*time.Hour)).To(Succeed(), "created with a 2-day retention")
				Expect(blobstore.EnsureLockedBucket(ctx, audit, 24*time.Hour)).To(Succeed(), "checked again")
				Expect(blobstore.EnsureLockedBucket(ctx, audit, 5*24*time.Hour)).To(MatchError(ContainSubstring("retention of 2 days, shorter than the 5")))

				key := "builds/1/steps/s/result.json"
				_, err = audit.Put(ctx, key, strings.NewReader("the record"), 10, blobstore.PutOptions{})
				Expect(err).NotTo(HaveOccurred())
				_, err = audit.Put(ctx, key, strings.NewReader("a forgery"), 9, blobstore.PutOptions{})
				Expect(err).NotTo(HaveOccurred(), "an overwrite only adds a version")
				_ = audit.Delete(ctx, key) // at most a delete marker
				rc, _, err := blobstore.GetOriginal(ctx, audit, key)
				Expect(err).NotTo(HaveOccurred())
				body, err := io.ReadAll(rc)
				rc.Close()
				Expect(err).NotTo(HaveOccurred())
				Expect(string(body)).To(Equal("the record"))

				// Not even the owner can remove the first version.
				var versions []string
				for o := range rawClient().ListObjects(ctx, cfg.Bucket, minio.ListObjectsOptions{Prefix: key, WithVersions: true}) {
					if !o.IsDeleteMarker {
						versions = append(versions, o.VersionID)
					}
				}
				Expect(versions).To(HaveLen(2))
				err = rawClient().RemoveObject(ctx, cfg.Bucket, key, minio.RemoveObjectOptions{VersionID: versions[len(versions)-1]})
				Expect(err).To(HaveOccurred(), "deleting a retained version")
				_, _, err = blobstore.GetOriginal(ctx, audit, "builds/1/steps/s/missing.json")
				Expect(err).To(MatchError(blobstore.ErrNotFound))
			})

			It("writes an IfAbsent put only where no object is, in one request or in parts", func(ctx SpecContext) {
				small, large := []byte("first"), make([]byte, testPartSize+1<<20)
				_, _ = rand.Read(large)
				for _, body := range [][]byte{small, large} {
					key := fmt.Sprintf("once-%d", len(body))
					_, err := store.Put(ctx, key, bytes.NewReader(body), int64(len(body)), blobstore.PutOptions{IfAbsent: true})
					Expect(err).NotTo(HaveOccurred(), "the first write")
					_, err = store.Put(ctx, key, strings.NewReader("second"), 6, blobstore.PutOptions{IfAbsent: true})
					Expect(err).To(MatchError(blobstore.ErrExists), "a second write, in one request")
					_, err = store.Put(ctx, key, onlyReader{bytes.NewReader(large)}, -1, blobstore.PutOptions{IfAbsent: true})
					Expect(err).To(MatchError(blobstore.ErrExists), "a second write, in parts")
					Expect(getAll(ctx, store, key)).To(Equal(body))
				}
				Expect(incompleteUploads(ctx, bucket, "once-")).To(BeEmpty(), "a refused multipart upload is aborted")
			})

			It("seals a step's staged audit record into the audit bucket once, and nothing else", func(ctx SpecContext) {
				auditBucket := "audit-" + strings.ToLower(driver) + "-" + strings.ToLower(rand.Text()[:8])
				audit := openStore(ctx, driver, minioServer.Config(auditBucket))
				Expect(blobstore.EnsureLockedBucket(ctx, audit, 24*time.Hour)).To(Succeed())
				sealer := auditseal.Sealer{Staging: store, Audit: audit}
				stage := func(key, body string) {
					GinkgoHelper()
					_, err := store.Put(ctx, key, strings.NewReader(body), int64(len(body)), blobstore.PutOptions{ContentType: "application/json"})
					Expect(err).NotTo(HaveOccurred())
				}
				events := make([]byte, testPartSize+1<<20) // sealed in parts
				_, _ = rand.Read(events)
				stage(auditseal.StagedKey("7", "s1", blobstore.ActionObject), "the action")
				stage(auditseal.StagedKey("7", "s1", blobstore.EventsObject), string(events))
				stage(auditseal.StagedKey("7", "s1", blobstore.ResultObject), "the result")
				stage(auditseal.StagedKey("7", "s1", "forged.json"), "not an audit object")
				stage(auditseal.StagingPrefix("s1")+blobstore.StepPrefix("7", "s2")+blobstore.ResultObject, "another step's")
				stage(auditseal.StagedKey("7", "s2", blobstore.ResultObject), "s2's own")

				final := blobstore.StepPrefix("7", "s1")
				res, err := sealer.Seal(ctx, "s1")
				Expect(err).NotTo(HaveOccurred())
				Expect(res.Keys).To(HaveLen(3))
				Expect(res.Keys[:2]).To(ConsistOf(final+blobstore.ActionObject, final+blobstore.EventsObject), "sealed at once")
				Expect(res.Keys[2]).To(Equal(final+blobstore.ResultObject), "result.json, which marks the record complete, last")
				Expect(res.Ignored).To(ConsistOf(auditseal.StagedKey("7", "s1", "forged.json"),
					auditseal.StagingPrefix("s1")+blobstore.StepPrefix("7", "s2")+blobstore.ResultObject))
				Expect(getAll(ctx, audit, final+blobstore.ActionObject)).To(Equal([]byte("the action")))
				Expect(getAll(ctx, audit, final+blobstore.EventsObject)).To(Equal(events))
				Expect(getAll(ctx, audit, final+blobstore.ResultObject)).To(Equal([]byte("the result")))
				info, err := audit.Stat(ctx, final+blobstore.ResultObject)
				Expect(err).NotTo(HaveOccurred())
				Expect(info.ContentType).To(Equal("application/json"))
				sealed, err := audit.List(ctx, blobstore.BuildPrefix("7"))
				Expect(err).NotTo(HaveOccurred())
				Expect(sealed).To(HaveLen(3), "only the step's own audit objects")
				left, err := store.List(ctx, auditseal.StagingPrefix("s1"))
				Expect(err).NotTo(HaveOccurred())
				Expect(left).To(BeEmpty(), "the staged copies go once sealed")
				_, err = store.Stat(ctx, auditseal.StagedKey("7", "s2", blobstore.ResultObject))
				Expect(err).NotTo(HaveOccurred(), "another step's staging is not touched")

				// Whatever is staged after the seal changes nothing sealed,
				// however often it is sealed again.
				stage(auditseal.StagedKey("7", "s1", blobstore.ResultObject), "a forgery")
				for range 2 {
					res, err = sealer.Seal(ctx, "s1")
					Expect(err).NotTo(HaveOccurred())
					Expect(res.Keys).To(BeEmpty())
				}
				Expect(getAll(ctx, audit, final+blobstore.ResultObject)).To(Equal([]byte("the result")), "a plain read")
				rc, _, err := blobstore.GetOriginal(ctx, audit, final+blobstore.ResultObject)
				Expect(err).NotTo(HaveOccurred())
				body, err := io.ReadAll(rc)
				rc.Close()
				Expect(err).NotTo(HaveOccurred())
				Expect(string(body)).To(Equal("the result"), "the first version")
				var versions int
				for o := range rawClient().ListObjects(ctx, auditBucket, minio.ListObjectsOptions{Prefix: final, WithVersions: true}) {
					Expect(o.Err).NotTo(HaveOccurred())
					versions++
				}
				Expect(versions).To(Equal(3), "one version each")

				// A step with nothing staged has nothing to seal.
				res, err = sealer.Seal(ctx, "s3")
				Expect(err).NotTo(HaveOccurred())
				Expect(res).To(Equal(auditseal.Sealed{}))
			})

			Describe("artifacts", func() {
				var tmp string
				BeforeEach(func() { tmp = GinkgoT().TempDir() })

				It("round-trips a tree: modes, symlinks, empty dirs, mtimes, hard links, 10k files, a multi-part file", func(ctx SpecContext) {
					src := filepath.Join(tmp, "src")
					buildRichTree(src, 10_000, 12<<20)
					want, err := snapshot(src)
					Expect(err).NotTo(HaveOccurred())

					key := blobstore.NewBlobKey("main", "step-1")
					a, err := blobstore.UploadDir(ctx, store, src, key, blobstore.UploadOptions{})
					Expect(err).NotTo(HaveOccurred())
					Expect(a.Digest).To(MatchRegexp(`^blake3:[0-9a-f]{64}$`))
					Expect(a.Key).To(Equal(key))
					st, err := store.Stat(ctx, a.Key)
					Expect(err).NotTo(HaveOccurred())
					Expect(st.Size).To(Equal(a.Size))
					Expect(store.List(ctx, "blobs/")).To(HaveLen(1), "one object written, nothing copied or staged")

					dst := filepath.Join(tmp, "dst")
					Expect(os.Mkdir(dst, 0o755)).To(Succeed())
					got, err := blobstore.DownloadDir(ctx, store, a.Key, a.Digest, dst)
					Expect(err).NotTo(HaveOccurred())
					Expect(got).To(Equal(a))

					have, err := snapshot(dst)
					Expect(err).NotTo(HaveOccurred())
					Expect(have).To(HaveLen(len(want)))
					Expect(have).To(Equal(want))
					Expect(inode(filepath.Join(dst, "hard/a"))).To(Equal(inode(filepath.Join(dst, "hard/b"))), "hard links stay linked")
				}, SpecTimeout(5*time.Minute))

				It("stores what does not compress as a plain tar and the rest through zstd, and reads both (DownloadDir, ReadFile, ArtifactTar)", func(ctx SpecContext) {
					for _, tc := range []struct {
						name string
						big  []byte
						zstd bool
					}{
						{"incompressible", randomBytes(7, 12<<20), false},
						{"compressible", bytes.Repeat([]byte("log line 42: all is well\n"), (12<<20)/25), true},
						{"small and incompressible", randomBytes(8, 1<<20), true}, // too small to be worth sampling
					} {
						By(tc.name)
						src := filepath.Join(tmp, tc.name)
						Expect(os.MkdirAll(filepath.Join(src, "ci"), 0o755)).To(Succeed())
						Expect(os.WriteFile(filepath.Join(src, "big.bin"), tc.big, 0o644)).To(Succeed())
						Expect(os.WriteFile(filepath.Join(src, "ci", "task.yml"), []byte("platform: linux\n"), 0o644)).To(Succeed())
						a, err := blobstore.UploadDir(ctx, store, src, blobstore.NewBlobKey("main", "step-1"), blobstore.UploadOptions{})
						Expect(err).NotTo(HaveOccurred())

						rc, _, err := store.Get(ctx, a.Key)
						Expect(err).NotTo(HaveOccurred())
						stored, err := io.ReadAll(rc)
						rc.Close()
						Expect(err).NotTo(HaveOccurred())
						Expect(bytes.HasPrefix(stored, []byte{0x28, 0xb5, 0x2f, 0xfd})).To(Equal(tc.zstd), "stored as zstd")
						if !tc.zstd {
							Expect(len(stored)).To(BeNumerically("<", len(tc.big)+64<<10), "a plain tar is the content and its headers")
						}

						dst := filepath.Join(tmp, tc.name+"-dst")
						Expect(os.Mkdir(dst, 0o755)).To(Succeed())
						got, err := blobstore.DownloadDir(ctx, store, a.Key, a.Digest, dst)
						Expect(err).NotTo(HaveOccurred())
						Expect(got).To(Equal(a))
						data, err := os.ReadFile(filepath.Join(dst, "big.bin"))
						Expect(err).NotTo(HaveOccurred())
						Expect(bytes.Equal(data, tc.big)).To(BeTrue(), "big.bin differs after the round trip")

						cfg, err := blobstore.ReadFile(ctx, store, a.Key, "ci/task.yml", 1024)
						Expect(err).NotTo(HaveOccurred())
						Expect(string(cfg)).To(Equal("platform: linux\n"))

						tr, err := blobstore.ArtifactTar(bytes.NewReader(stored))
						Expect(err).NotTo(HaveOccurred())
						var names []string
						r := tar.NewReader(tr)
						for {
							hdr, err := r.Next()
							if err == io.EOF {
								break
							}
							Expect(err).NotTo(HaveOccurred())
							names = append(names, hdr.Name)
						}
						Expect(tr.Close()).To(Succeed())
						Expect(names).To(ContainElements("big.bin", "ci/task.yml"))

						// A flipped byte is caught whatever the encoding.
						stored[len(stored)/2] ^= 1
						bad := blobstore.NewBlobKey("main", "step-bad")
						_, err = store.Put(ctx, bad, bytes.NewReader(stored), int64(len(stored)), blobstore.PutOptions{})
						Expect(err).NotTo(HaveOccurred())
						dst2 := filepath.Join(tmp, tc.name+"-dst2")
						Expect(os.Mkdir(dst2, 0o755)).To(Succeed())
						_, err = blobstore.DownloadDir(ctx, store, bad, a.Digest, dst2)
						Expect(err).To(HaveOccurred())
					}
				})

				It("fails a download whose digest does not match", func(ctx SpecContext) {
					src := filepath.Join(tmp, "src")
					Expect(os.MkdirAll(src, 0o755)).To(Succeed())
					Expect(os.WriteFile(filepath.Join(src, "f"), []byte("content"), 0o644)).To(Succeed())
					a, err := blobstore.UploadDir(ctx, store, src, blobstore.NewBlobKey("main", "step-1"), blobstore.UploadOptions{})
					Expect(err).NotTo(HaveOccurred())
					wrong := "blake3:" + strings.Repeat("0", 64)
					dst := filepath.Join(tmp, "dst")
					Expect(os.Mkdir(dst, 0o755)).To(Succeed())
					_, err = blobstore.DownloadDir(ctx, store, a.Key, wrong, dst)
					Expect(err).To(MatchError(ContainSubstring("digest mismatch")))
					Expect(err.Error()).To(ContainSubstring(a.Digest))

					dst2 := filepath.Join(tmp, "dst2")
					Expect(os.Mkdir(dst2, 0o755)).To(Succeed())
					_, err = blobstore.DownloadDir(ctx, store, a.Key, "", dst2)
					Expect(err).NotTo(HaveOccurred(), "an empty digest skips the check")
				})

				It("fails a download of a missing artifact with ErrNotFound", func(ctx SpecContext) {
					_, err := blobstore.DownloadDir(ctx, store, blobstore.NewBlobKey("main", "step-1"), "", tmp)
					Expect(err).To(MatchError(blobstore.ErrNotFound))
				})

				It("reads one file of an artifact (task file:) and refuses what is missing, not regular or too large", func(ctx SpecContext) {
					src := filepath.Join(tmp, "src")
					Expect(os.MkdirAll(filepath.Join(src, "ci", "tasks"), 0o755)).To(Succeed())
					Expect(os.WriteFile(filepath.Join(src, "ci", "tasks", "test.yml"), []byte("platform: linux\n"), 0o644)).To(Succeed())
					Expect(os.WriteFile(filepath.Join(src, "big"), bytes.Repeat([]byte("x"), 4096), 0o644)).To(Succeed())
					a, err := blobstore.UploadDir(ctx, store, src, blobstore.NewBlobKey("main", "step-1"), blobstore.UploadOptions{})
					Expect(err).NotTo(HaveOccurred())

					data, err := blobstore.ReadFile(ctx, store, a.Key, "./ci/tasks/test.yml", 1024)
					Expect(err).NotTo(HaveOccurred())
					Expect(string(data)).To(Equal("platform: linux\n"))
					_, err = blobstore.ReadFile(ctx, store, a.Key, "ci/tasks/missing.yml", 1024)
					Expect(err).To(MatchError(blobstore.ErrFileNotFound))
					_, err = blobstore.ReadFile(ctx, store, a.Key, "ci/tasks", 1024)
					Expect(err).To(MatchError(ContainSubstring("not a regular file")))
					_, err = blobstore.ReadFile(ctx, store, a.Key, "big", 1024)
					Expect(err).To(MatchError(ContainSubstring("4096 bytes, more than the 1024 allowed")))
					_, err = blobstore.ReadFile(ctx, store, a.Key, "../etc/passwd", 1024)
					Expect(err).To(MatchError(blobstore.ErrUnsafePath))
				})

				It("stores the same content once per team, by manifest, without copying the blob", func(ctx SpecContext) {
					src := filepath.Join(tmp, "src")
					buildRichTree(src, 50, 1<<20)
					up := func(owner string) blobstore.Artifact {
						a, err := blobstore.UploadDir(ctx, store, src, blobstore.NewBlobKey("main", owner), blobstore.UploadOptions{})
						Expect(err).NotTo(HaveOccurred())
						return a
					}
					a1 := up("step-1")
					d1, err := blobstore.Dedup(ctx, store, "main", a1)
					Expect(err).NotTo(HaveOccurred())
					Expect(d1).To(Equal(a1), "the first upload is the content's blob")
					blob1, err := store.Stat(ctx, a1.Key)
					Expect(err).NotTo(HaveOccurred())

					a2 := up("step-2")
					Expect(a2.Digest).To(Equal(a1.Digest))
					Expect(a2.Key).NotTo(Equal(a1.Key))
					d2, err := blobstore.Dedup(ctx, store, "main", a2)
					Expect(err).NotTo(HaveOccurred())
					Expect(d2).To(Equal(a1), "the second upload resolves to the first blob")
					_, err = store.Stat(ctx, a2.Key)
					Expect(err).To(MatchError(blobstore.ErrNotFound), "the duplicate blob is deleted")
					again, err := store.Stat(ctx, a1.Key)
					Expect(err).NotTo(HaveOccurred())
					Expect(again.ETag).To(Equal(blob1.ETag), "the kept blob was not rewritten")
					Expect(store.List(ctx, "artifacts/main/")).To(HaveLen(1))

					a3 := up("step-3")
					d3, err := blobstore.Dedup(ctx, store, "other", a3)
					Expect(err).NotTo(HaveOccurred())
					Expect(d3).To(Equal(a3), "another team's identical content is its own")

					Expect(store.Delete(ctx, a1.Key)).To(Succeed())
					a4 := up("step-4")
					d4, err := blobstore.Dedup(ctx, store, "main", a4)
					Expect(err).NotTo(HaveOccurred())
					Expect(d4).To(Equal(a4), "a manifest whose blob was collected is replaced")
					m, err := blobstore.ReadManifest(ctx, store, blobstore.ManifestKey("main", a4.Digest))
					Expect(err).NotTo(HaveOccurred())
					Expect(m.Key).To(Equal(a4.Key))

					Expect(os.WriteFile(filepath.Join(src, "new"), []byte("x"), 0o644)).To(Succeed())
					a5 := up("step-5")
					Expect(a5.Digest).NotTo(Equal(a1.Digest))
					Expect(store.List(ctx, "staging/")).To(BeEmpty())
				})

				It("replaces a fixed key atomically (task caches)", func(ctx SpecContext) {
					key := blobstore.TaskCacheKey("main", "p", "j", "s", "cache/go")
					src := filepath.Join(tmp, "src")
					Expect(os.MkdirAll(src, 0o755)).To(Succeed())
					Expect(os.WriteFile(filepath.Join(src, "v"), []byte("one"), 0o644)).To(Succeed())
					a, err := blobstore.UploadDir(ctx, store, src, key, blobstore.UploadOptions{})
					Expect(err).NotTo(HaveOccurred())
					Expect(a.Key).To(Equal(key))

					_, err = blobstore.UploadDir(ctx, store, filepath.Join(tmp, "does-not-exist"), key, blobstore.UploadOptions{})
					Expect(err).To(HaveOccurred())
					dst0 := filepath.Join(tmp, "dst0")
					Expect(os.Mkdir(dst0, 0o755)).To(Succeed())
					_, err = blobstore.DownloadDir(ctx, store, key, a.Digest, dst0)
					Expect(err).NotTo(HaveOccurred(), "a failed save leaves the previous cache whole")

					Expect(os.WriteFile(filepath.Join(src, "v"), []byte("two"), 0o644)).To(Succeed())
					b, err := blobstore.UploadDir(ctx, store, src, key, blobstore.UploadOptions{})
					Expect(err).NotTo(HaveOccurred())
					Expect(b.Digest).NotTo(Equal(a.Digest))

					dst := filepath.Join(tmp, "dst")
					Expect(os.Mkdir(dst, 0o755)).To(Succeed())
					_, err = blobstore.DownloadDir(ctx, store, key, b.Digest, dst)
					Expect(err).NotTo(HaveOccurred())
					Expect(os.ReadFile(filepath.Join(dst, "v"))).To(Equal([]byte("two")))
				})

				for _, h := range hostileCases() {
					It("refuses "+h.Name+" without touching anything outside the target", func(ctx SpecContext) {
						sb, err := newSandbox(tmp)
						Expect(err).NotTo(HaveOccurred())
						key := "artifacts/hostile.tar.zst"
						body := zstdBytes(makeTar(h.resolve(sb)...))
						_, err = store.Put(ctx, key, bytes.NewReader(body), int64(len(body)), blobstore.PutOptions{})
						Expect(err).NotTo(HaveOccurred())
						_, err = blobstore.DownloadDir(ctx, store, key, "", sb.Target)
						Expect(err).To(MatchError(ContainSubstring(h.WantErr)))
						Expect(sb.escapes()).To(BeEmpty())
					})
				}
			})
		})
	}
})
