package apiserver

import (
	"fmt"

	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/pipeline"
)

// configWarning is a warning about a config that is saved anyway, as
// Concourse words it ({"type": "invalid_identifier", "message": ...}).
type configWarning struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// parsePipelineConfig reads a pipeline config sent by `fly set-pipeline`
// (YAML or JSON). err is a config that cannot be read at all; errs are the
// rules it breaks. Either way nothing may be saved.
// baseTypes are the resource types the workers provide (nil: Porter's own).
func parsePipelineConfig(body []byte, contentType string, baseTypes []string) (cfg *concourse.Config, warnings []configWarning, errs []string, err error) {
	cfg, err = pipeline.Parse(body)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("malformed config (%s): %w", contentType, err)
	}
	ws, errs := pipeline.Validate(cfg, pipeline.Options{BaseTypes: baseTypes})
	for _, w := range ws {
		warnings = append(warnings, configWarning{Type: w.Type, Message: w.Message})
	}
	return cfg, warnings, errs, nil
}
