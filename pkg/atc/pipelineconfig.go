package atc

import (
	"bytes"
	"encoding/json"
	"fmt"

	"sigs.k8s.io/yaml"

	"github.com/porter-ci/porter/pkg/concourse"
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
//
// Every caller goes through here: the full parser and validator
// (pkg/pipeline) replaces this body.
func parsePipelineConfig(body []byte, contentType string) (cfg *concourse.Config, warnings []configWarning, errs []string, err error) {
	raw, err := yaml.YAMLToJSON(body)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("read %s: %w", contentType, err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	cfg = &concourse.Config{}
	if err := dec.Decode(cfg); err != nil {
		return nil, nil, nil, err
	}

	resources := map[string]bool{}
	for _, r := range cfg.Resources {
		if resources[r.Name] {
			errs = append(errs, fmt.Sprintf("resources: resource %q is defined more than once", r.Name))
		}
		resources[r.Name] = true
	}
	jobs := map[string]bool{}
	for _, j := range cfg.Jobs {
		if j.Name == "" {
			errs = append(errs, "jobs: a job has no name")
		}
		if jobs[j.Name] {
			errs = append(errs, fmt.Sprintf("jobs: job %q is defined more than once", j.Name))
		}
		jobs[j.Name] = true
	}
	for _, j := range cfg.Jobs {
		eachJobStep(&j, func(s *concourse.Step) {
			name, kind := s.Get, "get"
			if s.Put != "" {
				name, kind = s.Put, "put"
			}
			if name == "" {
				return
			}
			resource := name
			if s.Resource != "" {
				resource = s.Resource
			}
			if !resources[resource] {
				errs = append(errs, fmt.Sprintf("jobs.%s: %s(%s): unknown resource %q", j.Name, kind, name, resource))
			}
			for _, p := range s.Passed {
				if !jobs[p] {
					errs = append(errs, fmt.Sprintf("jobs.%s: %s(%s).passed: unknown job %q", j.Name, kind, name, p))
				}
			}
		})
	}
	return cfg, warnings, errs, nil
}
