// Command crictl-lite is a tiny CRI client for the local cluster. crictl
// (sigs.k8s.io/cri-tools) is not available from the module proxy, and the
// cluster scripts need only a few of its operations:
//
//	crictl-lite -endpoint unix:///run/porter-cluster/containerd.sock version
//	crictl-lite -endpoint ... ps       list pod sandboxes and containers
//	crictl-lite -endpoint ... images   list the images the CRI plugin knows
//	crictl-lite -endpoint ... rmp      stop and remove every pod sandbox
//
// rmp is what cluster-down uses: removing sandboxes through CRI makes containerd
// run CNI DEL, so veths, IPAM leases, firewall rules and netns go away cleanly.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func main() {
	endpoint := flag.String("endpoint", "unix:///run/porter-cluster/containerd.sock", "CRI endpoint")
	timeout := flag.Duration("timeout", 2*time.Minute, "give up after this long")
	parallel := flag.Int("parallel", 8, "sandboxes removed at once by rmp")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: crictl-lite [flags] version|ps|images|rmp\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, *endpoint, flag.Arg(0), *parallel); err != nil {
		slog.Error("crictl-lite failed", "command", flag.Arg(0), "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, endpoint, command string, parallel int) error {
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", endpoint, err)
	}
	defer conn.Close()
	runtime := runtimeapi.NewRuntimeServiceClient(conn)
	images := runtimeapi.NewImageServiceClient(conn)

	switch command {
	case "version":
		return printVersion(ctx, runtime)
	case "ps":
		return listPods(ctx, runtime)
	case "images":
		return listImages(ctx, images)
	case "rmp":
		return removeAllSandboxes(ctx, runtime, parallel)
	default:
		return fmt.Errorf("unknown command %q", command)
	}
}

func printVersion(ctx context.Context, runtime runtimeapi.RuntimeServiceClient) error {
	v, err := runtime.Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil {
		return fmt.Errorf("asking the runtime for its version: %w", err)
	}
	fmt.Printf("%s %s (CRI %s)\n", v.RuntimeName, v.RuntimeVersion, v.RuntimeApiVersion)
	return nil
}

func listPods(ctx context.Context, runtime runtimeapi.RuntimeServiceClient) error {
	sandboxes, err := runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("listing pod sandboxes: %w", err)
	}
	for _, s := range sandboxes.Items {
		fmt.Printf("sandbox   %s  %s/%s  %s\n", shortID(s.Id), s.Metadata.GetNamespace(), s.Metadata.GetName(), s.State)
	}
	containers, err := runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return fmt.Errorf("listing containers: %w", err)
	}
	for _, c := range containers.Containers {
		fmt.Printf("container %s  %s  sandbox=%s  %s\n", shortID(c.Id), c.Metadata.GetName(), shortID(c.PodSandboxId), c.State)
	}
	return nil
}

func listImages(ctx context.Context, images runtimeapi.ImageServiceClient) error {
	list, err := images.ListImages(ctx, &runtimeapi.ListImagesRequest{})
	if err != nil {
		return fmt.Errorf("listing images: %w", err)
	}
	for _, img := range list.Images {
		fmt.Printf("%s  %v  %d\n", shortID(img.Id), img.RepoTags, img.Size)
	}
	return nil
}

// removeAllSandboxes stops and removes every pod sandbox, a few at a time: each
// one runs CNI DEL and several iptables calls, which take about a second.
func removeAllSandboxes(ctx context.Context, runtime runtimeapi.RuntimeServiceClient, parallel int) error {
	sandboxes, err := runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("listing pod sandboxes: %w", err)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	slots := make(chan struct{}, max(parallel, 1))
	for _, s := range sandboxes.Items {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			if err := removeSandbox(ctx, runtime, s); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func removeSandbox(ctx context.Context, runtime runtimeapi.RuntimeServiceClient, s *runtimeapi.PodSandbox) error {
	name := s.Metadata.GetNamespace() + "/" + s.Metadata.GetName()
	start := time.Now()
	if _, err := runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: s.Id}); err != nil {
		return fmt.Errorf("stopping sandbox %s (%s): %w", name, shortID(s.Id), err)
	}
	if _, err := runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: s.Id}); err != nil {
		return fmt.Errorf("removing sandbox %s (%s): %w", name, shortID(s.Id), err)
	}
	slog.Info("removed pod sandbox", "pod", name, "id", shortID(s.Id), "took", time.Since(start).Round(time.Millisecond))
	return nil
}

func shortID(id string) string {
	if len(id) > 13 {
		return id[:13]
	}
	return id
}
