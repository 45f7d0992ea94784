package atc

import (
	"flag"
	"io"
	"testing"
)

func TestByteSizeFlag(t *testing.T) {
	var c LimitsConfig
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	limitFlags(fs, &c)
	if c.MaxArtifactUpload != 10<<30 || c.MaxRequestBody != 8<<20 || c.GRPC.Unsynced != 32<<20 {
		t.Fatalf("defaults %d, %d, %d", c.MaxArtifactUpload, c.MaxRequestBody, c.GRPC.Unsynced)
	}
	if err := fs.Parse([]string{"--max-artifact-upload", "500Mi", "--max-request-body", "1000", "--grpc-max-unsynced-bytes", "64Mi"}); err != nil {
		t.Fatal(err)
	}
	if c.MaxArtifactUpload != 500<<20 || c.MaxRequestBody != 1000 || c.GRPC.Unsynced != 64<<20 {
		t.Fatalf("parsed %d, %d, %d", c.MaxArtifactUpload, c.MaxRequestBody, c.GRPC.Unsynced)
	}
	for _, bad := range []string{"0", "-1", "lots", "1.5"} {
		for _, name := range []string{"--max-artifact-upload", "--grpc-max-unsynced-bytes"} {
			if err := fs.Parse([]string{name, bad}); err == nil {
				t.Errorf("%s %s accepted", name, bad)
			}
		}
	}
}

func TestUploadLimitFlags(t *testing.T) {
	var c LimitsConfig
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	limitFlags(fs, &c)
	if c.Upload.MaxInflated != 1<<30 || c.Upload.MaxEntries != 500_000 {
		t.Fatalf("defaults %+v", c.Upload)
	}
	if err := fs.Parse([]string{"--max-artifact-upload-inflated", "4Gi", "--max-artifact-upload-entries", "1000"}); err != nil {
		t.Fatal(err)
	}
	if c.Upload.MaxInflated != 4<<30 || c.Upload.MaxEntries != 1000 {
		t.Fatalf("parsed %+v", c.Upload)
	}
	for _, name := range []string{"--max-artifact-upload-inflated", "--max-artifact-upload-entries"} {
		for _, bad := range []string{"0", "-1", "lots"} {
			if err := fs.Parse([]string{name, bad}); err == nil {
				t.Errorf("%s %s accepted", name, bad)
			}
		}
	}
}
