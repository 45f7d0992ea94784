package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/porter-ci/porter/pkg/atcclient"
	"github.com/porter-ci/porter/test/bench/internal/benchstat"
	"github.com/porter-ci/porter/test/testenv"
)

// uploadSize is the input of the `fly execute -i` figure.
const uploadSize = 100 << 20

// bigInput: `fly execute -i` of 100 MiB of random bytes (gzip cannot shrink
// them), beside the upload alone (the same directory sent as fly sends it,
// by Porter's client) and the kubelet's floor measured in the same run.
// fly uploads its inputs before it creates the build, so the server cannot
// start the task's pod during the upload: the goal is the sum's, not the
// maximum's.
func bigInput(ctx context.Context, b *testenv.BenchServer, dir string, n int, floor []time.Duration) error {
	in := filepath.Join(dir, "big")
	if err := os.MkdirAll(in, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(in, "random.bin"))
	if err != nil {
		return err
	}
	_, err = io.CopyN(f, rand.Reader, uploadSize)
	if err = errors.Join(err, f.Close()); err != nil {
		return fmt.Errorf("write the input: %w", err)
	}
	task := filepath.Join(dir, "big.yml")
	if err := os.WriteFile(task, []byte(`platform: linux
image_resource: {type: registry-image, source: {repository: busybox}}
inputs: [{name: big}]
run: {path: sh, args: [-c, 'test "$(wc -c < big/random.bin)" -eq `+fmt.Sprint(uploadSize)+`']}
`), 0o644); err != nil {
		return err
	}
	token, err := b.Server.Login(ctx, "bench", "bench")
	if err != nil {
		return err
	}
	client, err := atcclient.New(atcclient.Options{URL: b.Server.URL(), Token: token})
	if err != nil {
		return err
	}
	var wall, upload, gzip []time.Duration
	for i := range n {
		// fly archives its inputs with the system's `tar -cz` (go-archive's
		// tgzfs) before it sends a byte: a floor of its own.
		start := time.Now()
		tar := exec.CommandContext(ctx, "tar", "-czf", "-", "-C", in, ".")
		tar.Stdout = io.Discard
		if err := tar.Run(); err != nil {
			return fmt.Errorf("run %d: tar -cz: %w", i+1, err)
		}
		gzip = append(gzip, time.Since(start))
		start = time.Now()
		res, err := b.Fly.Run(ctx, "execute", "-c", task, "-i", "big="+in)
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("fly execute: %s", res)
		}
		if err != nil {
			return fmt.Errorf("run %d: %w", i+1, err)
		}
		wall = append(wall, time.Since(start))
		start = time.Now()
		if _, err := client.UploadArtifact(ctx, "main", in, atcclient.UploadOptions{IncludeIgnored: true}); err != nil {
			return fmt.Errorf("run %d: upload alone: %w", i+1, err)
		}
		upload = append(upload, time.Since(start))
	}
	up, fl, gz := benchstat.Median(upload), benchstat.Median(floor), benchstat.Median(gzip)
	fmt.Printf("`fly execute -i` of %d MiB, %d runs\n", uploadSize>>20, n)
	printLine("Porter: fly execute -i, wall time", wall)
	printLine("fly's own `tar -cz` of the input, alone", gzip)
	printLine("the upload alone (POST .../artifacts, Porter's client)", upload)
	fmt.Printf("  %-58s %s + %s = %s (fly archives, then creates the build)\n", "fly's `tar -cz` + the kubelet's floor",
		gz.Round(time.Millisecond), fl.Round(time.Millisecond), (gz + fl).Round(time.Millisecond))
	fmt.Printf("  %-58s %s\n", "issue's goal: max(upload, floor) + 200ms", (max(up, fl) + 200*time.Millisecond).Round(time.Millisecond))
	return nil
}
