package sidecar

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/auditseal"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/redact"
)

// auditTrail writes the step's audit record: action.json when the step
// starts, events.jsonl.zst and result.json when it ends. It stages them
// (auditseal.StagedKey), each written once; the ATC seals them into
// the audit trail, which the step's credentials cannot write, once it has
// the step's end.
type auditTrail struct {
	a         *action.Action
	pod       string
	store     Artifacts
	startedAt time.Time
	red       *redact.Redactor

	mu      sync.Mutex
	file    *os.File
	journal *bufio.Writer
	err     error
}

func newAuditTrail(dir string, a *action.Action, pod string, store Artifacts, red *redact.Redactor) (*auditTrail, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create journal directory: %w", err)
	}
	f, err := os.CreateTemp(dir, "events-"+a.StepID+"-*.jsonl")
	if err != nil {
		return nil, fmt.Errorf("create event journal: %w", err)
	}
	return &auditTrail{a: a, pod: pod, store: store,
		startedAt: time.Now().UTC(), red: red, file: f, journal: bufio.NewWriterSize(f, 64<<10)}, nil
}

// record appends one event to the journal (called in sequence order).
func (t *auditTrail) record(ev *eventspb.Event) {
	if out := ev.GetOutput(); out != nil {
		// The process may print a credential: the journal shows it
		// redacted, like the build's events.
		if data := t.red.Bytes(out.GetData()); string(data) != string(out.GetData()) {
			ev = proto.Clone(ev).(*eventspb.Event)
			ev.GetOutput().Data = data
		}
	}
	line, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(ev)
	t.mu.Lock()
	defer t.mu.Unlock()
	if err == nil {
		_, err = t.journal.Write(append(line, '\n'))
	}
	if err != nil && t.err == nil {
		t.err = fmt.Errorf("journal event %d: %w", ev.GetSeq(), err)
	}
}

func (t *auditTrail) close() {
	t.file.Close()
	os.Remove(t.file.Name())
}

// putOnce stages an audit object unless it is already there (a restarted
// sidecar), in one request: the store refuses a second write. It returns
// the object's key in the audit trail, where the ATC seals it.
func (t *auditTrail) putOnce(ctx context.Context, name string, body []byte, contentType string) (string, error) {
	auditID := t.a.Build.AuditDir()
	final, staged := blobstore.StepPrefix(auditID, t.a.StepID)+name, auditseal.StagedKey(auditID, t.a.StepID, name)
	if err := t.store.PutAudit(ctx, staged, body, contentType); err != nil && !errors.Is(err, blobstore.ErrExists) {
		return final, fmt.Errorf("write %s: %w", staged, err)
	}
	return final, nil
}

func (t *auditTrail) writeAction(ctx context.Context) error {
	body, err := json.MarshalIndent(t.a, "", "  ")
	if err != nil {
		return fmt.Errorf("encode action: %w", err)
	}
	_, err = t.putOnce(ctx, blobstore.ActionObject, body, "application/json")
	return err
}

// writeResult uploads the event journal and then result.json, whose
// presence marks the audit record complete. It returns result.json's key.
func (t *auditTrail) writeResult(ctx context.Context, res *Result) (string, error) {
	rec := api.StepRecord{StepID: t.a.StepID, BuildID: t.a.Build.ID, StepName: t.a.StepName, Pod: t.pod, Image: t.a.Image,
		PorterVersion: Version, StartedAt: t.startedAt, FinishedAt: time.Now().UTC(), StepResult: *res}
	var errs []error
	if events, digest, err := t.compressedJournal(); err != nil {
		errs = append(errs, err)
	} else if key, err := t.putOnce(ctx, blobstore.EventsObject, events, "application/zstd"); err != nil {
		errs = append(errs, err)
	} else {
		rec.EventsKey, rec.EventsDigest = key, digest
	}
	body, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return "", fmt.Errorf("encode result: %w", err)
	}
	key, err := t.putOnce(ctx, blobstore.ResultObject, body, "application/json")
	if err != nil {
		errs = append(errs, err)
	}
	return key, errors.Join(errs...)
}

func (t *auditTrail) compressedJournal() ([]byte, string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return nil, "", t.err
	}
	if err := t.journal.Flush(); err != nil {
		return nil, "", fmt.Errorf("flush event journal: %w", err)
	}
	if _, err := t.file.Seek(0, io.SeekStart); err != nil {
		return nil, "", fmt.Errorf("rewind event journal: %w", err)
	}
	tmp, err := os.Create(filepath.Join(filepath.Dir(t.file.Name()), filepath.Base(t.file.Name())+".zst"))
	if err != nil {
		return nil, "", fmt.Errorf("compress event journal: %w", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	enc, err := zstd.NewWriter(tmp)
	if err != nil {
		return nil, "", fmt.Errorf("compress event journal: %w", err)
	}
	if _, err := io.Copy(enc, t.file); err != nil {
		return nil, "", fmt.Errorf("compress event journal: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, "", fmt.Errorf("compress event journal: %w", err)
	}
	if _, err := t.file.Seek(0, io.SeekEnd); err != nil {
		return nil, "", fmt.Errorf("seek event journal: %w", err)
	}
	body, err := os.ReadFile(tmp.Name())
	if err != nil {
		return nil, "", fmt.Errorf("read compressed journal: %w", err)
	}
	sum := sha256.Sum256(body)
	return body, "sha256:" + hex.EncodeToString(sum[:]), nil
}

// retryable tells transient transport failures, worth another attempt, from
// ones that will not change (a missing object, a digest mismatch, an unsafe
// artifact, a cancelled step).
func retryable(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, blobstore.ErrNotFound) {
		return false
	}
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.EPIPE)
}
