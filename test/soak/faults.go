package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/test/testenv"
)

// allFaults are the faults the soak knows, by name.
var allFaults = []string{"atc-kill", "postgres", "minio", "kube-apiserver", "kubelet", "pod-delete"}

// injectFaults injects one fault at a time, at jittered intervals of
// cfg.FaultEvery, until ctx ends.
func (s *soak) injectFaults(ctx context.Context) {
	if len(s.cfg.Faults) == 0 {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.jitter(s.cfg.FaultEvery)):
		}
		name := s.cfg.Faults[s.intn(len(s.cfg.Faults))]
		start := time.Now()
		// A fault once begun is carried through: a server left down is
		// not a finding.
		err := s.inject(context.WithoutCancel(ctx), name)
		f := faultRecord{Name: name, Start: start, End: time.Now()}
		if err != nil {
			f.Error = err.Error()
		}
		fmt.Printf("soak: %s fault %s (%s)%s\n", start.Format("15:04:05"), name, f.End.Sub(start).Round(time.Millisecond), errSuffix(err))
		s.rec.fault(f)
	}
}

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return ": " + err.Error()
}

func (s *soak) inject(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	switch name {
	case "atc-kill":
		if err := s.srv.Kill(); err != nil {
			return fmt.Errorf("SIGKILL the server: %w", err)
		}
		return s.srv.Start(ctx)
	case "postgres":
		return s.pg.Restart(ctx)
	case "minio", "kube-apiserver", "kubelet":
		return restartClusterPart(ctx, name)
	case "pod-delete":
		return s.deleteRunningStepPod(ctx)
	}
	return fmt.Errorf("unknown fault %q", name)
}

// restartClusterPart kills one part of the local cluster and starts it
// again (hack/cluster-up.sh restart).
func restartClusterPart(ctx context.Context, name string) error {
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "cluster-up.sh"), "restart", name)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("hack/cluster-up.sh restart %s: %w: %s", name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// deleteRunningStepPod deletes, with no grace, a step pod whose step is
// running: someone else's kubectl delete, a preemption, a lost node.
func (s *soak) deleteRunningStepPod(ctx context.Context) error {
	pods, err := s.env.Admin.CoreV1().Pods(s.ns.Name).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list step pods: %w", err)
	}
	var running []string
	ended := s.endedBuilds(ctx, pods.Items, 0)
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && !ended[p.Labels[podspec.LabelBuild]] && !stepEnded(&p) {
			running = append(running, p.Name)
		}
	}
	if len(running) == 0 {
		return errors.New("no running step pod to delete")
	}
	name := running[s.intn(len(running))]
	zero := int64(0)
	if err := s.env.Admin.CoreV1().Pods(s.ns.Name).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		return fmt.Errorf("delete pod %s: %w", name, err)
	}
	fmt.Printf("soak: deleted running step pod %s\n", name)
	return nil
}

// stepEnded: the pod's step container has terminated, or the whole pod has.
// (A step kept for intercept keeps its container running: see endedBuilds.)
func stepEnded(p *corev1.Pod) bool {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return true
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.Name == podspec.StepContainerName {
			return c.State.Terminated != nil
		}
	}
	return false
}
