package concourse

import "encoding/json"

// PublicPlan is a plan as anyone who may see the build may read it (the
// build's plan route, the across-substeps event): its shape and step
// names, without task configs, sources, params or var values.
func PublicPlan(p *Plan) any {
	body, err := json.Marshal(p)
	if err != nil {
		return nil
	}
	var tree any
	if err := json.Unmarshal(body, &tree); err != nil {
		return nil
	}
	return PublicPlanTree(tree)
}

// PublicPlanTree is PublicPlan of a plan decoded as JSON.
func PublicPlanTree(v any) any {
	switch n := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(n))
		for k, child := range n {
			t, isMap := child.(map[string]any)
			if !isMap {
				out[k] = PublicPlanTree(child)
				continue
			}
			switch k {
			case "task":
				out[k] = map[string]any{"name": t["name"], "privileged": t["privileged"], "hermetic": t["hermetic"]}
			case "get", "put", "check":
				out[k] = map[string]any{"name": t["name"], "type": t["type"], "resource": t["resource"]}
			case "load_var":
				out[k] = map[string]any{"name": t["name"]}
			case "set_pipeline":
				out[k] = map[string]any{"name": t["name"], "team": t["team"], "instance_vars": t["instance_vars"]}
			case "across":
				// Concourse shows the vars' names; the substeps come in
				// the across-substeps event once the values are known.
				var vars []any
				if list, ok := t["vars"].([]any); ok {
					for _, v := range list {
						if m, ok := v.(map[string]any); ok {
							vars = append(vars, map[string]any{"name": m["name"]})
						}
					}
				}
				pub := map[string]any{"vars": vars}
				if ff, ok := t["fail_fast"].(bool); ok && ff {
					pub["fail_fast"] = true
				}
				out[k] = pub
			default:
				out[k] = PublicPlanTree(child)
			}
		}
		return out
	case []any:
		out := make([]any, len(n))
		for i, child := range n {
			out[i] = PublicPlanTree(child)
		}
		return out
	}
	return v
}
