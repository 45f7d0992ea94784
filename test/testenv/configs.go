package testenv

import (
	"fmt"
	"strings"
)

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
