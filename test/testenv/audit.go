package testenv

import (
	"context"
	"fmt"
	"strings"

	"github.com/porter-ci/porter/pkg/blobstore"
)

// AuditPrefix is where a server's build keeps its audit records,
// builds/<id>-<creation time>/, found by listing: specs know a build's ID,
// not the time the database gave it.
func AuditPrefix(ctx context.Context, store blobstore.Store, buildID int64) (string, error) {
	start := fmt.Sprintf("builds/%d-", buildID)
	objs, err := store.List(ctx, start)
	if err != nil {
		return "", fmt.Errorf("audit records of build %d: %w", buildID, err)
	}
	prefixes := map[string]bool{}
	for _, o := range objs {
		dir, _, _ := strings.Cut(strings.TrimPrefix(o.Key, start), "/")
		prefixes[start+dir+"/"] = true
	}
	if len(prefixes) != 1 {
		return "", fmt.Errorf("audit records of build %d: %d prefixes under %s (%d objects), want 1", buildID, len(prefixes), start, len(objs))
	}
	var prefix string
	for p := range prefixes {
		prefix = p
	}
	return prefix, nil
}

// TypeChainPipeline is a pipeline whose resource is of type t<n-1>, each
// t<i> fetched by t<i-1> and t0 by registry-image: n custom types deep.
func TypeChainPipeline(n int) string {
	var b strings.Builder
	b.WriteString("resource_types:\n- {name: t0, type: registry-image, source: {repository: busybox}}\n")
	for i := 1; i < n; i++ {
		fmt.Fprintf(&b, "- {name: t%d, type: t%d, source: {repository: busybox}}\n", i, i-1)
	}
	fmt.Fprintf(&b, "resources:\n- {name: r, type: t%d, source: {}}\njobs:\n- name: j\n  plan:\n  - get: r\n", n-1)
	return b.String()
}
