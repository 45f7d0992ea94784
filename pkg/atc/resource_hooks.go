package atc

import (
	"context"

	"github.com/porter-ci/porter/pkg/concourse"
)

// resourceVersion is a version of a resource with its metadata.
type resourceVersion struct {
	Version  map[string]string         `json:"version"`
	Metadata []concourse.MetadataField `json:"metadata,omitempty"`
}

// recordCheck is called after a check step succeeded, with the versions in
// the order check printed them (oldest first). The scheduler saves them.
func (s *Server) recordCheck(ctx context.Context, b *build, p *concourse.CheckPlan, versions []resourceVersion) error {
	return nil
}

// recordBuildVersion is called after a get (input, name is the step's) or
// a put (not input) succeeded. The scheduler records the build's inputs
// and outputs.
func (s *Server) recordBuildVersion(ctx context.Context, b *build, name, resource string, v resourceVersion, input bool) error {
	return nil
}
