package podspec

import (
	"flag"
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"
)

// AddBoundsFlags declares the serve flags of a worker's step pod bounds.
func AddBoundsFlags(fs *flag.FlagSet, b *Bounds) {
	fs.BoolVar(&b.HardCPULimit, "step-hard-cpu-limit", false, "also make a task's container_limits.cpu the step's CPU limit (default: a request only, as Concourse's relative shares)")
	fs.Var(quantityFlag{&b.VolumeSizeLimit}, "step-volume-size-limit", "sizeLimit of each emptyDir of a step pod, e.g. 10Gi (default: none); the kubelet evicts a pod writing more")
	fs.Var(quantityFlag{&b.EphemeralStorageRequest}, "step-ephemeral-storage-request", "ephemeral-storage request of the step container, e.g. 1Gi (default: none)")
	fs.Int64Var(&b.MaxExtractBytes, "step-max-extract-bytes", 0, "most bytes a step's sidecar extracts from one input or cache (0: 64 GiB)")
	fs.Int64Var(&b.MaxExtractFiles, "step-max-extract-files", 0, "most files and directories a step's sidecar extracts from one input or cache (0: 2,000,000)")
	fs.Var(quantityFlag{&b.EphemeralStorageLimit}, "step-ephemeral-storage-limit", "ephemeral-storage limit of the step container, e.g. 20Gi (default: none)")
}

// quantityFlag is a resource quantity flag; unset leaves nil.
type quantityFlag struct{ q **resource.Quantity }

func (f quantityFlag) String() string {
	if f.q == nil || *f.q == nil {
		return ""
	}
	return (*f.q).String()
}

func (f quantityFlag) Set(s string) error {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return fmt.Errorf("quantity %q: %w", s, err)
	}
	if q.Sign() <= 0 {
		return fmt.Errorf("quantity %q is not positive", s)
	}
	*f.q = &q
	return nil
}
