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

	// The messages are worded as Concourse's, which pkg/pipeline matches.
	resources := map[string]int{}
	for i, r := range cfg.Resources {
		if first, ok := resources[r.Name]; ok {
			errs = append(errs, fmt.Sprintf("resources[%d] and resources[%d] have the same name ('%s')", first, i, r.Name))
			continue
		}
		resources[r.Name] = i
	}
	jobs := map[string]int{}
	for i, j := range cfg.Jobs {
		if j.Name == "" {
			errs = append(errs, fmt.Sprintf("jobs[%d] has no name", i))
		}
		if first, ok := jobs[j.Name]; ok {
			errs = append(errs, fmt.Sprintf("jobs[%d] and jobs[%d] have the same name ('%s')", first, i, j.Name))
			continue
		}
		jobs[j.Name] = i
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
			if _, ok := resources[resource]; !ok {
				errs = append(errs, fmt.Sprintf("jobs.%s: %s(%s): unknown resource '%s'", j.Name, kind, name, resource))
			}
			for _, p := range s.Passed {
				if _, ok := jobs[p]; !ok {
					errs = append(errs, fmt.Sprintf("jobs.%s: %s(%s).passed: no matching job(s) for '%s'", j.Name, kind, name, p))
				}
			}
		})
	}
	return cfg, warnings, errs, nil
}
